"""The CPU trainer's rollouts: the policy as the rollout core's generator, one rollout as token ids for TRL.

:func:`run_one` runs the same rollout core (:func:`harness.core.rollout.rollout`), SAAR switch, tool environment
(the tool the prompt shows, how calls are read and run, the response budget), sandbox and reward
(:mod:`trainers.core.reward`, judged as the recipe's executor says) as the OpenRLHF plugin, and turns the
purified trajectory into the token-level view of :func:`trainers.core.tokens.assemble`: prompt ids, completion
ids and the env mask (1 on the model's tokens, 0 on tool output and template headers), and with
importance-sampling correction on (``cpu.is_correction``) the completion's rollout log-probs
(:mod:`trainers.core.rescore`: as sampled, SAAR's replaced spans rescored under the final context) and the SAAR
off-policy gap. A rollout whose sandbox fails is rerun from its start
(:func:`trainers.core.faults.rerun_on_sandbox_failure`). :func:`step_metrics` is a step's rollout metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.benchmarks.problem import Problem
from harness.core import chat
from harness.core.chat import tool_result_counter
from harness.core.messages import Generation, Message
from harness.core.metrics import TrajectoryMetrics, aggregate, first_attempts, rate
from harness.core.problems import rollout_config as problem_rollout_config
from harness.core.response import response_text
from harness.core.rollout import RolloutConfig, Trajectory, rollout
from trainers.core._compat import get_render
from trainers.core.config import CpuConfig, ExecutorConfig
from trainers.core.faults import rerun_on_sandbox_failure
from trainers.core.rescore import GAP_KEYS, SampleLog, final_log_probs, gap_summary
from trainers.core.reward import Outcome, compute_reward
from trainers.core.tokens import SampledStore, assemble


class PolicySampler:
    """The policy being trained as the rollout core's generator: token ids in, token ids out.

    Requests from concurrent rollouts are generated together by one
    :class:`harness.engines.generation.Batcher`; each request carries its own seed, so what a
    turn samples does not depend on which other turns shared its batch.
    """

    def __init__(self, model: Any, tokenizer: Any, cfg: CpuConfig, max_batch: int) -> None:
        from harness.engines.generation import Batcher  # noqa: PLC0415

        self.tokenizer, self.cfg = tokenizer, cfg
        self.batcher = Batcher(model, tokenizer, max_batch=max_batch, window_s=cfg.batch_window_s)
        # a turn ends where OpenRLHF's engine ends it: at the end-of-turn token (a call turn too)
        self.stop_token_ids = tuple(chat.stop_token_ids(tokenizer, at_call=False))

    async def __call__(self, context_ids: list[int], budget: int, seed: int | None) -> tuple[list[int], bool]:
        """Sample one turn after ``context_ids`` (at most ``budget`` tokens); return its ids and truncation."""
        from harness.engines.generation import Request, Sampling  # noqa: PLC0415

        max_new = min(self.cfg.max_new_tokens, budget)
        if max_new <= 0:
            return [], True
        sampling = Sampling(
            max_tokens=max_new,
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            seed=seed,
            stop_token_ids=self.stop_token_ids,
        )
        result = await self.batcher.generate(Request(context_ids, sampling))
        return result.token_ids, result.finish_reason == "length"

    def close(self) -> None:
        self.batcher.close()


@dataclass
class RolloutRecord:
    """One trajectory as the trainer sees it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    reward: float
    correct: bool
    traj: Trajectory
    sandbox_reruns: int = 0  #: times the rollout was rerun from its start after its sandbox failed
    #: per completion token, the rollout log-prob importance-sampling correction reads (None: correction off)
    logprobs: list[float] | None = None
    gap: dict[str, float] = field(default_factory=dict)  #: the SAAR gap's numbers (trainers.core.rescore.GAP_KEYS)


