"""Inspect scorers for the four benchmarks, over the shared scoring in :mod:`harness.benchmarks.scoring`.

Every scorer returns one dict-valued score per sample: ``accuracy`` (1/0) plus the
trajectory's tool and SAAR counters, so one log carries pass@1 with stderr, the
tool-call failure rate and SAAR events by kind. The counters are those of
:mod:`harness.core.metrics` under the same names, so ``mean()`` of ``tool_failure_rate`` here is
the report's ``tool_failure_rate`` (the per-sample mean, not the pooled rate).

The value stays a dict rather than the bare 1/0 that Inspect's guide prefers: Inspect
reduces epochs per key of the value but keeps only the first epoch's metadata, so
counters moved to metadata would silently describe epoch 1 only. The epoch reducers
(``mean``, ``pass_at_k``) therefore also reach the counters; read them with ``mean``
and the accuracy with both. The judging itself lives in
:mod:`harness.benchmarks.scoring` and :mod:`harness.benchmarks.lcb` (shared with the training reward).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import TaskState

from harness.benchmarks import lcb, scoring
from harness.benchmarks.datasets import Problem
from harness.core.metrics import TrajectoryMetrics
from harness.evals.solver import TRAJECTORY, current_sandbox

METRICS: dict[str, Any] = {
    "accuracy": [mean(), stderr()],
    "tool_failure_rate": [mean()],
    "tool_calls": [mean()],
    "failures_kept": [mean()],
    "saar_*": [mean()],
    "tokens_generated": [mean()],
}


def trajectory_values(state: TaskState) -> dict[str, float]:
    """The per-sample counters every benchmark reports next to its accuracy (:mod:`harness.core.metrics` names)."""
    m = TrajectoryMetrics.from_summary(state.metadata.get(TRAJECTORY, {})).scalars()
    keep = ("tool_failure_rate", "tool_calls", "failures_kept", "saar_shallow", "saar_deep", "saar_purified")
    return {**{k: m[k] for k in keep}, "tokens_generated": m["tokens_generated"]}


def _score(state: TaskState, correct: bool, answer: str | None, explanation: str = "") -> Score:
    return Score(
        value={"accuracy": 1.0 if correct else 0.0, **trajectory_values(state)},
        answer=answer,
        explanation=explanation or None,
        metadata={TRAJECTORY: state.metadata.get(TRAJECTORY, {})},
    )


@scorer(metrics=METRICS)
def math_scorer() -> Scorer:
    """AIME: the last ``\\boxed{}`` is equivalent to the integer answer (leading zeros do not matter)."""

    async def score(state: TaskState, target: Target) -> Score:
        completion = state.output.completion
        return _score(state, scoring.math_correct(completion, target.text), scoring.extract_boxed(completion))

    return score


@scorer(metrics=METRICS)
def gpqa_scorer() -> Scorer:
    """GPQA: the chosen letter (after the fixed shuffle) is the correct one."""

    async def score(state: TaskState, target: Target) -> Score:
        completion = state.output.completion
        return _score(state, scoring.gpqa_correct(completion, target.text), scoring.gpqa_letter(completion))

    return score


@scorer(metrics=METRICS)
def code_scorer(problems: Sequence[Problem], timeout_per_test: float = 6.0) -> Scorer:
    """LiveCodeBench: the final program passes every public and private test, run in the sandbox.

    The tests are kept here, by sample id, rather than in each sample's metadata: private
    tests can be megabytes per problem and would bloat every log.
    """
    by_id = {p.id: p.metadata for p in problems}

    async def score(state: TaskState, target: Target) -> Score:
        completion = state.output.completion
        grade = await lcb.grade_completion(
            current_sandbox(),
            completion,
            by_id[str(state.sample_id)],
            timeout_per_test=timeout_per_test,
            all_tests=False,
        )
        return _score(state, grade.all_passed, scoring.extract_code(completion), grade.describe())

    return score
