"""LiveCodeBench grading: output comparison, private-test decoding, and real runs in a sandbox."""

from __future__ import annotations

import ast
import base64
import json
import os
import pickle
import zlib
from pathlib import Path

import pytest

from harness.benchmarks.datasets import load_livecodebench
from harness.benchmarks.lcb import CodeGrade, GradingError, code_reward, fn_name_of, grade, grade_completion
from harness.benchmarks.lcb_cases import decode_private_tests, encode_private_tests, problem_tests
from harness.benchmarks.lcb_program import (
    as_solution_class,
    build_grading_program,
    reference_code,
    reference_prelude,
    stdout_matches,
)
from sandboxes.base import ExecResult, Sandbox, SandboxError


class BrokenSandbox(Sandbox):
    """Stands in for a dead container: every run reports a sandbox failure."""

    backend = "broken"

    async def run_python(self, code, *, timeout=10.0, stdin=b"", files=None) -> ExecResult:
        return ExecResult(
            ok=False, exit_code=None, error_kind="SandboxError", stderr="container died", sandbox_failed=True
        )


@pytest.fixture
async def sandbox(local_sandbox):
    """The real local backend: a broken one must fail these tests, not fall back to a bare interpreter."""
    return local_sandbox


@pytest.fixture(scope="module")
def fixture_problems():
    problems = load_livecodebench("fixture", start_date="2020-01-01", end_date="2030-12-31")
    return {p.id: p for p in problems}


def stdin_tests(*pairs: tuple[str, str]) -> list[dict]:
    return [{"input": i, "output": o, "testtype": "stdin"} for i, o in pairs]


ADD = stdin_tests(("3 5\n", "8\n"), ("-1 1\n", "0\n"), ("10 20\n", "30\n"))

# --------------------------------------------------------------------------- comparison


@pytest.mark.parametrize(
    ("got", "expected", "same"),
    [
        ("8\n", "8", True),
        ("8   \n\n\n", "8\n", True),  # trailing whitespace and blank lines
        ("  1 2\n3 4  \n", "1 2\n3 4", True),
        ("2.5\n", "2.500000\n", True),  # numbers compared as Decimal
        ("1e3\n", "1000\n", True),
        ("1  2\n", "1 2\n", True),  # token-wise when numeric
        ("0.3333\n", "0.33333\n", False),  # no tolerance, as upstream
        ("1.3333333333333333\n", "1.333333\n", False),
        ("yes\n", "Yes\n", False),
        ("Yes  No\n", "Yes No\n", False),  # non-numeric lines must match as text
        ("1\n2\n", "1\n", False),  # line count
        ("", "0\n", False),
        ("1 2\n", "1 2 3\n", False),
    ],
)
def test_stdout_matches(got: str, expected: str, same: bool) -> None:
    assert stdout_matches(got, expected) is same


# --------------------------------------------------------------------------- private tests


def test_private_tests_round_trip_and_fixture_encoding(fixture_problems) -> None:
    tests = stdin_tests(("1\n", "2\n"))
    encoded = encode_private_tests(tests)
    assert decode_private_tests(encoded) == tests
    # exactly upstream's layout: base64(zlib(pickle(json string)))
    assert pickle.loads(zlib.decompress(base64.b64decode(encoded))) == json.dumps(tests)
    raw = fixture_problems["fx_9001"].metadata["private_test_cases"]
    assert json.loads(pickle.loads(zlib.decompress(base64.b64decode(raw))))[0]["testtype"] == "functional"
    assert decode_private_tests(json.dumps(tests)) == tests  # plain JSON is accepted too
    assert decode_private_tests("") == []


