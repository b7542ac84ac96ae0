"""The CLEANER agent plugin for OpenRLHF (>= 0.11): ``--train.agent_func_path trainers/openrlhf_plugin/executor.py``.

OpenRLHF loads this file by path and instantiates its module-level
:class:`AgentExecutor` with no arguments, once per vLLM rollout actor, then awaits
``execute(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images)``
for every sample (``openrlhf/trainer/ray/vllm_engine.py``). ``execute`` drives the
shared rollout core (:func:`harness.core.rollout.rollout`, with SAAR from
:mod:`harness.core.saar`) token-in, token-out against the engine, scores the final answer
with the shared scoring, and returns the dict OpenRLHF turns into an experience:

* ``observation_tokens``: the *purified* trajectory (SAAR has already rewritten it:
  shallow keeps the installed turn's reasoning ids and splices in the new call's ids,
  deep puts in the regenerated turn's ids), see :mod:`trainers.core.tokens`;
* ``action_ranges``: the assistant turns only; tool output, prompts and template
  headers lie outside them, so no loss falls on them;
* ``rollout_log_probs``: ``None`` unless the job asks for them (``sampling_params.logprobs`` set, which
  OpenRLHF does when ``--algo.advantage.is_correction_level`` is not ``off``). Then one value per observation
  token (0 outside the action ranges): a token sampled in the final context keeps its sampled log-prob; a
  token SAAR put in (sampled with the failed turn's error in view) gets the engine's log-prob under the final
  context, from one prefill of the finished sequence (:mod:`trainers.core.rescore`, which needs plain
  sampling: temperature 1, no top-p). An untouched trajectory costs no prefill;
* ``reward`` (+1/-1, or the code fraction, plus the overlong penalty when configured),
  ``scores`` in [0, 1] for dynamic filtering;
* ``extra_logs``: SAAR events by kind, tool calls and failures, turns, tokens, the
  token path's own counts (:func:`token_logs`) and ``rollout_failed`` (0 or 1); with rollout log-probs, the SAAR
  off-policy gap (:data:`trainers.core.rescore.GAP_KEYS`).

A rollout that raises (a template the tokenizer cannot render, a label that cannot be read, a
sandbox image that is missing, a sandbox still failing after its reruns) is that rollout's failure:
:meth:`AgentExecutor.execute` records it (kind, sample, message; logged as a warning) and returns
a placeholder in its place, because OpenRLHF needs ``n_samples_per_prompt`` results per prompt
(its group normalisation reshapes the rewards by group) and the same ``extra_logs`` keys in
every sample. The placeholder is the prompt's tokens with no action range, so no loss falls on
it; its reward and score are 0 and ``rollout_failed`` is 1, so the step's mean of
``rollout_failed`` is the fraction of rollouts that failed. When more than
``failed_rollout_limit`` of an executor's last ``failed_rollout_window`` rollouts failed, the
job stops (:class:`trainers.core.faults.RolloutsKeepFailing`). Settings of the job (rollout
log-probs requested with SAAR on and sampling other than plain) are not a rollout's failure: they raise at once.

Lengths: each generation may use at most ``sampling_params.max_tokens`` (OpenRLHF's
``--rollout.max_new_tokens``) and never more than what is left of ``max_length``
(``--data.max_len``). The overlong penalty counts *generated* tokens only (the action
ranges), because OpenRLHF 0.11.2 measures its response length from the first to the
last action token, tool output included (its issue #1243).

Sandboxes: a sandbox is leased from the backend for each program run and returned
right after, at most ``sandbox_pool`` at once per executor (one executor per vLLM
engine), so a docker node runs at most ``engines x sandbox_pool`` containers however
many rollouts are in flight.

Configuration comes from the environment variable ``CLEANER_AGENT_CONFIG`` (JSON of
:class:`ExecutorConfig` fields), which the launcher puts into the Ray job's runtime env; without it the
executor refuses to start (it holds the SAAR switch, which has no default).

This file is loaded by path (not as ``trainers.openrlhf_plugin.executor``), so it defines no dataclass itself:
its configuration lives in :mod:`trainers.core.config`.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from copy import deepcopy
from typing import Any

from openrlhf.utils.agent import AgentExecutorBase

from harness.core.chat import tool_env_for, tool_result_counter
from harness.core.messages import Generation, Message
from harness.core.problems import rollout_config
from harness.core.response import response_text
from harness.core.rollout import Trajectory, rollout
from harness.core.seeds import trajectory_seed
from sandboxes.base import ExecResult, Sandbox
from trainers.core._compat import get_backend, get_render
from trainers.core.config import ExecutorConfig
from trainers.core.data import from_label
from trainers.core.faults import FailureLedger, RolloutFailure, rerun_on_sandbox_failure
from trainers.core.rescore import GAP_KEYS, SampleLog, check_plain_sampling, final_log_probs, sampled_logprobs
from trainers.core.reward import Outcome, compute_reward, overlong_penalty
from trainers.core.tokens import SampledStore, TokenTrajectory, assemble


def extra_logs(traj: Trajectory, outcome: Outcome) -> dict[str, float]:
    """Per-sample numbers OpenRLHF averages and logs (scalars only; :mod:`harness.core.metrics` defines each)."""
    return {**traj.metrics().scalars(), "correct": float(outcome.correct)}


def token_logs(final: TokenTrajectory, penalty: float) -> dict[str, float]:
    """The token path's per-sample numbers: what was trained on and how its ids were obtained.

    ``response_tokens`` counts generated tokens only (the action ranges). ``retokenized_turns``
    are turns whose ids were not sampled (0 unless a turn came from outside the engine);
    ``template_mismatch_turns`` are sampled turns the chat template would render differently
    (kept as sampled, see :mod:`trainers.core.tokens`).
    """
    return {
        "response_tokens": float(sum(end - start for start, end in final.action_ranges)),
        "retokenized_turns": float(final.sources.count("retokenized")),
        "spliced_turns": float(final.sources.count("spliced")),
        "template_mismatch_turns": float(final.matches_template.count(False)),
        "overlong_penalty": penalty,
    }


def _wants_logprobs(sampling_params: Any) -> bool:
    """Whether the job asks for rollout log-probs (OpenRLHF: importance-sampling correction on)."""
    return getattr(sampling_params, "logprobs", None) is not None


def _check_sampling(sampling_params: Any, config: ExecutorConfig) -> None:
    """Refuse sampling settings of the job the executor cannot serve."""
    if _wants_logprobs(sampling_params) and config.saar.enabled:
        check_plain_sampling(sampling_params, "--algo.advantage.is_correction_level with SAAR on")


def _sample_name(prompt: str, label: Any) -> str:
    """A failed rollout's sample: its item's id when the label names one, else the prompt's start."""
    try:
        return repr(from_label(label).id)
    except Exception:  # noqa: BLE001 - the label may be what failed
        return repr(str(prompt)[:60])


