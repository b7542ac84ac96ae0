"""An OpenRLHF agent file for tests/test_executor_vllm.py: the project's executor, recording the engine.

OpenRLHF loads this file by path (``--train.agent_func_path``) inside its vLLM rollout actor and
awaits ``AgentExecutor().execute(...)`` with its own arguments. The class below hands them, unchanged,
to :class:`trainers.openrlhf_plugin.executor.AgentExecutor` (SAAR on, or off when the sampling params'
``extra_args`` say ``{"saar": false}``), with the engine wrapped so that every ``generate`` call and
the ids vLLM returned are recorded, and adds what the test checks the result against: the recorded
calls (with their sampled log-probs when the job asked for them), the executor's scoring prefills, the
message-level trajectory and its SAAR events, and, with log-probs, the test's own prefill of the final
sequence. When ``extra_args`` say ``{"inject": true}``, every other rollout's engine raises after its
first generation (an injected fault in the middle of a rollout) and the rollout goes through
:meth:`execute`, which contains it. When they say ``{"fail_first": true}``, SAAR is on and the first program of
every rollout fails in the sandbox (it is replaced by one that raises), so that SAAR regenerates a turn of every
rollout with a real error message in view.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sandboxes.base import ExecResult, Sandbox
from trainers.core.config import ExecutorConfig
from trainers.core.rescore import rescore, sampled_logprobs
from trainers.openrlhf_plugin.executor import AgentExecutor as CleanerExecutor


def _whole_prefills() -> None:
    """Build the actor's engine without chunked prefill, as the project's CPU engines run (docs/models.md).

    The executor seeds every request, and vLLM 0.32's CPU build kills its engine on a chunked prefill of a seeded
    request ("CPU Generator does not use offset"); CUDA generators are unaffected. OpenRLHF's create_vllm_engines has
    no switch for it, but loads this file in the actor before it builds ``vllm.AsyncEngineArgs``, so the default is
    set here.
    """
    import vllm

    class WholePrefillArgs(vllm.AsyncEngineArgs):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("enable_chunked_prefill", False)
            super().__init__(*args, **kwargs)

    vllm.AsyncEngineArgs = WholePrefillArgs


_whole_prefills()


class RecordingEngine:
    """Forwards ``generate`` to OpenRLHF's engine (the rollout actor) and records each call and its output; a
    prefill that scores its prompt (``prompt_logprobs``) is recorded apart, in ``prefills``."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.calls: list[dict[str, Any]] = []
        self.prefills: list[list[int]] = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        out = await self.engine.generate(prompt_token_ids, sampling_params, multi_modal_data=multi_modal_data)
        if sampling_params.prompt_logprobs is not None:
            self.prefills.append(list(prompt_token_ids))
            return out
        first = out.outputs[0]
        self.calls.append(
            {
                "prompt_ids": list(prompt_token_ids),
                "ids": list(first.token_ids),
                "text": first.text,
                "finish_reason": first.finish_reason,
                "max_tokens": sampling_params.max_tokens,
                "seed": sampling_params.seed,
                "logprobs": sampled_logprobs(first) if sampling_params.logprobs is not None else None,
            }
        )
        return out


class FailingEngine(RecordingEngine):
    """Raises after its first generation: a rollout's own fault, after the engine did real work."""

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        await super().generate(prompt_token_ids, sampling_params, multi_modal_data)
        raise RuntimeError("injected fault after a generation")


#: what the first program of a ``fail_first`` rollout is replaced by
FIRST_RUN_FAILS = "raise ValueError('this tool run failed; write the program again')"


class _FirstRunFails(Sandbox):
    """The executor's sandbox, whose first program run fails (a real traceback from the real sandbox)."""

    backend = "first-run-fails"

    def __init__(self, inner: Sandbox) -> None:
        self.inner, self.ran = inner, False

    async def run_python(self, code, *, timeout=10.0, stdin=b"", files=None) -> ExecResult:
        code, self.ran = (code if self.ran else FIRST_RUN_FAILS), True
        return await self.inner.run_python(code, timeout=timeout, stdin=stdin, files=files)


class FirstRunFailsExecutor(CleanerExecutor):
    def _sandbox(self) -> Sandbox:  # one per rollout attempt
        return _FirstRunFails(super()._sandbox())


class AgentExecutor(CleanerExecutor):
    def __init__(self) -> None:
        super().__init__()  # the configuration from CLEANER_AGENT_CONFIG, as on a cluster
        off = dataclasses.replace(self.config, saar=dataclasses.replace(self.config.saar, enabled=False))
        self._off = CleanerExecutor(off)
        self._fail_first = FirstRunFailsExecutor(self.config)
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
        executor = self._fail_first if extra.get("fail_first") else self if saar else self._off
        engine = RecordingEngine(llm_engine)
        result, traj = await executor.run(prompt, label, sampling_params, max_length, hf_tokenizer, engine, images)
        result["test_record"] = {
            "calls": engine.calls,
            "prefills": engine.prefills,
            "messages": [{"role": m.role, "text": m.text, "content": m.content} for m in traj.messages],
            "events": [dataclasses.asdict(e) for e in traj.events],
            "final_text": traj.final_text,
            "stop_reason": traj.stop_reason,
            "config": (self.config if saar else self._off.config).to_json(),
        }
        if result["rollout_log_probs"] is not None:  # the engine's scores of the final sequence, asked apart
            result["test_record"]["prefill"] = await rescore(llm_engine, result["observation_tokens"], max_length)
        return result


__all__ = ["AgentExecutor", "ExecutorConfig"]
