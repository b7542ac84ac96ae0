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

Every scorer takes a ``judge`` (the protocol's, :class:`harness.benchmarks.presets.EvalProtocol`):

- ``"lenient"`` (the default): ``accuracy`` is the evaluation judge on the final turn
  (equivalence by math-verify; GPQA's letter in any common style; LiveCodeBench's official grader).
- ``"reference"``: ``accuracy`` is the reference's own judge of the whole response, tool results
  included (:func:`harness.core.response.response_text`): for math and GPQA the strict box check of
  its training reward on the last 100 characters (:func:`harness.benchmarks.scoring.reference_verdict`),
  for code its code-judge's grading (exact output, :mod:`harness.benchmarks.lcb`). The lenient verdict
  is reported beside it as ``accuracy_lenient``.

The math scorer also reports ``judge_timeout`` (1 when math-verify gave up on the sample's
answer, which then counts as not correct; in ``"reference"`` mode it concerns
``accuracy_lenient``). A key is present in every sample's value, as Inspect's reducers and
metrics need. The score's metadata names the judge that ran (``judge``). Logs that exist can
be judged again without rerunning the model: ``inspect score LOG --scorer math_scorer -S
judge=reference`` (``gpqa_scorer`` likewise; the task file the log names must be at hand, or
give ``--scorer harness/evals/scorers.py@math_scorer``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import TaskState

from harness.benchmarks import lcb, lcb_program, scoring
from harness.benchmarks.datasets import Problem
from harness.benchmarks.presets import JUDGES, Judge
from harness.core.kinds import Kind
from harness.core.metrics import TrajectoryMetrics
from harness.core.response import response_text
from harness.evals.convert import from_inspect
from harness.evals.solver import TRAJECTORY, current_sandbox

METRICS: dict[str, Any] = {
    "accuracy": [mean(), stderr()],
    "tool_failure_rate": [mean()],
    "tool_calls": [mean()],
    "failures_kept": [mean()],
    "saar_*": [mean()],
    "tokens_generated": [mean()],
}

#: The math and GPQA scorers' metrics: :data:`METRICS` and the judges' keys (a key no sample has shows nothing).
JUDGED_METRICS: dict[str, Any] = {
    **METRICS,
    "accuracy_lenient": [mean(), stderr()],
    "judge_timeout": [mean()],
}


def trajectory_values(state: TaskState) -> dict[str, float]:
    """The per-sample counters every benchmark reports next to its accuracy (:mod:`harness.core.metrics` names)."""
    m = TrajectoryMetrics.from_summary(state.metadata.get(TRAJECTORY, {})).scalars()
    keep = ("tool_failure_rate", "tool_calls", "failures_kept", "saar_shallow", "saar_deep", "saar_purified")
    return {**{k: m[k] for k in keep}, "tokens_generated": m["tokens_generated"]}


def _check_judge(judge: str) -> Judge:
    if judge not in JUDGES:
        raise ValueError(f"judge must be one of {list(JUDGES)}, got {judge!r}")
    return judge  # type: ignore[return-value]


def reference_response(state: TaskState) -> str:
    """The sample's whole response as the reference's judge reads it (its prompt left out)."""
    return response_text(from_inspect(state.messages))


def _judged_score(
    state: TaskState,
    judge: Judge,
    correct: bool,
    answer: str | None,
    extra: dict[str, float],
    explanation: str = "",
) -> Score:
    return Score(
        value={"accuracy": 1.0 if correct else 0.0, **trajectory_values(state), **extra},
        answer=answer,
        explanation=explanation or None,
        metadata={TRAJECTORY: state.metadata.get(TRAJECTORY, {}), "judge": judge},
    )


def _timeout_note(verdict: scoring.Verdict, answer: str | None, target: str) -> str:
    if not verdict.timed_out:
        return ""
    return f"math-verify timed out comparing the answer {answer!r} with the target {target!r}: counted as not correct"


@scorer(metrics=JUDGED_METRICS)
def math_scorer(judge: Judge = "lenient") -> Scorer:
    """AIME: the last ``\\boxed{}`` is equivalent to the integer answer (leading zeros do not matter).

    Args:
        judge: ``"lenient"`` (that equivalence on the final turn) or ``"reference"`` (the
            reference's strict box check on the whole response; the lenient verdict is then
            ``accuracy_lenient``).
    """
    judge = _check_judge(judge)

    async def score(state: TaskState, target: Target) -> Score:
        completion = state.output.completion
        lenient_answer = scoring.extract_boxed(completion)
        lenient = scoring.judge_math(completion, target.text)
        note = _timeout_note(lenient, lenient_answer, target.text)
        timeout = {"judge_timeout": 1.0 if lenient.timed_out else 0.0}
        if judge == "lenient":
            return _judged_score(state, judge, lenient.equivalent, lenient_answer, timeout, note)
        response = reference_response(state)
        correct = scoring.reference_verdict(response, target.text, "math")
        extra = {"accuracy_lenient": 1.0 if lenient.equivalent else 0.0, **timeout}
        return _judged_score(state, judge, correct, scoring.reference_answer(response), extra, note)

    return score


@scorer(metrics=JUDGED_METRICS)
def gpqa_scorer(judge: Judge = "lenient") -> Scorer:
    """GPQA: the chosen letter (after the fixed shuffle) is the correct one.

    Args:
        judge: ``"lenient"`` (the letter of the final turn in any common style) or
            ``"reference"`` (the reference's strict box check, ``\\boxed{C}``, on the whole
            response; the lenient verdict is then ``accuracy_lenient``).
    """
    judge = _check_judge(judge)

    async def score(state: TaskState, target: Target) -> Score:
        completion = state.output.completion
        lenient = scoring.gpqa_correct(completion, target.text)
        if judge == "lenient":
            return _judged_score(state, judge, lenient, scoring.gpqa_letter(completion), {})
        response = reference_response(state)
        correct = scoring.reference_verdict(response, target.text, "gpqa")
        extra = {"accuracy_lenient": 1.0 if lenient else 0.0}
        return _judged_score(state, judge, correct, scoring.reference_answer(response), extra)

    return score


@scorer(metrics=JUDGED_METRICS)
def code_scorer(problems: Sequence[Problem], judge: Judge = "lenient", timeout_per_test: float | None = None) -> Scorer:
    """LiveCodeBench: the program passes every public and private test, run in the sandbox.

    Args:
        problems: the task's problems. Their tests are kept here, by sample id, rather than in each
            sample's metadata: private tests can be megabytes per problem and would bloat every log.
        judge: ``"lenient"`` (LiveCodeBench's official grader on the final turn's program) or
            ``"reference"`` (the reference's grading of the whole response: the exact output
            comparison of its code-judge, :mod:`harness.benchmarks.lcb`; the official verdict is then
            ``accuracy_lenient``). The score's metadata holds each grading that ran (``grades``).
        timeout_per_test: seconds per test; None: each grading's own.
    """
    judge = _check_judge(judge)
    by_id = {p.id: p.metadata for p in problems}

    async def score(state: TaskState, target: Target) -> Score:
        completion = state.output.completion
        metadata = by_id[str(state.sample_id)]

        async def graded(text: str | None, rule: lcb_program.Rule) -> lcb.CodeGrade:
            return await lcb.grade_completion(
                current_sandbox(), text, metadata, timeout_per_test=timeout_per_test, all_tests=False, rule=rule
            )

        official = await graded(completion, "official")
        if judge == "lenient":
            answer = scoring.extract_code(completion)
            result = _judged_score(state, judge, official.all_passed, answer, {}, official.describe())
            grades = {"official": official.to_dict()}
        else:
            response = reference_response(state)
            reference = await graded(response, "reference")
            extra = {"accuracy_lenient": 1.0 if official.all_passed else 0.0}
            explanation = f"reference: {reference.describe()}; official: {official.describe()}"
            answer = lcb_program.reference_code(response)
            result = _judged_score(state, judge, reference.all_passed, answer, extra, explanation)
            grades = {"reference": reference.to_dict(), "official": official.to_dict()}
        result.metadata = {**(result.metadata or {}), "grades": grades}
        return result

    return score


#: Makes a task's scorer for its problems and the protocol's judge.
MakeScorer = Callable[[Sequence[Problem], Judge], Scorer]

#: The scorer of each problem kind, made for the problems and the protocol's judge: a read kind's
#: (:func:`harness.benchmarks.scoring.is_read`) reads the answer, code's runs it.
SCORERS: dict[Kind, MakeScorer] = {
    "math": lambda problems, judge: math_scorer(judge=judge),
    "gpqa": lambda problems, judge: gpqa_scorer(judge=judge),
    "code": lambda problems, judge: code_scorer(problems, judge=judge),
}
