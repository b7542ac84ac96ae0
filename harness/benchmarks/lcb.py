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

Private tests are stored upstream as ``base64(zlib(pickle(json_string)))``. Unpickling
untrusted data can run code, so :func:`decode_private_tests` uses an unpickler that
refuses every global: only plain data (a string) comes out.

The **reference's grading** (``rule="reference"``) is the other rule: Open-CLEANER grades
LiveCodeBench with ``code_math.compute_score`` (verl ``utils/reward_score/livecodebench/code_math.py``
193-373 at commit 91e40ad) over its code-judge service. There the program is the last
```` ```python\n ```` block of the whole response after its first ``</think>``
(:func:`reference_code`), a program that does not parse fails without running, a top-level
function named ``fn_name`` is moved into a class ``Solution`` (:func:`as_solution_class`),
and every test, functional ones too, runs the program as a script with the test input on
standard input: it passes when the program exits with status 0 and its whole standard output,
stripped, equals the expected output, stripped (code-judge ``app/worker_manager.py`` line 77;
:func:`reference_stdout_matches`). The program runs after code-judge's imports
(:func:`reference_prelude`) under its limits (:data:`REFERENCE_TIMEOUT`,
:data:`REFERENCE_ADDRESS_SPACE`).
"""

from __future__ import annotations

import ast
import base64
import binascii
import inspect
import io
import json
import pickle
import re
import secrets
import zlib
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, get_args

from harness.core.echo_runner import ADDRESS_SPACE
from sandboxes.base import Sandbox, SandboxError

TestType = Literal["stdin", "functional"]
FailureKind = Literal["wrong_answer", "runtime_error", "timeout", "no_code", "syntax_error"]
#: How a program is graded: LiveCodeBench's own evaluator, or the reference's (code-judge's exact comparison).
Rule = Literal["official", "reference"]
RULES: tuple[Rule, ...] = get_args(Rule)

#: Seconds per test of each rule: the project's default for the official grader; code-judge's
#: ``MAX_EXECUTION_TIME=4`` (the reference's README, lines 108-109) for the reference's.
RULE_TIMEOUTS: dict[Rule, float] = {"official": 6.0, "reference": 4.0}
REFERENCE_TIMEOUT = RULE_TIMEOUTS["reference"]
#: code-judge's address-space cap (the tool's, :data:`harness.core.echo_runner.ADDRESS_SPACE`), set after its imports.
REFERENCE_ADDRESS_SPACE = ADDRESS_SPACE
#: The imports code-judge puts before every program (``python_executor.py`` line 27), then those of
#: :data:`REFERENCE_NAME_IMPORTS` whose name the program uses.
REFERENCE_IMPORTS = ("from __future__ import annotations", "from typing import *")
#: A name the program uses -> the import code-judge adds for it (``python_executor.py`` lines 14-23).
REFERENCE_NAME_IMPORTS: dict[str, str] = {
    "math": "import math",
    "itertools": "import itertools",
    "collections": "import collections",
    "np": "import numpy as np",
    "numpy": "import numpy",
    "sp": "import sympy as sp",
    "sympy": "import sympy",
    "symbols": "from sympy import symbols",
}

#: Imports made available to every candidate, like upstream's evaluator does (LeetCode
#: starter code uses ``List[int]`` without importing it).
PRELUDE = """\
import sys, os, math, re, json, heapq, bisect, string, random, itertools, functools, collections, operator, copy
from typing import *
from collections import *
from itertools import *
from functools import *
from heapq import *
from bisect import *
from math import *
from builtins import *
sys.setrecursionlimit(50000)
"""


def check_rule(rule: str) -> Rule:
    """``rule`` if it is one of :data:`RULES`, else a ValueError naming them."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
    return rule  # type: ignore[return-value]


class GradingError(RuntimeError):
    """The grading program did not produce a verdict (not the candidate's fault to score)."""


# --------------------------------------------------------------------------- test data


class RefusedGlobalError(pickle.UnpicklingError):
    """A pickle asked for a global (a class or function); only plain data is allowed."""


class _NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler for plain data only: every global (class, function) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise RefusedGlobalError(
            f"refusing to load global {module}.{name}: LiveCodeBench private tests must be plain data"
        )


def restricted_loads(data: bytes) -> Any:
    """``pickle.loads`` that refuses every global (so no code can run while loading)."""
    return _NoGlobalsUnpickler(io.BytesIO(data)).load()


def encode_private_tests(tests: list[dict[str, Any]]) -> str:
    """Encode tests exactly as upstream stores ``private_test_cases``."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def decode_private_tests(value: str, *, where: str = "private_test_cases") -> list[dict[str, Any]]:
    """Decode upstream's ``private_test_cases``: plain JSON, or base64(zlib(pickle(json)))."""
    if not value or not value.strip():
        return []
    try:
        plain = json.loads(value)
    except json.JSONDecodeError:
        plain = None
    if isinstance(plain, list):
        return parse_tests(plain, where=where)
    try:
        raw = zlib.decompress(base64.b64decode(value.encode("ascii"), validate=False))
    except (binascii.Error, zlib.error, UnicodeEncodeError, ValueError) as exc:
        raise ValueError(f"{where}: neither JSON nor base64(zlib(pickle(json))): {exc}") from exc
    try:
        decoded = restricted_loads(raw)
    except RefusedGlobalError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    except Exception as exc:  # a corrupt pickle raises many kinds of error
        raise ValueError(f"{where}: the pickle is corrupt ({type(exc).__name__}: {exc})") from exc
    if not isinstance(decoded, str):
        raise ValueError(f"{where}: the pickle holds {type(decoded).__name__}, expected a JSON string")
    try:
        return parse_tests(json.loads(decoded), where=where)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: the decoded pickle is not JSON ({exc.msg})") from exc


def parse_tests(value: Any, *, where: str = "tests") -> list[dict[str, Any]]:
    """Validate a list of upstream test dicts (``input``, ``output``, ``testtype``)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not valid JSON ({exc.msg} at position {exc.pos})") from exc
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list of tests, got {type(value).__name__}")
    tests: list[dict[str, Any]] = []
    for i, test in enumerate(value):
        if not isinstance(test, dict):
            raise ValueError(f"{where}[{i}]: expected an object, got {type(test).__name__}")
        for key in ("input", "output"):
            if not isinstance(test.get(key), str):
                raise ValueError(f"{where}[{i}]: field {key!r} must be a string")
        testtype = test.get("testtype", "stdin")
        if testtype not in ("stdin", "functional"):
            raise ValueError(f"{where}[{i}]: field 'testtype' must be 'stdin' or 'functional', got {testtype!r}")
        tests.append({"input": test["input"], "output": test["output"], "testtype": testtype})
    return tests


def problem_tests(metadata: dict[str, Any], *, where: str = "problem") -> list[dict[str, Any]]:
    """All tests of a LiveCodeBench problem (public, then private) from its metadata."""
    public = parse_tests(metadata.get("public_test_cases", "[]"), where=f"{where}: public_test_cases")
    private = decode_private_tests(metadata.get("private_test_cases", ""), where=f"{where}: private_test_cases")
    return public + private


# --------------------------------------------------------------------------- comparison
# These two functions are also copied verbatim into the grading program (by
# inspect.getsource), so the harness and the sandbox judge outputs identically.


def _line_decimals(line):
    try:
        return [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError):
        return None


def stdout_matches(got, expected):
    """Upstream's stdin comparison: stripped lines equal, or equal as Decimal numbers."""
    got_lines = [line.strip() for line in got.strip().split("\n")]
    want_lines = [line.strip() for line in expected.strip().split("\n")]
    if len(got_lines) != len(want_lines):
        return False
    for got_line, want_line in zip(got_lines, want_lines, strict=True):
        if got_line == want_line:
            continue
        got_numbers = _line_decimals(got_line)
        want_numbers = _line_decimals(want_line)
        if got_numbers is None or want_numbers is None or got_numbers != want_numbers:
            return False
    return True


def reference_stdout_matches(got, expected):
    """code-judge's comparison: the whole output, stripped, equals the expected output, stripped."""
    return got.strip() == expected.strip()


# --------------------------------------------------------------------------- the reference's program


def reference_code(response: str | None) -> str | None:
    """The program the reference grades: the last ```` ```python\\n ```` block of the whole response.

    As ``code_math.compute_score`` reads it (lines 197-200 and 311): the text after the first
    ``</think>`` (up to a second one) when there is one, else all of it, tool calls and tool
    results included; the fence must be exactly ```` ```python ```` and a line break.
    ``None`` when there is no such block.
    """
    if not response:
        return None
    text = response.split("</think>")[1] if "</think>" in response else response
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    return blocks[-1] if blocks else None


def _syntax_tree(code: str) -> ast.Module | str:
    """The syntax tree of ``code``, or why it does not parse as Python (parsing runs nothing)."""
    try:
        return ast.parse(code)
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"{type(exc).__name__}: {exc}"


def as_solution_class(code: str, fn_name: str) -> str:
    """``code`` with its top-level function ``fn_name`` moved into a class ``Solution``, as the reference does.

    ``code_math.convert_function_to_class_method`` (lines 97-136) does this when the ground truth
    names a function and the program has no ``class Solution``: the function becomes the class's
    only method (a ``self`` parameter added when its first one is not ``self``), the class goes
    last, and the program is written back from its syntax tree. ``code`` unchanged when it does
    not parse or has no such function.
    """
    tree = _syntax_tree(code)
    if isinstance(tree, str):
        return code
    target = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == fn_name), None)
    if target is None:
        return code
    if not (target.args.args and target.args.args[0].arg == "self"):
        target.args.args.insert(0, ast.arg(arg="self"))
    body = [n for n in tree.body if n is not target]
    solution = ast.ClassDef(name="Solution", bases=[], keywords=[], body=[target], decorator_list=[])
    if "type_params" in ast.ClassDef._fields:  # Python 3.12 and later
        solution.type_params = []
    body.append(solution)
    tree.body = body
    try:
        return ast.unparse(ast.fix_missing_locations(tree))
    except (ValueError, RecursionError):
        return code


def _names_used(code: str) -> set[str]:
    """The names ``code`` reads, and the bases of its attributes (what code-judge's import analysis sees)."""
    tree = _syntax_tree(code)
    if isinstance(tree, str):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            names.add(node.value.id)
    return names


def reference_prelude(code: str) -> str:
    """What code-judge writes before a program: its imports, then its limits (CPU time and address space)."""
    used = sorted({REFERENCE_NAME_IMPORTS[name] for name in _names_used(code) if name in REFERENCE_NAME_IMPORTS})
    limits = f"""
def _reference_limits():
    import os, resource
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    limits = ((resource.RLIMIT_CPU, {int(REFERENCE_TIMEOUT)}), (resource.RLIMIT_AS, {REFERENCE_ADDRESS_SPACE}))
    for _limit, _value in limits:
        _hard = resource.getrlimit(_limit)[1]
        resource.setrlimit(_limit, (_value if _hard == resource.RLIM_INFINITY else min(_value, _hard), _hard))
_reference_limits()
"""
    return "\n".join([*REFERENCE_IMPORTS, *used]) + "\n" + limits


# --------------------------------------------------------------------------- the program

_DRIVER = r"""
import io, json, sys
_out = sys.stdout
sys.stdout = io.StringIO()
_args = json.loads(sys.stdin.read())
sys.stdin = io.StringIO("")
_ns = {"__name__": "solution"}
with open(sys.argv[1], encoding="utf-8") as _f:
    exec(compile(_f.read(), "solution.py", "exec"), _ns)
_name = sys.argv[2]
if "Solution" in _ns:
    _fn = getattr(_ns["Solution"](), _name)
elif _name in _ns:
    _fn = _ns[_name]
else:
    raise NameError("the solution defines neither class Solution nor function " + _name)
_result = _fn(*_args)
if isinstance(_result, tuple):
    _result = list(_result)
try:
    _text = json.dumps(_result)
except (TypeError, ValueError) as _exc:
    sys.stderr.write("the return value is not JSON-serializable: %r\n" % (_exc,))
    sys.exit(3)
_out.write("\n" + sys.argv[3] + _text + "\n")
_out.flush()
"""

_GRADER = r"""
import json, os, signal, subprocess, sys, tempfile, time
from decimal import Decimal, InvalidOperation

_PAYLOAD = json.loads(__PAYLOAD__)

__COMPARE__

def _tail(text, limit=300):
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]

def _head(text, limit=200):
    return text if len(text) <= limit else text[:limit] + "..."

def _run(argv, stdin_text, timeout, cwd):
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(stdin_text.encode("utf-8"), timeout=timeout)
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, err = proc.communicate()
        return None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), True

def _error_line(err, code):
    lines = [line for line in err.strip().splitlines() if line.strip()]
    if lines:
        return lines[-1].strip()
    if code is not None and code < 0:
        return "killed by signal %d" % (-code)
    return "exit status %s" % (code,)

def main():
    work = tempfile.mkdtemp(prefix="lcb-")
    solution = os.path.join(work, "solution.py")
    with open(solution, "w", encoding="utf-8") as f:
        f.write(_PAYLOAD["prelude"] + "\n" + _PAYLOAD["code"])
    driver = os.path.join(work, "driver.py")
    with open(driver, "w", encoding="utf-8") as f:
        f.write(_PAYLOAD["driver"])
    marker = _PAYLOAD["marker"]
    fn_name = _PAYLOAD["fn_name"]
    timeout = _PAYLOAD["timeout"]
    matches = reference_stdout_matches if _PAYLOAD["rule"] == "reference" else stdout_matches
    statuses, first, passed = [], None, 0
    for index, test in enumerate(_PAYLOAD["tests"]):
        start = time.monotonic()
        if fn_name:
            argv = [sys.executable, driver, solution, fn_name, marker]
            code, out, err, timed_out = _run(argv, json.dumps(test["args"]), timeout, work)
        else:
            code, out, err, timed_out = _run([sys.executable, solution], test["input"], timeout, work)
        elapsed = time.monotonic() - start
        failure = None
        if timed_out:
            failure = ("timeout", "no verdict within %.1f s" % timeout, "")
        elif code != 0:
            failure = ("runtime_error", _error_line(err, code), _tail(out))
        elif fn_name:
            text = out.rsplit(marker, 1)[-1].strip() if marker in out else None
            if text is None:
                failure = ("runtime_error", "the driver returned no value", _tail(out))
            elif json.loads(text) != test["expected"]:
                failure = ("wrong_answer", "returned value differs from the expected one", _head(text))
        elif not matches(out, test["output"]):
            failure = ("wrong_answer", "output differs from the expected output", _head(out))
        if failure is None:
            passed += 1
            statuses.append("P")
        else:
            statuses.append(failure[0][0].upper())
            if first is None:
                first = {"index": index, "kind": failure[0], "message": failure[1], "got": failure[2],
                         "input": _head(test["input"]), "expected": _head(test["output"]),
                         "duration": round(elapsed, 3)}
            if not _PAYLOAD["all_tests"]:
                break
    print(marker + json.dumps({"passed": passed, "total": len(_PAYLOAD["tests"]), "statuses": "".join(statuses),
                               "first_failure": first}))

main()
"""


def build_grading_program(
    code: str,
    tests: list[dict[str, Any]],
    *,
    fn_name: str | None,
    timeout_per_test: float | None = None,
    all_tests: bool = True,
    marker: str = "__LCB_RESULT__",
    rule: Rule = "official",
) -> str:
    """The self-contained, stdlib-only Python program that grades ``code`` on ``tests`` by ``rule``.

    Functional test inputs and outputs are JSON-decoded here (the official rule), so a broken
    test raises a ``ValueError`` naming it before anything runs. The reference's rule runs every
    test as a script on standard input, after :func:`reference_prelude`. ``timeout_per_test``
    None is the rule's (:data:`RULE_TIMEOUTS`).
    """
    check_rule(rule)
    tests = parse_tests(tests)
    if rule == "reference":
        fn_name = None  # code-judge runs the program as a script, a functional test's input on stdin
    prepared: list[dict[str, Any]] = []
    for i, test in enumerate(tests):
        item: dict[str, Any] = {"input": test["input"], "output": test["output"]}
        if fn_name:
            try:
                item["args"] = [json.loads(line) for line in test["input"].split("\n") if line.strip()]
                item["expected"] = json.loads(test["output"])
            except json.JSONDecodeError as exc:
                raise ValueError(f"test {i}: functional test input/output is not JSON ({exc.msg})") from exc
        prepared.append(item)
    payload = {
        "code": code,
        "tests": prepared,
        "fn_name": fn_name,
        "timeout": float(RULE_TIMEOUTS[rule] if timeout_per_test is None else timeout_per_test),
        "all_tests": all_tests,
        "marker": marker,
        "prelude": reference_prelude(code) if rule == "reference" else PRELUDE,
        "driver": _DRIVER,
        "rule": rule,
    }
    compare = "\n".join(inspect.getsource(f) for f in (_line_decimals, stdout_matches, reference_stdout_matches))
    program = _GRADER.replace("__COMPARE__", compare)
    return program.replace("__PAYLOAD__", repr(json.dumps(payload)))


# --------------------------------------------------------------------------- grading


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
        tree = _syntax_tree(code)
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
