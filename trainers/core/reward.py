"""The CLEANER training reward, through the shared scoring of :mod:`harness.benchmarks.scoring`.

As the reference recipe does:

* math and GPQA: +1/-1 from the strict boxed-answer check
  (:func:`harness.benchmarks.scoring.strict_reward`; ``lenient=True`` uses the evaluation judge
  instead);
* code: the fraction of tests passed, and -1 when the answer holds no python block or that block
  does not parse. The judge chooses the grader (:func:`code_rule`): the reference's grading
  (code-judge's exact comparison of the whole stdout, every test run as a script; the program is
  the last block of the whole text judged) by default, LiveCodeBench's official grader on the
  final block with ``lenient=True`` (:mod:`harness.benchmarks.lcb`), as the evaluation's judges do.

``score`` is the same outcome in [0, 1], for OpenRLHF's dynamic filtering: a right
boxed answer is 1, a wrong one 0; code keeps its fraction.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from harness.benchmarks import lcb, scoring
from harness.benchmarks.problem import Problem
from sandboxes.base import Sandbox


@dataclass(frozen=True)
class Outcome:
    reward: float  #: the training reward (+1/-1, or the code fraction)
    score: float  #: the outcome in [0, 1]
    correct: bool  #: fully right (a right box; every test passed)

    def to_dict(self) -> dict[str, Any]:
        return {"reward": self.reward, "score": self.score, "correct": self.correct}


def code_rule(lenient: bool) -> lcb.Rule:
    """The grader of a code reward: the official one under the lenient judge, else the reference's."""
    return "official" if lenient else "reference"


def _parses(program: str) -> bool:
    try:
        ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


async def compute_reward(
    item: Problem, completion: str, sandbox: Sandbox | None = None, *, lenient: bool = False
) -> Outcome:
    """Score the final answer ``completion`` of a trajectory on ``item``."""
    if scoring.is_read(item.kind):  # the answer is read from the text (scoring.READ_CHECKS)
        if lenient:
            r = scoring.lenient_reward(completion, item.target, item.kind)
        else:
            r = scoring.strict_reward(completion, item.target)
        return Outcome(r, (r + 1.0) / 2.0, r > 0)
    if item.kind == "code":
        rule = code_rule(lenient)
        program = lcb.graded_program(completion, item.fn_name, rule)
        if isinstance(program, lcb.TestFailure) or not _parses(program):
            return Outcome(-1.0, 0.0, False)
        if sandbox is None:
            raise ValueError(f"item {item.id}: a code reward needs a sandbox to run the tests in")
        grade = await lcb.grade(sandbox, program, item.tests, fn_name=item.fn_name, all_tests=True, rule=rule)
        fraction = float(grade.fraction)
        return Outcome(fraction, fraction, fraction >= 1.0)
    raise ValueError(f"item {item.id}: unknown kind {item.kind!r} (expected math, gpqa or code)")


def overlong_penalty(generated: int, max_new_tokens: int, buffer_len: int, factor: float = 1.0) -> float:
    """DAPO's soft overlong penalty over ``generated`` tokens (<= 0; 0 within ``max_new_tokens - buffer_len``).

    The penalty grows linearly from 0 to ``-factor`` across the last ``buffer_len`` tokens of the
    budget. The executor applies it to generated tokens only: OpenRLHF 0.11.2's own penalty
    (``--reward.overlong_buffer_len``) measures a span that includes tool output (its issue #1243).
    """
    if buffer_len <= 0 or buffer_len > max_new_tokens:
        raise ValueError(f"overlong buffer {buffer_len} must be in (0, {max_new_tokens}]")
    excess = generated - (max_new_tokens - buffer_len)
    return -min(excess, buffer_len) / buffer_len * factor if excess > 0 else 0.0