async def run_one(
    item: Problem,
    sampler: PolicySampler,
    backend: Any,
    rcfg: RolloutConfig,
    cfg: CpuConfig,
    seed: int,
    *,
    judge: ExecutorConfig,
) -> RolloutRecord:
    """One CLEANER rollout of ``item`` and its reward, as token ids for TRL.

    ``seed`` is the trajectory's seed (:func:`harness.core.seeds.trajectory_seed`): the rollout
    core derives the SAAR draw and every generation's seed from it. ``rcfg.tool_env`` is the tool
    environment of every part (prompt, parsing, execution, budget); ``judge`` (the recipe's executor
    settings) says what the reward reads, as on the OpenRLHF path.
    """
    tok, render = sampler.tokenizer, get_render()
    messages = item.messages()
    config = problem_rollout_config(item.kind, rcfg, tool_env=chat.tool_env_for(tok, rcfg.tool_env))
    env = config.tool_env  # a call's span ends with this model's end-of-turn token

    correct = cfg.is_correction != "off"

    async def attempt() -> tuple[Trajectory, Outcome, SampledStore, SampleLog]:
        store = SampledStore(env=env)  # a rerun starts from nothing the failed attempt sampled
        samples = SampleLog()

        async def generate(
            context: list[Message], *, seed: int | None = None, max_tokens: int | None = None
        ) -> Generation:
            ctx = assemble(tok, context, len(messages), env=env, store=store, add_generation_prompt=True, render=render)
            budget = cfg.max_total_tokens - len(ctx.ids)
            if max_tokens is not None:  # a response budget: what is left of it
                budget = min(budget, max_tokens)
            if correct:
                ids, truncated = await sampler(ctx.ids, budget, seed, samples=samples)
            else:
                ids, truncated = await sampler(ctx.ids, budget, seed)
            ended = bool(ids) and ids[-1] in sampler.stop_token_ids  # the end-of-turn token is not part of the text
            text = tok.decode(ids[:-1] if ended else ids, skip_special_tokens=False)
            store.add(text, ids)
            return Generation(text=text, truncated=truncated, output_tokens=len(ids), token_ids=ids)

        sandbox = await backend.acquire()
        try:
            count = tool_result_counter(tok) if config.response_budget else None
            traj = await rollout(messages, generate, sandbox, config, seed=seed, count_tokens=count)
            # the reference's reward reads the whole response, tool output included (harness.core.response)
            judged = response_text(traj.messages) if judge.reward_on_response else traj.final_text
            return traj, await compute_reward(item, judged, sandbox, lenient=judge.lenient_reward), store, samples
        finally:
            await backend.release(sandbox)

    what = f"rollout of {item.id!r} (seed {seed})"
    (traj, outcome, store, samples), reruns = await rerun_on_sandbox_failure(
        attempt, retries=cfg.sandbox_retries, what=what
    )
    full = assemble(tok, traj.messages, len(messages), env=env, store=store, render=render)
    prompt_len = len(assemble(tok, messages, len(messages), env=env, add_generation_prompt=True, render=render).ids)
    mask = full.action_mask()
    completion = full.ids[prompt_len:] or [tok.eos_token_id]
    env_mask = mask[prompt_len:] or [0]
    record = RolloutRecord(full.ids[:prompt_len], completion, env_mask, outcome.reward, outcome.correct, traj, reruns)
    if correct:
        values, record.gap = await final_log_probs(sampler, full.ids, full.action_ranges, samples, cfg.max_total_tokens)
        record.logprobs = values[prompt_len:] or [0.0]
    return record


def step_metrics(records: list[RolloutRecord], rollout_s: float) -> dict[str, Any]:
    """The rollout part of a step's metrics line: reward, accuracy and :func:`harness.core.metrics.aggregate`."""
    n = max(len(records), 1)
    firsts = [first_attempts(r.traj) for r in records]
    calls, failures = sum(c for c, _ in firsts), sum(f for _, f in firsts)
    return {
        "reward": sum(r.reward for r in records) / n,
        "accuracy": sum(r.correct for r in records) / n,
        **aggregate([TrajectoryMetrics.of(r.traj) for r in records]),
        "first_calls": calls,
        "first_call_failure_rate": rate(failures, calls),
        "sandbox_reruns": sum(r.sandbox_reruns for r in records),
        "rollout_s": rollout_s,
        **saar_gap(records),
    }


def saar_gap(records: list[RolloutRecord]) -> dict[str, float]:
    """The step's SAAR off-policy gap (:func:`trainers.core.rescore.gap_summary`); nothing without rollout log-probs."""
    if not records or not records[0].gap:
        return {}
    n = len(records)
    means = {k: sum(r.gap[k] for r in records) / n for k in GAP_KEYS}
    means["response_tokens"] = sum(sum(r.env_mask) for r in records) / n
    return gap_summary(means)
