"""Answer extraction, the evaluation judges and the strict reference reward."""

from __future__ import annotations

import threading

import pytest

from harness.benchmarks import scoring
from harness.benchmarks.scoring import (
    STRICT_WINDOW,
    Verdict,
    compare_math,
    extract_boxed,
    extract_code,
    gpqa_correct,
    gpqa_letter,
    is_correct,
    judge_math,
    lenient_reward,
    math_correct,
    strict_reward,
)

# --------------------------------------------------------------------------- extract_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{25}.", "25"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\sqrt{\\frac{a^{2}}{b}}}", "\\sqrt{\\frac{a^{2}}{b}}"),
        ("first \\boxed{3}, then \\boxed{7}", "7"),
        ("\\fbox{42}", "42"),
        ("\\boxed 5$ done", "5"),
        ("\\boxed{ 25 }", " 25 "),
        ("no box here, 25", None),
        ("\\boxed{never closed", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_boxed(text: str | None, expected: str | None) -> None:
    assert extract_boxed(text) == expected


def test_extract_boxed_ignores_lookalike_commands() -> None:
    assert extract_boxed("\\boxedtext{1} and \\boxed{2}") == "2"


# --------------------------------------------------------------------------- math_correct


@pytest.mark.parametrize(
    ("completion", "target"),
    [
        ("The answer is \\boxed{025}.", "25"),
        ("\\boxed{25}", "025"),
        ("\\boxed{1,000}", "1000"),
        ("\\boxed{\\frac{1}{2}}", "0.5"),
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("\\boxed{25.0}", "25"),
        ("\\boxed{ 25 }", "25"),
        ("\\boxed{\\dfrac{\\sqrt{2}}{2}}", "\\frac{\\sqrt{2}}{2}"),
        ("I first thought \\boxed{7}, but it is \\boxed{9}", "9"),
        ("\\fbox{123}", "123"),
    ],
)
def test_math_correct_accepts_equivalent_answers(completion: str, target: str) -> None:
    assert math_correct(completion, target)


@pytest.mark.parametrize(
    ("completion", "target"),
    [
        ("\\boxed{24}", "25"),
        ("The answer is 25.", "25"),  # no box: wrong, even with the right number in the text
        ("\\boxed{9} and later \\boxed{7}", "9"),  # the last box wins
        ("\\boxed{}", "0"),
        ("", "25"),
        ("\\boxed{\\frac{1}{3}}", "0.5"),
    ],
)
def test_math_correct_rejects(completion: str, target: str) -> None:
    assert not math_correct(completion, target)


def test_math_correct_works_outside_the_main_thread() -> None:
    results: list[bool] = []
    worker = threading.Thread(target=lambda: results.append(math_correct("\\boxed{\\frac{2}{4}}", "0.5")))
    worker.start()
    worker.join()
    assert results == [True]


# --------------------------------------------------------------------------- GPQA


@pytest.mark.parametrize(
    "completion",
    [
        "... so \\boxed{C}",
        "\\boxed{(C)}",
        "\\boxed{\\text{C}}",
        "\\boxed{\\textbf{(C)}}",
        "\\boxed{c}",
        "\\boxed{C) 19.6 m}",
        "The answer is C",
        "The answer is (C).",
        "Answer: (C)",
        "Answer: C",
        "**Final answer: C**",
        "A is tempting, but B is wrong too. The correct option is C.",
    ],
)
def test_gpqa_letter_styles(completion: str) -> None:
    assert gpqa_letter(completion) == "C"
    assert gpqa_correct(completion, "C")
    assert not gpqa_correct(completion, "A")


@pytest.mark.parametrize(
    "completion", ["I do not know.", "", "the answer is a mystery", "\\boxed{42}", "Answer: because of physics"]
)
def test_gpqa_letter_none(completion: str) -> None:
    assert gpqa_letter(completion) is None
    assert not gpqa_correct(completion, "A")


def test_gpqa_box_wins_over_earlier_phrase() -> None:
    assert gpqa_letter("The answer is A. On reflection: \\boxed{D}") == "D"


def test_gpqa_target_case_and_space_insensitive() -> None:
    assert gpqa_correct("\\boxed{B}", " b ")


# --------------------------------------------------------------------------- strict reward


@pytest.mark.parametrize(
    ("completion", "target", "reward"),
    [
        ("so \\boxed{25}", "25", 1.0),
        ("so \\boxed{25}", " 25 ", 1.0),  # the target is normalised
        ("so \\boxed{25}", "$25$", 1.0),
        ("so \\boxed{25}", 25, 1.0),  # type: ignore[list-item]
        ("\\boxed{025}", "25", -1.0),
        ("\\boxed{25}", "025", -1.0),
        ("\\boxed{25.0}", "25", -1.0),
        ("\\boxed{ 25 }", "25", -1.0),
        ("\\boxed{1,000}", "1000", -1.0),
        ("\\boxed{\\frac{1}{2}}", "0.5", -1.0),
        ("25", "25", -1.0),
        ("\\boxed{C}", "C", 1.0),
        ("\\boxed{(C)}", "C", -1.0),
        ("\\boxed{3} then \\boxed{25}", "25", 1.0),
        ("\\boxed{25} then \\boxed{3}", "25", -1.0),
        ("", "25", -1.0),
        (None, "25", -1.0),
    ],
)
def test_strict_reward(completion: str | None, target: str, reward: float) -> None:
    assert strict_reward(completion, target) == reward


def test_strict_reward_window() -> None:
    box = "\\boxed{25}"
    assert strict_reward(box + "x" * (STRICT_WINDOW - len(box)), "25") == 1.0
    assert strict_reward(box + "x" * STRICT_WINDOW, "25") == -1.0
    assert strict_reward(box + "x" * (STRICT_WINDOW + 1), "25") == -1.0
    # a box cut in half by the window is no box
    assert strict_reward(box + "x" * (STRICT_WINDOW - 3), "25") == -1.0


def test_lenient_reward_follows_equivalence() -> None:
    assert lenient_reward("\\boxed{025}", "25") == 1.0
    assert lenient_reward("\\boxed{24}", "25") == -1.0
    assert lenient_reward("\\boxed{(C)}", "C", kind="gpqa") == 1.0
    assert lenient_reward("\\boxed{B}", "C", kind="gpqa") == -1.0
    assert is_correct("\\boxed{1,000}", "1000", "math")
    with pytest.raises(ValueError, match="kind"):
        lenient_reward("x", "1", kind="code")


# --------------------------------------------------------------------------- extract_code


def test_extract_code_takes_last_python_block() -> None:
    completion = "Try:\n```python\nprint(1)\n```\nBetter:\n```python\nprint(2)\n```\nDone."
    assert extract_code(completion) == "print(2)\n"


def test_extract_code_ignores_tool_calls_and_other_languages() -> None:
    completion = (
        "```python\nx = input()\nprint(x)\n```\n"
        '<tool_call>\n{"name": "python", "arguments": {"code": "```python\\nprint(9)\\n```"}}\n</tool_call>\n'
        "```text\nsample output\n```"
    )
    assert extract_code(completion) == "x = input()\nprint(x)\n"


def test_extract_code_aliases_and_fallback() -> None:
    assert extract_code("```py\nprint(3)\n```") == "print(3)\n"
    assert extract_code("```python3\nprint(4)\n```") == "print(4)\n"
    assert extract_code("```\nprint(5)\n```") == "print(5)\n"
    assert extract_code("```python\nprint(6)\n```\n```\nnot code\n```") == "print(6)\n"


@pytest.mark.parametrize("completion", [None, "", "no code", "```python\n\n```", "```cpp\nint main(){}\n```"])
def test_extract_code_none(completion: str | None) -> None:
    assert extract_code(completion) is None


# --------------------------------------------------------------------------- strict window, worker, GPQA


@pytest.mark.parametrize(
    "completion",
    [
        "so \\fbox{25}",  # verl's strict check reads \boxed{ only
        "so \\boxed 25",  # the TeX argument form is no "\boxed{"
        "\\boxed{25} and finally \\boxed{2",  # the last "\boxed{" never closes: no answer, earlier box ignored
        "\\boxed{25}" + "x" * 91,  # more than 100 characters after the box start: outside the strict window
    ],
)
def test_strict_reward_reads_only_what_verls_strict_box_check_reads(completion: str) -> None:
    assert strict_reward(completion, "25") == -1.0


def test_strict_reward_window_is_verls_last_100_characters() -> None:
    box = "\\boxed{25}"
    assert STRICT_WINDOW == 100
    assert strict_reward("y" * 500 + box + "x" * (100 - len(box)), "25") == 1.0


def test_lenient_reward_is_bounded_from_a_worker_thread() -> None:
    """math-verify's own timeout is SIGALRM (main thread only); a Ray actor scores from other threads.

    The pathological power never finishes and holds the GIL, so the check runs in a child
    interpreter that the test can give up on.
    """
    import subprocess
    import sys

    program = (
        "import threading\n"
        "from harness.benchmarks.scoring import lenient_reward\n"
        "out = {}\n"
        "t = threading.Thread(target=lambda: out.update(r=lenient_reward('\\\\boxed{9^{9^{9^{9^{9}}}}}', '25')))\n"
        "t.start(); t.join()\n"
        "print('reward', out['r'])\n"
    )
    try:
        proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("lenient_reward did not return within 90 s when called from a worker thread")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "reward -1.0" in proc.stdout


@pytest.mark.parametrize(
    "completion",
    [
        "The answer is B. Checking the others: option D fails, choice A too.",
        "Answer: B. Option D is wrong.",
        "The correct option is B; option C would need more energy.",
    ],
)
def test_gpqa_a_rejected_option_mentioned_later_is_not_the_answer(completion: str) -> None:
    assert gpqa_letter(completion) == "B"


def test_gpqa_bare_option_mention_is_no_answer() -> None:
    assert gpqa_letter("Option D fails and choice A too.") is None


# --------------------------------------------------------------------------- judge timeouts

TOWER = "9^{9^{9^{9^{9}}}}"  # math-verify gives up comparing it with an integer


def test_a_timeout_is_a_verdict_that_says_so(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(scoring, "VERIFY_TIMEOUT", 1)
    with caplog.at_level("WARNING", logger="harness.benchmarks.scoring"):
        verdict = compare_math(TOWER, "1")
    assert verdict == Verdict(equivalent=False, timed_out=True)
    assert TOWER in caplog.text and "'1'" in caplog.text and "timed out" in caplog.text
    assert judge_math(f"\\boxed{{{TOWER}}}", "1").timed_out
    assert not math_correct(f"\\boxed{{{TOWER}}}", "1")  # still counted as not correct


def test_a_timeout_is_said_from_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """From another thread the comparison runs in the worker process; its math-verify timeout comes back as one."""
    monkeypatch.setattr(scoring, "VERIFY_TIMEOUT", 1)
    out: list[Verdict] = []
    worker = threading.Thread(target=lambda: out.append(compare_math(TOWER, "1")))
    worker.start()
    worker.join(timeout=120)
    assert out == [Verdict(equivalent=False, timed_out=True)]


def test_a_worker_that_does_not_answer_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scoring._VerifyWorker, "ask", lambda self, answer, target, timeout: None)
    out: list[Verdict] = []
    worker = threading.Thread(target=lambda: out.append(compare_math("25", "25")))
    worker.start()
    worker.join(timeout=120)
    assert out == [Verdict(equivalent=False, timed_out=True)]


@pytest.mark.parametrize(("answer", "target"), [("025", "25"), ("24", "25"), ("\\frac{1}{2}", "0.5"), ("abc", "abc")])
def test_a_decided_comparison_has_no_timeout(answer: str, target: str) -> None:
    assert not compare_math(answer, target).timed_out


def test_the_kind_decides_read_or_run_in_one_place() -> None:
    """Every kind is read (math, gpqa: scoring.READ_CHECKS) or run (code); the lenient judge, the reference's
    verdict and the evaluation's scorers follow that one table, and a run kind asked for a read verdict is refused."""
    from typing import get_args

    from harness.core.kinds import KINDS
    from harness.evals.scorers import SCORERS
    from harness.evals.tasks import SandboxName
    from sandboxes.backends import BACKEND_NAMES

    assert [k for k in KINDS if scoring.is_read(k)] == ["math", "gpqa"] and set(SCORERS) == set(KINDS)
    assert scoring.lenient_check("gpqa", "here") is scoring.gpqa_correct
    for ask in (lambda: scoring.lenient_reward("x", "1", "code"), lambda: scoring.reference_verdict("x", "1", "code")):
        with pytest.raises(ValueError, match="kind must be 'math' or 'gpqa', got 'code' \\(code is graded by running"):
            ask()
    assert get_args(SandboxName) == BACKEND_NAMES  # -T sandbox's values are the backends'
