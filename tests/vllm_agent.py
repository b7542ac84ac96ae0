"""An OpenRLHF agent file for tests/test_executor_vllm.py: the project's executor, recording the engine.

OpenRLHF loads this file by path (``--train.agent_func_path``) inside its vLLM rollout actor and
awaits ``AgentExecutor().execute(...)`` with its own arguments. The class below hands them, unchanged,
to :class:`trainers.openrlhf_plugin.executor.AgentExecutor` (SAAR on, or off when the sampling params'
``extra_args`` say ``{"saar": false}``), with the engine wrapped so that every ``generate`` call and
the ids vLLM returned are recorded, and adds what the test checks the result against: the recorded
calls, the message-level trajectory and its SAAR events. When ``extra_args`` say ``{"inject": true}``,
every other rollout's engine raises after its first generation (an injected fault in the middle of a
rollout) and the rollout goes through :meth:`execute`, which contains it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainers.core.config import ExecutorConfig
from trainers.openrlhf_plugin.executor import AgentExecutor as CleanerExecutor


class RecordingEngine:
    """Forwards ``generate`` to OpenRLHF's engine (the rollout actor) and records each call and its output."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.calls: list[dict[str, Any]] = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        out = await self.engine.generate(prompt_token_ids, sampling_params, multi_modal_data=multi_modal_data)
        first = out.outputs[0]
        self.calls.append(
            {
                "prompt_ids": list(prompt_token_ids),
                "ids": list(first.token_ids),
                "text": first.text,
                "finish_reason": first.finish_reason,
                "max_tokens": sampling_params.max_tokens,
                "seed": sampling_params.seed,
            }
        )
        return out


class FailingEngine(RecordingEngine):
    """Raises after its first generation: a rollout's own fault, after the engine did real work."""

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        await super().generate(prompt_token_ids, sampling_params, multi_modal_data)
        raise RuntimeError("injected fault after a generation")


class AgentExecutor(CleanerExecutor):
    def __init__(self) -> None:
        super().__init__()  # the configuration from CLEANER_AGENT_CONFIG, as on a cluster
        off = dataclasses.replace(self.config, saar=dataclasses.replace(self.config.saar, enabled=False))
        self._off = CleanerExecutor(off)
        self._injected = 0

    async def execute(self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images=None):
        extra = getattr(sampling_params, "extra_args", None) or {}
        if extra.get("inject"):
            self._injected += 1
            engine = (FailingEngine if self._injected % 2 else RecordingEngine)(llm_engine)
            result = await super().execute(prompt, label, sampling_params, max_length, hf_tokenizer, engine, images)
            result["test_record"] = {"calls": engine.calls, "injected": isinstance(engine, FailingEngine)}
            return result
        saar = extra.get("saar", True)
        executor = self if saar else self._off
        engine = RecordingEngine(llm_engine)
        result, traj = await executor.run(prompt, label, sampling_params, max_length, hf_tokenizer, engine, images)
        result["test_record"] = {
            "calls": engine.calls,
            "messages": [{"role": m.role, "text": m.text, "content": m.content} for m in traj.messages],
            "events": [dataclasses.asdict(e) for e in traj.events],
            "final_text": traj.final_text,
            "stop_reason": traj.stop_reason,
            "config": (self.config if saar else self._off.config).to_json(),
        }
        return result


__all__ = ["AgentExecutor", "ExecutorConfig"]
