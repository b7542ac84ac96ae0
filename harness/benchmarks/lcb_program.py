"""The grading program: one stdlib-only Python program, holding a candidate and its tests, that runs in a sandbox.

:func:`build_grading_program` writes it for a rule (:data:`RULES`). It starts one child process per test (own
session, killed as a group on timeout) and prints a JSON verdict that :func:`harness.benchmarks.lcb.grade` reads.

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
import inspect
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, get_args

from harness.benchmarks.lcb_cases import parse_tests
from harness.core.echo_runner import ADDRESS_SPACE

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


def syntax_tree(code: str) -> ast.Module | str:
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
    tree = syntax_tree(code)
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
    tree = syntax_tree(code)
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
