"""The CLEANER agent plugin for OpenRLHF (>= 0.11): ``--train.agent_func_path trainers/executor.py``.

OpenRLHF loads this file by path and instantiates its module-level
:class:`AgentExecutor` with no arguments, once per vLLM rollout actor, then awaits
``execute(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images)``
for every sample (``openrlhf/trainer/ray/vllm_engine.py``). ``execute`` drives the
shared rollout core (:func:`harness.rollout.rollout`, with SAAR from
:mod:`harness.saar`) token-in, token-out against the engine, scores the final answer
with the shared scoring, and returns the dict OpenRLHF turns into an experience:

* ``observation_tokens``: the *purified* trajectory (SAAR has already rewritten it:
  shallow keeps the installed turn's reasoning ids and splices in the new call's ids,
  deep puts in the regenerated turn's ids), see :mod:`trainers.tokens`;
* ``action_ranges``: the assistant turns only; tool output, prompts and template
  headers lie outside them, so no loss falls on them;
* ``rollout_log_probs``: always ``None``. A replaced span was sampled under the failed
  context (the error message in view), so its sampling log-probs are not those of
  the purified context, and the engine cannot recompute them here. The trainer
  recomputes old log-probs over the final sequence, and importance-sampling
  correction must stay off (``--algo.advantage.is_correction_level off``, the
  default; the launcher refuses anything else, and so does this executor);
* ``reward`` (+1/-1, or the code fraction), ``scores`` in [0, 1] for dynamic filtering;
* ``extra_logs``: SAAR events by kind, tool calls and failures, turns, tokens.

Configuration comes from the environment variable ``CLEANER_AGENT_CONFIG`` (JSON of
:class:`ExecutorConfig` fields), which the launcher puts into the Ray job's runtime env.

This file is loaded by path (not as ``trainers.executor``), so it defines no dataclass itself:
its configuration lives in :mod:`trainers.config`.
"""

from __future__ import annotations

import random
from copy import deepcopy
from typing import Any

from openrlhf.utils.agent import AgentExecutorBase

from harness.messages import Generation, Message
from harness.rollout import Trajectory, rollout
from sandboxes.base import Sandbox
from trainers._compat import get_backend, get_render
from trainers.config import ExecutorConfig
from trainers.data import TrainItem
from trainers.reward import Outcome, compute_reward
from trainers.tokens import SampledStore, assemble


def extra_logs(traj: Trajectory, outcome: Outcome, sources: list[str]) -> dict[str, float]:
    """Per-sample numbers OpenRLHF averages and logs (it wants scalars only)."""
    s = traj.summary()
    calls = s["tool_calls"]
    return {
        "saar_on": float(s["saar_on"]),
        "saar_shallow": float(s["saar_shallow"]),
        "saar_deep": float(s["saar_deep"]),
        "saar_purified": float(s["saar_purified"]),
        "saar_exhausted": float(s["saar_exhausted"]),
        "tool_calls": float(calls),
        "tool_failures": float(s["tool_failures"]),
        "tool_failure_rate": s["tool_failures"] / calls if calls else 0.0,
        "failures_kept": float(s["failures_kept"]),
        "turns": float(s["assistant_turns"]),
        "tokens_generated": float(s["tokens_generated"]),
        "tokens_kept": float(s["tokens_kept"]),
        "correct": float(outcome.correct),
        "retokenized_turns": float(sum(1 for x in sources if x == "retokenized")),
    }


class AgentExecutor(AgentExecutorBase):
    """CLEANER's rollout (tool use + SAAR) as an OpenRLHF agent executor."""

    def __init__(self, config: ExecutorConfig | None = None, render: Any = None, backend: Any = None) -> None:
        self.config = config or ExecutorConfig.from_env()
        self._rollout_config = self.config.rollout_config()
        self._rng = random.Random(self.config.seed)
        self._render = render
        self._backend = backend

    def _get_render(self) -> Any:
        if self._render is None:
            self._render = get_render()
        return self._render

    async def _acquire(self) -> Sandbox:
        if self._backend is None:
            self._backend = get_backend(self.config.sandbox)
        return await self._backend.acquire()

    async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None):
        result, _ = await self.run(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images)
        return result

    async def run(
        self, prompt: str, label: Any, sampling_params: Any, max_length: int, tokenizer: Any, engine: Any, images=None
    ) -> tuple[dict[str, Any], Trajectory]:
        """:meth:`execute`, also returning the message-level trajectory (for tests and logs)."""
        if images:
            raise ValueError("the CLEANER executor handles text prompts only; this sample has images")
        if getattr(sampling_params, "logprobs", None) is not None:
            raise ValueError(
                "the CLEANER executor returns no rollout log-probs (SAAR replaces spans sampled under another "
                "context); run with --algo.advantage.is_correction_level off"
            )
        if not label:
            raise ValueError(
                "the CLEANER executor needs a label per prompt: pass --data.label_key label "
                "with data written by trainers.data.export_openrlhf"
            )
        item = TrainItem.from_label(label)
        render = self._get_render()
        messages = item.messages()
        n_prompt = len(messages)
        store = SampledStore()

        async def generate(context: list[Message]) -> Generation:
            ctx = assemble(tokenizer, context, n_prompt, store=store, add_generation_prompt=True, render=render)
            params = deepcopy(sampling_params)
            params.max_tokens = max_length - len(ctx.ids)
            if params.max_tokens <= 0:
                return Generation(text="", truncated=True, output_tokens=0, token_ids=[])
            out = (await engine.generate(ctx.ids, params)).outputs[0]
            ids = list(out.token_ids)
            text = tokenizer.decode(ids, skip_special_tokens=False)
            eos = getattr(tokenizer, "eos_token", None)
            if eos and text.endswith(eos):
                text = text[: -len(eos)]
            store.add(text, ids)
            return Generation(text=text, truncated=out.finish_reason == "length", output_tokens=len(ids), token_ids=ids)

        sandbox = await self._acquire()
        try:
            rng = random.Random(self._rng.random())
            traj = await rollout(messages, generate, sandbox, self._rollout_config, rng)
            outcome = await compute_reward(item, traj.final_text, sandbox, lenient=self.config.lenient_reward)
        finally:
            await self._backend.release(sandbox)
        final = assemble(tokenizer, traj.messages, n_prompt, store=store, render=render)
        result = {
            "prompt": prompt,
            "label": label,
            "images": images,
            "mm_train_inputs": None,
            "observation_tokens": final.ids,
            "action_ranges": final.action_ranges,
            "rollout_log_probs": None,
            "truncated": traj.stop_reason == "length",
            "reward": outcome.reward,
            "scores": outcome.score,
            "extra_logs": extra_logs(traj, outcome, final.sources),
        }
        return result, traj