class _Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = base64.b64encode(zlib.compress(pickle.dumps(_Exploit(str(marker))))).decode()
    with pytest.raises(ValueError, match="refusing to load global"):
        decode_private_tests(payload, where="row 7: private_test_cases")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("!!!not base64!!!", "neither JSON nor base64"),
        (base64.b64encode(zlib.compress(pickle.dumps([1, 2]))).decode(), "holds list, expected a JSON string"),
        (base64.b64encode(zlib.compress(pickle.dumps("{oops"))).decode(), "decoded pickle is not JSON"),
        (base64.b64encode(zlib.compress(b"garbage")).decode(), "corrupt"),
        (json.dumps([{"input": "1", "output": 2}]), r"\[0\]: field 'output' must be a string"),
    ],
)
def test_broken_private_tests_are_named(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        decode_private_tests(value, where="lcb.jsonl row 3: private_test_cases")
    assert "lcb.jsonl row 3" in str(info.value)


def test_fn_name_of() -> None:
    assert fn_name_of({"metadata": '{"func_name": "twoSum"}'}) == "twoSum"
    assert fn_name_of({"metadata": "{}"}) is None
    assert fn_name_of({"fn_name": "f"}) == "f"


def test_program_is_stdlib_only_and_rejects_broken_functional_tests() -> None:
    program = build_grading_program("print(1)", ADD, fn_name=None)
    compile(program, "grader", "exec")
    imports = {line.split()[1].rstrip(",") for line in program.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"json", "os", "decimal", "io"}
    with pytest.raises(ValueError, match="test 0: functional test input/output is not JSON"):
        build_grading_program("", [{"input": "[1,", "output": "1", "testtype": "functional"}], fn_name="f")


# --------------------------------------------------------------------------- grading in a sandbox


async def test_stdin_correct_and_trailing_whitespace(sandbox) -> None:
    result = await grade(sandbox, "a, b = map(int, input().split())\nprint(a + b, '  ')\nprint()\n", ADD, fn_name=None)
    assert (result.passed, result.total, result.first_failure) == (3, 3, None)
    assert result.all_passed and result.fraction == 1.0 and result.statuses == "PPP"


async def test_wrong_answer_stops_or_counts(sandbox) -> None:
    code = "a, b = map(int, input().split())\nprint(a + b if a != -1 else 5)\n"
    first = await grade(sandbox, code, ADD, fn_name=None, all_tests=False)
    assert first.first_failure.kind == "wrong_answer" and first.first_failure.index == 1
    assert first.statuses == "PW" and first.passed == 1 and first.total == 3 and not first.all_passed
    full = await grade(sandbox, code, ADD, fn_name=None, all_tests=True)
    assert full.statuses == "PWP" and full.passed == 2 and full.fraction == pytest.approx(2 / 3)
    assert full.first_failure.got.strip() == "5" and full.first_failure.expected.strip() == "0"
    assert full.describe().startswith("2/3 tests passed; test 1: wrong answer")
    assert full.to_dict()["fraction"] == pytest.approx(2 / 3)


async def test_runtime_error_is_named(sandbox) -> None:
    result = await grade(sandbox, "x = input()\nraise ValueError('bad input ' + x)\n", ADD[:1], fn_name=None)
    assert result.first_failure.kind == "runtime_error"
    assert "ValueError: bad input 3 5" in result.first_failure.message
    assert result.passed == 0


async def test_timeout_kills_the_test_and_moves_on(sandbox) -> None:
    code = "a, b = map(int, input().split())\nif a == 3:\n    while True:\n        pass\nprint(a + b)\n"
    result = await grade(sandbox, code, ADD, fn_name=None, timeout_per_test=0.5, all_tests=True)
    assert result.statuses == "TPP" and result.passed == 2
    assert result.first_failure.kind == "timeout"


async def test_float_output_compared_as_decimal(sandbox, fixture_problems) -> None:
    metadata = fixture_problems["fx_abc002_b"].metadata
    tests = problem_tests(metadata)
    exact = "n = int(input())\nxs = list(map(int, input().split()))\nprint(f'{sum(xs) / n:.6f}')\n"
    assert (await grade(sandbox, exact, tests, fn_name=None)).all_passed
    short = "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) / n)\n"
    graded = await grade(sandbox, short, tests, fn_name=None)
    # 2.5 == 2.500000 and 7.0 == 7.000000 as Decimal; 1.3333333333333333 != 1.333333
    assert graded.statuses == "PPW" and graded.passed == 2


async def test_functional_problem(sandbox, fixture_problems) -> None:
    metadata = fixture_problems["fx_9001"].metadata
    tests = problem_tests(metadata)
    fn = fn_name_of(metadata)
    good = (
        "class Solution:\n"
        "    def addToEvery(self, nums: List[int], k: int) -> List[int]:\n"
        "        print('debugging output must not disturb grading')\n"
        "        return [x + k for x in nums]\n"
    )
    result = await grade(sandbox, good, tests, fn_name=fn)
    assert (result.passed, result.total) == (4, 4)
    as_tuple = good.replace("return [x + k for x in nums]", "return tuple(x + k for x in nums)")
    assert (await grade(sandbox, as_tuple, tests, fn_name=fn)).all_passed
    wrong = good.replace("x + k", "x + k + (1 if x < 0 else 0)")
    graded = await grade(sandbox, wrong, tests, fn_name=fn)
    assert graded.statuses == "PPWP" and graded.first_failure.kind == "wrong_answer"
    missing = "class Solution:\n    def other(self):\n        return 1\n"
    failed = await grade(sandbox, missing, tests, fn_name=fn, all_tests=False)
    assert failed.first_failure.kind == "runtime_error" and "addToEvery" in failed.first_failure.message


async def test_grade_completion_end_to_end(sandbox, fixture_problems) -> None:
    metadata = fixture_problems["fx_cf1000A"].metadata
    completion = (
        "Let me test first.\n<tool_call>\n"
        + json.dumps({"name": "python", "arguments": {"code": "print('YES')"}})
        + "\n</tool_call>\nFinal solution:\n```python\nt = int(input())\nfor _ in range(t):\n"
        "    n = int(input())\n    print('YES' if n % 2 == 0 else 'NO')\n```\n"
    )
    result = await grade_completion(sandbox, completion, metadata)
    assert isinstance(result, CodeGrade) and result.all_passed and result.total == 3
    half = completion.replace("n % 2 == 0", "n == 4")
    # passes the public test (4 and 5) and the one with n = 1, fails the one with n = 2, 4, 6
    assert await code_reward(sandbox, half, metadata) == pytest.approx(2 / 3)
    empty = await grade_completion(sandbox, "I could not solve it.", metadata)
    assert empty.first_failure.kind == "no_code" and empty.fraction == 0.0
    assert "no code block" in empty.describe()


async def test_sandbox_failure_raises_instead_of_scoring() -> None:
    with pytest.raises(SandboxError, match="container died"):
        await grade(BrokenSandbox(), "print(8)", ADD, fn_name=None)


async def test_missing_verdict_raises(local_sandbox) -> None:
    class Silent(Sandbox):
        """Runs something else than the grading program, in the real local sandbox."""

        async def run_python(self, code, *, timeout=10.0, stdin=b"", files=None) -> ExecResult:
            return await local_sandbox.run_python("print('no verdict here')", timeout=timeout)

    with pytest.raises(GradingError, match="no verdict"):
        await grade(Silent(), "print(8)", ADD, fn_name=None)


async def test_bad_arguments(local_sandbox) -> None:
    with pytest.raises(ValueError, match="no tests"):
        await grade(local_sandbox, "print(1)", [], fn_name=None)
    with pytest.raises(ValueError, match="timeout_per_test"):
        await grade(local_sandbox, "print(1)", ADD, fn_name=None, timeout_per_test=0)


# --------------------------------------------------------------------------- the reference's grading
# Open-CLEANER @91e40ad: verl/verl/utils/reward_score/livecodebench/code_math.py (compute_score 193-373: the text
# after </think> 197-200, the last ```python\n block 311-315, the syntax check 316-320, the class conversion 97-136
# and 323-326, each test's input as stdin 333-337) over code-judge: app/worker_manager.py:77 (exit status 0 and the
# whole stdout equal after strip), app/libs/executors/python_executor.py (imports 14-27, limits 97-114, 138-139),
# README.md:108-109 (MAX_EXECUTION_TIME=4).


def fenced(code: str) -> str:
    return f"```python\n{code}```"


@pytest.mark.parametrize(
    ("response", "code"),
    [
        (fenced("print(1)\n") + " then " + fenced("print(2)\n"), "print(2)\n"),  # the last block
        ("<think>" + fenced("print(1)\n") + "</think>" + fenced("print(2)\n"), "print(2)\n"),  # after </think>
        ("a</think>" + fenced("print(1)\n") + "</think>" + fenced("print(2)\n"), "print(1)\n"),  # up to a second
        ("```py\nprint(1)\n```", None),  # only ```python and a line break
        ("```python print(1)```", None),
        # the whole response: a block inside a tool call or a tool result counts
        ("answer\n<tool_call>\n" + fenced("print(3)\n") + "\n</tool_call>", "print(3)\n"),
    ],
)
def test_reference_code_reads_the_whole_response(response: str, code: str | None) -> None:
    assert reference_code(response) == code


def test_a_function_is_moved_into_class_solution() -> None:
    converted = as_solution_class("import sys\ndef f(a, b):\n    return a + b\nprint(f(1, 2))\n", "f")
    tree = ast.parse(converted)
    assert isinstance(tree.body[-1], ast.ClassDef) and tree.body[-1].name == "Solution"
    method = tree.body[-1].body[0]
    assert method.name == "f" and [a.arg for a in method.args.args] == ["self", "a", "b"]
    assert as_solution_class("def g():\n    pass\n", "f") == "def g():\n    pass\n"  # no such function: unchanged


def test_the_reference_prelude_imports_what_code_judge_does() -> None:
    prelude = reference_prelude("x = np.array([1])\ny = math.sqrt(2)\nz = symbols('z')\n")
    lines = prelude.splitlines()
    assert lines[:2] == ["from __future__ import annotations", "from typing import *"]
    assert {"import math", "import numpy as np", "from sympy import symbols"} <= set(lines)
    assert "import numpy" not in lines and "import collections" not in lines
    program = build_grading_program("print(1)", ADD, fn_name=None, rule="reference")
    assert json.loads(ast.literal_eval(program.split("json.loads(", 1)[1].split(")\n", 1)[0]))["timeout"] == 4.0
    with pytest.raises(ValueError, match="rule must be one of official, reference"):
        build_grading_program("print(1)", ADD, fn_name=None, rule="strict")  # type: ignore[arg-type]


async def test_the_reference_compares_the_whole_output_exactly(sandbox, fixture_problems) -> None:
    metadata = fixture_problems["fx_abc002_b"].metadata
    short = "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) / n)\n"
    official = await grade_completion(sandbox, fenced(short), metadata, all_tests=True)
    reference = await grade_completion(sandbox, fenced(short), metadata, all_tests=True, rule="reference")
    assert (official.statuses, reference.statuses) == ("PPW", "WWW")  # 2.5 is not 2.500000 there
    assert reference.rule == "reference" and official.rule == "official"
    padded = "n = int(input())\nxs = list(map(int, input().split()))\nprint()\nprint(f'  {sum(xs) / n:.6f}  ')\n"
    assert (await grade_completion(sandbox, fenced(padded), metadata, rule="reference")).all_passed  # strip only
    split = "n = int(input())\nxs = list(map(int, input().split()))\nprint(f'{sum(xs) / n:.6f}'.replace('.', ' . '))\n"
    assert not (await grade_completion(sandbox, fenced(split), metadata, rule="reference")).all_passed


async def test_the_reference_runs_every_test_as_a_script(sandbox, fixture_problems) -> None:
    metadata = fixture_problems["fx_9001"].metadata
    solution = "class Solution:\n    def addToEvery(self, nums, k):\n        return [x + k for x in nums]\n"
    assert (await grade_completion(sandbox, fenced(solution), metadata)).all_passed
    reference = await grade_completion(sandbox, fenced(solution), metadata, all_tests=True, rule="reference")
    assert reference.statuses == "WWWW"  # the class is defined, nothing is printed
    script = "import sys, json\nnums, k = [json.loads(l) for l in sys.stdin.read().split(chr(10)) if l.strip()]\n"
    script += "def addToEvery(nums, k):\n    return [x + k for x in nums]\nprint(addToEvery(nums, k))\n"
    # a top-level function named fn_name is moved into class Solution first: the call then fails
    moved = await grade_completion(sandbox, fenced(script), metadata, rule="reference")
    assert moved.first_failure.kind == "runtime_error" and "NameError" in moved.first_failure.message
    renamed = script.replace("addToEvery", "add_to_every")
    assert (await grade_completion(sandbox, fenced(renamed), metadata, rule="reference")).all_passed


async def test_the_reference_does_not_run_a_program_that_does_not_parse(sandbox, fixture_problems) -> None:
    metadata = fixture_problems["fx_abc001_a"].metadata
    result = await grade_completion(sandbox, fenced("print(1\n"), metadata, rule="reference")
    assert result.first_failure.kind == "syntax_error" and result.passed == 0 and result.total == 4
    assert "not run: the program does not parse" in result.describe()
    assert (await grade_completion(sandbox, "no code", metadata, rule="reference")).first_failure.kind == "no_code"


async def test_the_reference_caps_the_address_space(sandbox, fixture_problems) -> None:
    metadata = fixture_problems["fx_abc001_a"].metadata
    big = fenced("a, b = map(int, input().split())\nblock = bytearray(600 * 1024 * 1024)\nprint(a + b)\n")
    assert (await grade_completion(sandbox, big, metadata)).all_passed  # the sandbox's own limit is larger
    capped = await grade_completion(sandbox, big, metadata, rule="reference")
    assert capped.first_failure.kind == "runtime_error" and "MemoryError" in capped.first_failure.message


async def test_the_code_scorer_reports_the_references_verdict_with_the_official_one_beside(
    local_sandbox, fixture_problems, monkeypatch: pytest.MonkeyPatch
) -> None:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, ModelOutput
    from inspect_ai.scorer import Target
    from inspect_ai.solver import TaskState

    from harness.evals import scorers

    monkeypatch.setattr(scorers, "current_sandbox", lambda: local_sandbox)
    problem = fixture_problems["fx_abc002_b"]

    def answered(code: str) -> TaskState:
        answer = "Here it is.\n" + fenced("n = int(input())\nxs = list(map(int, input().split()))\n" + code)
        return TaskState(
            model="replay/x",  # type: ignore[arg-type]
            sample_id=problem.id,
            epoch=1,
            input=problem.prompt,
            messages=[ChatMessageUser(content=problem.prompt), ChatMessageAssistant(content=answer)],
            output=ModelOutput.from_content(model="replay/x", content=answer),
        )

    exact = answered("print(f'{sum(xs) / n:.6f}')\n")
    reference = await scorers.code_scorer([problem], judge="reference")(exact, Target(""))
    assert reference.value["accuracy"] == 1.0 and reference.value["accuracy_lenient"] == 1.0
    assert set(reference.metadata["grades"]) == {"reference", "official"} and reference.metadata["judge"] == "reference"
    state = answered("print(float(f'{sum(xs) / n:.6f}'))\n")  # 2.5, 7.0, 1.333333
    both = await scorers.code_scorer([problem], judge="reference")(state, Target(""))
    # 2.5 for 2.500000: the official grader passes it, the reference's exact comparison does not
    assert both.value["accuracy"] == 0.0 and both.value["accuracy_lenient"] == 1.0
    assert both.explanation.startswith("reference: 0/3 tests passed") and "official: 3/3" in both.explanation
    lenient = await scorers.code_scorer([problem])(state, Target(""))
    assert lenient.value["accuracy"] == 1.0 and "accuracy_lenient" not in lenient.value
    assert set(lenient.metadata["grades"]) == {"official"} and lenient.metadata["judge"] == "lenient"


@pytest.mark.parametrize(("preset", "judge"), [(None, "lenient"), ("cleaner-paper", "reference")])
def test_the_task_grades_code_by_the_protocols_judge(preset: str | None, judge: str) -> None:
    from inspect_ai._util.registry import registry_params

    from harness.evals.tasks import registered_task

    window = {"start_date": "2020-01-01", "end_date": "2030-12-31"}
    task = registered_task("livecodebench", data="fixture", preset=preset, sandbox="local", **window)
    assert task.metadata["protocol"]["judge"] == judge
    assert registry_params(task.scorer[0])["judge"] == judge