class _LeasedSandbox(Sandbox):
    """A sandbox leased from ``backend`` for each program run, at most as many at once as ``slots`` allows."""

    backend = "leased"

    def __init__(self, backend: Any, slots: asyncio.Semaphore) -> None:
        self._backend = backend
        self._slots = slots

    async def run_python(self, code, *, timeout=10.0, stdin=b"", files=None) -> ExecResult:
        async with self._slots:
            sandbox = await self._backend.acquire()
            try:
                return await sandbox.run_python(code, timeout=timeout, stdin=stdin, files=files)
            finally:
                await self._backend.release(sandbox)


class AgentExecutor(AgentExecutorBase):
    """CLEANER's rollout (tool use + SAAR) as an OpenRLHF agent executor."""

    def __init__(self, config: ExecutorConfig | None = None, render: Any = None, backend: Any = None) -> None:
        self.config = config or ExecutorConfig.from_env()
        self._rollout_config = self.config.rollout_config()
        # the run's seed; None: a fresh one per executor
        self._seed = random.SystemRandom().getrandbits(32) if self.config.seed is None else self.config.seed
        self._drawn: Counter[str] = Counter()  # trajectories drawn so far per problem: its next "epoch"
        self._render = render
        self._backend = backend
        self._slots: asyncio.Semaphore | None = None
        self.ledger = FailureLedger(self.config.failed_rollout_limit, self.config.failed_rollout_window)

    def _get_render(self) -> Any:
        if self._render is None:
            self._render = get_render()
        return self._render

    def _sandbox(self) -> Sandbox:
        """This rollout's sandbox: program runs leased from the engine's bounded pool."""
        if self._backend is None:
            self._backend = get_backend(self.config.sandbox, runtime=self.config.env.runtime)
        if self._slots is None:  # made inside the engine's event loop
            self._slots = asyncio.Semaphore(self.config.sandbox_pool)
        return _LeasedSandbox(self._backend, self._slots)

    async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None):
        """:meth:`run`'s result; a rollout that raises gives :meth:`failed_result` and is recorded in ``ledger``
        (which stops the job when too many failed)."""
        _check_sampling(sampling_params, self.config)  # the job's settings: not contained
        try:
            result, _ = await self.run(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images)
        except Exception as exc:  # noqa: BLE001 - any fault of one rollout is that rollout's (module docstring)
            self.ledger.failed(RolloutFailure(type(exc).__name__, _sample_name(prompt, label), str(exc)))
            logprobs = _wants_logprobs(sampling_params)
            return self.failed_result(prompt, label, images, max_length, hf_tokenizer, logprobs=logprobs)
        self.ledger.ok()
        return result

    def failed_result(
        self, prompt: str, label: Any, images: Any, max_length: int, tokenizer: Any, *, logprobs: bool = False
    ) -> dict[str, Any]:
        """The placeholder of a failed rollout: the prompt's tokens, no action range (no loss), reward 0,
        and every ``extra_logs`` key a finished rollout has (0, but ``rollout_failed``: 1); with ``logprobs``
        (the job asks for them) rollout log-probs of 0, as every other sample of the batch has some."""
        ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])[: max_length - 1]
        ids += [tokenizer.eos_token_id] * max(0, 2 - len(ids))  # OpenRLHF's action mask drops the first position
        empty = Trajectory([], False, [], "running", 0, 0, 0, 0, {}, 0, 0)
        logs = {**extra_logs(empty, Outcome(0.0, 0.0, False)), **token_logs(TokenTrajectory(ids, [], []), 0.0)}
        if logprobs:
            logs.update(dict.fromkeys(GAP_KEYS, 0.0))
        return {
            "prompt": prompt,
            "label": label,
            "images": images,
            "mm_train_inputs": None,
            "observation_tokens": ids,
            "action_ranges": [],
            "rollout_log_probs": [0.0] * len(ids) if logprobs else None,
            "truncated": False,
            "reward": 0.0,
            "scores": 0.0,
            "extra_logs": {**logs, "sandbox_reruns": 0.0, "rollout_failed": 1.0},
        }

    async def run(
        self, prompt: str, label: Any, sampling_params: Any, max_length: int, tokenizer: Any, engine: Any, images=None
    ) -> tuple[dict[str, Any], Trajectory]:
        """:meth:`execute`, also returning the message-level trajectory (for tests and logs)."""
        _check_sampling(sampling_params, self.config)
        wants_logprobs = _wants_logprobs(sampling_params)
        if images:
            raise ValueError("the CLEANER executor handles text prompts only; this sample has images")
        if not label:
            raise ValueError(
                "the CLEANER executor needs a label per prompt: pass --data.label_key label "
                "with data written by trainers.core.data.export_openrlhf"
            )
        item = from_label(label)
        render = self._get_render()
        messages = item.messages()
        n_prompt = len(messages)
        # the trajectory's seed, as Inspect seeds the k-th epoch of a sample (harness.core.seeds): its SAAR draw
        # and every generation's seed derive from it, so a rollout samples the same whatever shares the engine's
        # batch, and a rerun after a sandbox failure starts from the same draws
        self._drawn[item.id] += 1
        seed = trajectory_seed(self._seed, item.id, self._drawn[item.id])
        # the parse mode follows the problem kind: a code item's final ```python block is its answer; a call's span
        # ends with this model's end-of-turn token
        config = rollout_config(
            item.kind, self._rollout_config, tool_env=tool_env_for(tokenizer, self._rollout_config.tool_env)
        )

        async def attempt() -> tuple[Trajectory, Outcome, SampledStore, SampleLog]:
            store = SampledStore(env=config.tool_env)  # a rerun starts from nothing the failed attempt sampled
            samples = SampleLog()

            async def generate(
                context: list[Message], *, seed: int | None = None, max_tokens: int | None = None
            ) -> Generation:
                ctx = assemble(
                    tokenizer,
                    context,
                    n_prompt,
                    env=config.tool_env,
                    store=store,
                    add_generation_prompt=True,
                    render=render,
                )
                params = deepcopy(sampling_params)
                if seed is not None:  # a seeded trajectory (harness.core.seeds): vLLM honours a per-request seed
                    params.seed = seed
                left = max_length - len(ctx.ids)
                if max_tokens is not None:  # a response budget: what is left of it
                    left = min(left, max_tokens)
                per_turn = getattr(sampling_params, "max_tokens", None)  # --rollout.max_new_tokens
                params.max_tokens = left if per_turn is None else min(per_turn, left)
                if params.max_tokens <= 0:
                    return Generation(text="", truncated=True, output_tokens=0, token_ids=[])
                out = (await engine.generate(ctx.ids, params)).outputs[0]
                ids = list(out.token_ids)
                text = tokenizer.decode(ids, skip_special_tokens=False)
                eos = getattr(tokenizer, "eos_token", None)
                if eos and text.endswith(eos):
                    text = text[: -len(eos)]
                store.add(text, ids)
                if wants_logprobs:
                    samples.add(ctx.ids, ids, sampled_logprobs(out))
                return Generation(
                    text=text, truncated=out.finish_reason == "length", output_tokens=len(ids), token_ids=ids
                )

            sandbox = self._sandbox()
            count = tool_result_counter(tokenizer) if config.response_budget else None
            traj = await rollout(messages, generate, sandbox, config, seed=seed, count_tokens=count)
            # the reference's reward reads the whole response, tool output included (harness.core.response)
            judged = response_text(traj.messages) if self.config.reward_on_response else traj.final_text
            outcome = await compute_reward(item, judged, sandbox, lenient=self.config.lenient_reward)
            return traj, outcome, store, samples

        (traj, outcome, store, samples), reruns = await rerun_on_sandbox_failure(
            attempt, retries=self.config.sandbox_retries, what=f"rollout of {item.id!r}"
        )
        final = assemble(tokenizer, traj.messages, n_prompt, env=config.tool_env, store=store, render=render)
        prompt_ids = assemble(
            tokenizer, messages, n_prompt, env=config.tool_env, add_generation_prompt=True, render=render
        ).ids
        penalty = self._overlong_penalty(final, n_prompt_ids=len(prompt_ids))
        log_probs, gap = None, {}
        if wants_logprobs:
            log_probs, gap = await final_log_probs(engine, final.ids, final.action_ranges, samples, max_length)
        result = {
            "prompt": prompt,
            "label": label,
            "images": images,
            "mm_train_inputs": None,
            "observation_tokens": final.ids,
            "action_ranges": final.action_ranges,
            "rollout_log_probs": log_probs,
            "truncated": traj.stop_reason == "length",
            "reward": outcome.reward + penalty,
            "scores": outcome.score,
            "extra_logs": {
                **extra_logs(traj, outcome),
                **token_logs(final, penalty),
                **gap,
                "sandbox_reruns": float(reruns),
                "rollout_failed": 0.0,
            },
        }
        return result, traj

    def _overlong_penalty(self, final: TokenTrajectory, n_prompt_ids: int) -> float:
        """DAPO's penalty over the tokens the tool environment's budget counts: generated tokens (``project``),
        or every response token, tool output included (``reference``: verl's DAPO reward counts the response)."""
        cfg = self.config
        if cfg.overlong_buffer_len is None or cfg.max_new_tokens is None:
            return 0.0
        if cfg.env.counts_response:  # from the first generated token to the last, tool results between
            counted = final.action_ranges[-1][1] - n_prompt_ids if final.action_ranges else 0
        else:
            counted = sum(end - start for start, end in final.action_ranges)
        return overlong_penalty(counted, cfg.max_new_tokens, cfg.overlong_buffer_len, cfg.overlong_penalty_factor)
