"""LiveCodeBench grading, as LiveCodeBench's own evaluator grades or as the reference grades, run inside a sandbox.

Two kinds of test exist upstream:

- **stdin** tests run the program with the test input on standard input. The output
  is compared line by line after stripping (surrounding blank lines ignored); a line
  that differs as text still matches when both lines are whitespace-separated numbers
  that are equal as :class:`decimal.Decimal` (``2.50`` equals ``2.5``, but ``0.3333``
  does not equal ``0.33333``: no tolerance, as upstream).
- **functional** tests (LeetCode; the problem's metadata names ``func_name``) call that
  method of class ``Solution`` with the JSON-decoded input lines as arguments and
  compare the JSON-decoded expected output with ``==``.

Nothing the candidate writes runs in the harness process. :func:`grade` builds ONE
stdlib-only Python program holding the candidate code and the tests; that program runs
in the sandbox, starts one child process per test (own session, killed as a group on
timeout) and prints a JSON verdict. A sandbox failure raises; it is never scored.

The test cases are read by :mod:`harness.benchmarks.lcb_cases`, the program is written by
:mod:`harness.benchmarks.lcb_program` (which also holds the reference's rule).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from harness.benchmarks.lcb_cases import parse_tests, problem_tests
from harness.benchmarks.lcb_program import (
    RULE_TIMEOUTS,
    Rule,
    as_solution_class,
    build_grading_program,
    check_rule,
    reference_code,
    syntax_tree,
)
from sandboxes.base import Sandbox, SandboxError

FailureKind = Literal["wrong_answer", "runtime_error", "timeout", "no_code", "syntax_error"]


class GradingError(RuntimeError):
    """The grading program did not produce a verdict (not the candidate's fault to score)."""


@dataclass(frozen=True)
class TestFailure:
    """Why the first failing test failed."""

    index: int
    kind: FailureKind
    message: str
    input: str = ""
    expected: str = ""
    got: str = ""
    duration: float = 0.0


@dataclass(frozen=True)
class CodeGrade:
    """Verdict of one candidate program on one problem's tests."""

    passed: int
    total: int
    first_failure: TestFailure | None = None
    statuses: str = ""  #: one letter per test run: P(assed) W(rong) R(untime error) T(imeout)
    duration: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    rule: Rule = "official"  #: how it was graded (:data:`RULES`)

    @property
    def fraction(self) -> float:
        """Fraction of all tests passed (the reference training reward for code)."""
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        """LiveCodeBench's verdict: every test passes."""
        return self.total > 0 and self.passed == self.total

    def describe(self) -> str:
        """One line for a score's explanation: the count, and why the first failing test failed."""
        text = f"{self.passed}/{self.total} tests passed"
        failure = self.first_failure
        if failure is None:
            return text
        if failure.kind in ("no_code", "syntax_error"):
            return f"{text}; {failure.message}"
        detail = f"; test {failure.index}: {failure.kind.replace('_', ' ')}: {failure.message}"
        if failure.kind == "wrong_answer" and failure.got:
            detail += f" (got {failure.got[:80]!r}, expected {failure.expected[:80]!r})"
        return text + detail

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["fraction"] = self.fraction
        data["all_passed"] = self.all_passed
        return data


async def grade(
    sandbox: Sandbox,
    code: str | None,
    tests: list[dict[str, Any]],
    *,
    fn_name: str | None,
    timeout_per_test: float | None = None,
    all_tests: bool = True,
    rule: Rule = "official",
) -> CodeGrade:
    """Grade ``code`` on ``tests`` in ``sandbox`` by ``rule``.

    ``fn_name`` selects functional grading (LeetCode; the official rule) and ``None`` grades
    stdin programs. ``all_tests=False`` stops at the first failure (LiveCodeBench's pass/fail
    verdict); ``True`` runs every test, for the training reward's fraction. ``timeout_per_test``
    None is the rule's (:data:`RULE_TIMEOUTS`). Raises :class:`sandboxes.base.SandboxError` when
    the sandbox failed and :class:`GradingError` when the grading program produced no verdict.
    """
    timeout = RULE_TIMEOUTS[check_rule(rule)] if timeout_per_test is None else timeout_per_test
    if timeout <= 0:
        raise ValueError(f"grade: timeout_per_test must be positive, got {timeout}")
    tests = parse_tests(tests)
    if not tests:
        raise ValueError("grade: the problem has no tests")
    if code is None or not code.strip():
        failure = TestFailure(0, "no_code", "the completion contains no code block")
        return CodeGrade(0, len(tests), failure, rule=rule)
    marker = f"__LCB_RESULT_{secrets.token_hex(8)}__"
    program = build_grading_program(
        code, tests, fn_name=fn_name, timeout_per_test=timeout, all_tests=all_tests, marker=marker, rule=rule
    )
    budget = len(tests) * (timeout + 2.0) + 20.0
    result = await sandbox.run_python(program, timeout=budget)
    if result.sandbox_failed:
        raise SandboxError(f"the sandbox failed while grading: {result.error_kind}: {result.stderr.strip()[-500:]}")
    verdict_line = next((line for line in reversed(result.stdout.splitlines()) if line.startswith(marker)), None)
    if verdict_line is None:
        raise GradingError(
            f"the grading program gave no verdict (ok={result.ok}, error_kind={result.error_kind}, "
            f"exit={result.exit_code}): {(result.stderr or result.stdout).strip()[-500:]}"
        )
    verdict = json.loads(verdict_line[len(marker) :])
    first = verdict.get("first_failure")
    return CodeGrade(
        passed=int(verdict["passed"]),
        total=int(verdict["total"]),
        first_failure=TestFailure(**first) if first else None,
        statuses=verdict.get("statuses", ""),
        duration=result.duration,
        rule=rule,
    )


def fn_name_of(metadata: dict[str, Any]) -> str | None:
    """The function name of a functional problem (upstream keeps it in ``metadata``)."""
    value = metadata.get("fn_name")
    if value:
        return str(value)
    meta = metadata.get("metadata")
    if isinstance(meta, str) and meta.strip():
        meta = json.loads(meta)
    if isinstance(meta, dict) and meta.get("func_name"):
        return str(meta["func_name"])
    return None


def graded_program(completion: str | None, fn_name: str | None, rule: Rule) -> str | TestFailure:
    """The program ``rule`` grades in ``completion``, or the failure that keeps it from running.

    The official rule reads the final ```python block of ``completion`` (the final turn:
    :func:`harness.benchmarks.scoring.extract_code`). The reference's rule reads the whole response
    as ``completion`` (:func:`reference_code`), fails a program that does not parse without
    running it, and moves a function named ``fn_name`` into a class ``Solution``
    (:func:`as_solution_class`), as the reference does. No program is a ``no_code`` failure.
    """
    from harness.benchmarks.scoring import extract_code

    check_rule(rule)
    code = extract_code(completion) if rule == "official" else reference_code(completion)
    if code is None or not code.strip():
        return TestFailure(0, "no_code", "the completion contains no code block")
    if rule == "reference":
        tree = syntax_tree(code)
        if isinstance(tree, str):
            return TestFailure(0, "syntax_error", f"not run: the program does not parse ({tree})")
        if fn_name and "class Solution" not in code:
            code = as_solution_class(code, fn_name)
    return code


async def grade_completion(
    sandbox: Sandbox,
    completion: str | None,
    metadata: dict[str, Any],
    *,
    timeout_per_test: float | None = None,
    all_tests: bool = True,
    rule: Rule = "official",
) -> CodeGrade:
    """Grade the program of ``completion`` (as :func:`graded_program` reads it) on the problem's tests, by ``rule``.

    ``metadata`` is a LiveCodeBench :class:`harness.benchmarks.datasets.Problem`'s metadata.
    """
    tests = problem_tests(metadata, where=str(metadata.get("question_id", "problem")))
    fn_name = fn_name_of(metadata)
    program = graded_program(completion, fn_name, rule)
    if isinstance(program, TestFailure):
        return CodeGrade(0, len(tests), program, rule=rule)
    return await grade(
        sandbox, program, tests, fn_name=fn_name, timeout_per_test=timeout_per_test, all_tests=all_tests, rule=rule
    )


async def code_reward(
    sandbox: Sandbox, completion: str | None, metadata: dict[str, Any], *, timeout_per_test: float | None = None
) -> float:
    """The fraction of all tests passed (0.0 to 1.0) by the official grader.

    The training reward (:func:`trainers.core.reward.compute_reward`) chooses its grader by the judge.
    """
    result = await grade_completion(sandbox, completion, metadata, timeout_per_test=timeout_per_test, all_tests=True)
    return result.fraction
