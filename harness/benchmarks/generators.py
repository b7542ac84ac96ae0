"""Seeded problem generators with checkable answers, for warm-up SFT, held-out measurement and the demo.

Each generator draws one :class:`~harness.benchmarks.problem.Problem` (``math``, or ``code`` for ``stdin``) from a
``random.Random``, with a reference program that solves it in its metadata (:func:`program_of`). Five generators:

* ``bignum``: arithmetic on 7-15 digit numbers (digit sums, last digits, remainders of
  products and powers), which a 135M model cannot do in its head;
* ``modular``: modular powers, inverses and linear expressions;
* ``counting``: divisors, multiples, binomial coefficients, ordered pairs;
* ``aime``: small AIME-style computations (digit sums of powers and factorials,
  trailing zeros, primes below N, Fibonacci remainders);
* ``stdin``: short programs that read standard input (LiveCodeBench's stdin form,
  graded by tests).

Math answers are integers 0-999, the AIME answer form, so that generated problems
load with the AIME loader (:func:`write_aime_jsonl`) and are scored by the same
scorer as the benchmark. Code problems are written in LiveCodeBench's schema
(:func:`write_lcb_jsonl`). The answer is computed here in Python; callers that run
the reference program in a sandbox check that it prints the same thing.

The same seed always gives the same problems (``random.Random`` is stable across
Python versions for the calls used here).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.benchmarks.problem import Problem
from harness.core import prompts

#: The generators: each draws problems of one family (a math or a code problem, by :data:`MATH_GENERATORS`).
Generator = Literal["bignum", "modular", "counting", "aime", "stdin"]
GENERATORS: tuple[Generator, ...] = ("bignum", "modular", "counting", "aime", "stdin")
#: The generators of math problems, with a boxed integer answer (the aime24 task runs them).
MATH_GENERATORS: tuple[Generator, ...] = ("bignum", "modular", "counting", "aime")

#: The contest date written into generated LiveCodeBench rows (inside the task's default window).
LCB_DATE = "2025-03-01T00:00:00"


def generated_problem(
    pid: str, generator: Generator, question: str, answer: str, program: str, tests: Sequence[dict[str, str]] = ()
) -> Problem:
    """A generated problem: math keeps its answer as the target, stdin its tests; ``metadata`` holds the generator,
    the question as drawn and the reference ``program`` (for math it prints the answer; for stdin it is a complete
    solution reading standard input)."""
    code = generator == "stdin"
    prompt = prompts.code_prompt(question) if code else prompts.math_prompt(question)
    metadata = {"generator": generator, "question": question, "program": program}
    kind = "code" if code else "math"
    return Problem(pid, prompt, "" if code else answer, kind, list(tests), source=f"gen-{generator}", metadata=metadata)


def generator_of(problem: Problem) -> Generator:
    """The generator that drew ``problem``."""
    return problem.metadata["generator"]


def question_of(problem: Problem) -> str:
    """A generated problem's question, as drawn (before the prompt template)."""
    return problem.metadata["question"]


def program_of(problem: Problem) -> str:
    """A generated problem's reference program."""
    return problem.metadata["program"]


def answer_of(problem: Problem) -> str:
    """What a generated problem's reference program prints: the answer, or for stdin its first test's output."""
    return problem.tests[0]["output"].strip() if problem.kind == "code" else problem.target


def aime_row(problem: Problem) -> dict[str, str]:
    """A generated math problem in the AIME datasets' schema (``ID``, ``Problem``, ``Answer``)."""
    if problem.kind == "code":
        raise ValueError(f"problem {problem.id}: a stdin problem has no AIME row")
    return {"ID": problem.id, "Problem": question_of(problem), "Answer": problem.target}


def lcb_row(problem: Problem) -> dict[str, str]:
    """A generated stdin problem in LiveCodeBench's schema (first test public, the rest private)."""
    from harness.benchmarks.lcb_cases import encode_private_tests

    if problem.kind != "code":
        raise ValueError(f"problem {problem.id}: a {generator_of(problem)} problem has no LiveCodeBench row")
    return {
        "question_title": problem.id,
        "question_content": question_of(problem),
        "platform": "atcoder",
        "question_id": problem.id,
        "contest_id": "generated",
        "contest_date": LCB_DATE,
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": json.dumps(problem.tests[:1]),
        "private_test_cases": encode_private_tests(problem.tests[1:]),
        "metadata": "{}",
    }


Draw = tuple[str, int, str]  #: (question, answer, reference program) of a math problem


def _digits(rng: random.Random, lo: int, hi: int) -> int:
    n = rng.randint(lo, hi)
    return rng.randint(10 ** (n - 1), 10**n - 1)


# --------------------------------------------------------------------------- bignum


def _bignum(rng: random.Random) -> Draw:
    a, b = _digits(rng, 7, 15), _digits(rng, 6, 12)
    form = rng.randrange(5)
    if form == 0:
        return (
            f"Find the sum of the digits of ${a} \\times {b}$.",
            sum(int(c) for c in str(a * b)),
            f"n = {a} * {b}\nprint(sum(int(c) for c in str(n)))",
        )
    if form == 1:
        return (
            f"What are the last three digits of {a} * {b}? Give them as an integer.",
            (a * b) % 1000,
            f"print(({a} * {b}) % 1000)",
        )
    if form == 2:
        m = rng.choice([97, 101, 577, 997, 999])
        return (
            f"Find the remainder when {a} + {b} * {a % 10**5} is divided by {m}.",
            (a + b * (a % 10**5)) % m,
            f"print(({a} + {b} * {a % 10**5}) % {m})",
        )
    if form == 3:
        k = rng.randint(20, 200)
        base = rng.randint(3, 99)
        return (
            f"How many digits does ${base}^{{{k}}}$ have?",
            len(str(base**k)),
            f"print(len(str({base} ** {k})))",
        )
    c = _digits(rng, 5, 9)
    return (
        f"Compute the sum of the digits of ${a} - {b} \\cdot {c}$ (ignore the sign).",
        sum(int(ch) for ch in str(abs(a - b * c))),
        f"n = abs({a} - {b} * {c})\nprint(sum(int(ch) for ch in str(n)))",
    )


# --------------------------------------------------------------------------- modular


def _modular(rng: random.Random) -> Draw:
    form = rng.randrange(4)
    if form == 0:
        a, e, m = rng.randint(2, 99), rng.randint(10, 5000), rng.choice([7, 13, 97, 100, 997, 1000])
        return (
            f"Find the remainder when ${a}^{{{e}}}$ is divided by ${m}$.",
            pow(a, e, m),
            f"print(pow({a}, {e}, {m}))",
        )
    if form == 1:
        a, e = rng.randint(2, 99), rng.randint(50, 9000)
        return (
            f"Find the last three digits of ${a}^{{{e}}}$, as an integer from 0 to 999.",
            pow(a, e, 1000),
            f"print(pow({a}, {e}, 1000))",
        )
    if form == 2:
        m = rng.choice([101, 257, 401, 509, 601, 997])
        a = rng.randint(2, m - 1)
        return (
            f"Find the integer $x$ with $0 \\le x < {m}$ such that ${a}x \\equiv 1 \\pmod{{{m}}}$.",
            pow(a, -1, m),
            f"print(pow({a}, -1, {m}))",
        )
    a, b, c, m = rng.randint(10**5, 10**9), rng.randint(10**5, 10**9), rng.randint(1, 10**6), rng.randint(100, 999)
    return (
        f"Find $({a} \\cdot {b} + {c}) \\bmod {m}$.",
        (a * b + c) % m,
        f"print(({a} * {b} + {c}) % {m})",
    )


# --------------------------------------------------------------------------- counting


def _counting(rng: random.Random) -> Draw:
    form = rng.randrange(5)
    if form == 0:
        n, a, b = rng.randint(200, 999), rng.randint(2, 9), rng.randint(10, 30)
        return (
            f"How many integers from 1 to {n}, inclusive, are divisible by {a} or by {b}?",
            sum(1 for i in range(1, n + 1) if i % a == 0 or i % b == 0),
            f"print(sum(1 for i in range(1, {n} + 1) if i % {a} == 0 or i % {b} == 0))",
        )
    if form == 1:
        p = [rng.randint(0, 4) for _ in range(4)]
        n = 2 ** p[0] * 3 ** p[1] * 5 ** p[2] * 7 ** p[3]
        return (
            f"Find the number of positive divisors of ${n}$.",
            sum(1 for d in range(1, n + 1) if n % d == 0),
            f"import sympy\nprint(sympy.divisor_count({n}))",
        )
    if form == 2:
        n = rng.randint(5, 40)
        k = rng.randint(1, n - 1)
        return (
            f"In how many ways can {k} people be chosen from a group of {n}? If the count is larger than 999, "
            "give its remainder modulo 1000.",
            math.comb(n, k) % 1000,
            f"import math\nprint(math.comb({n}, {k}) % 1000)",
        )
    if form == 3:
        a, b = rng.randint(1, 5), rng.randint(1, 7)
        n = rng.randint(40, 400)
        count = sum(1 for x in range(1, n) for y in range(1, n) if a * x + b * y == n)
        return (
            f"How many ordered pairs $(x, y)$ of positive integers satisfy ${a}x + {b}y = {n}$?",
            count,
            f"print(sum(1 for x in range(1, {n}) for y in range(1, {n}) if {a} * x + {b} * y == {n}))",
        )
    n, s = rng.randint(500, 5000), rng.randint(5, 20)
    return (
        f"How many integers from 1 to {n} have a digit sum equal to {s}?",
        sum(1 for i in range(1, n + 1) if sum(map(int, str(i))) == s),
        f"print(sum(1 for i in range(1, {n} + 1) if sum(map(int, str(i))) == {s}))",
    )


# --------------------------------------------------------------------------- aime


def _fib_mod(n: int, m: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, (a + b) % m
    return a


def _aime(rng: random.Random) -> Draw:
    form = rng.randrange(6)
    if form == 0:
        k = rng.randint(30, 300)
        return (
            f"Find the sum of the digits of $2^{{{k}}}$.",
            sum(int(c) for c in str(2**k)),
            f"print(sum(int(c) for c in str(2 ** {k})))",
        )
    if form == 1:
        n = rng.randint(20, 150)
        return (
            f"Find the sum of the digits of ${n}!$ modulo 1000.",
            sum(int(c) for c in str(math.factorial(n))) % 1000,
            f"import math\nprint(sum(int(c) for c in str(math.factorial({n}))) % 1000)",
        )
    if form == 2:
        n = rng.randint(100, 1000)
        zeros, p = 0, 5
        while p <= n:
            zeros, p = zeros + n // p, p * 5
        return (
            f"How many zeros are at the end of ${n}!$?",
            zeros,
            f"import math\ns = str(math.factorial({n}))\nprint(len(s) - len(s.rstrip('0')))",
        )
    if form == 3:
        n = rng.randint(100, 7000)
        count = sum(1 for i in range(2, n) if all(i % d for d in range(2, math.isqrt(i) + 1)))
        return (
            f"How many prime numbers are less than {n}?",
            count,
            f"import sympy\nprint(sympy.primepi({n - 1}))",
        )
    if form == 4:
        n, m = rng.randint(50, 3000), rng.choice([100, 997, 1000])
        return (
            f"Let $F_0 = 0$, $F_1 = 1$ and $F_{{n+1}} = F_n + F_{{n-1}}$. Find the remainder when $F_{{{n}}}$ "
            f"is divided by {m}.",
            _fib_mod(n, m),
            f"a, b = 0, 1\nfor _ in range({n}):\n    a, b = b, a + b\nprint(a % {m})",
        )
    lo, hi, k = rng.randint(1, 100), rng.randint(300, 3000), rng.randint(3, 17)
    total = sum(i for i in range(lo, hi + 1) if i % k == 0)
    return (
        f"Find the sum of all multiples of {k} from {lo} to {hi}, inclusive, modulo 1000.",
        total % 1000,
        f"print(sum(i for i in range({lo}, {hi} + 1) if i % {k} == 0) % 1000)",
    )


# --------------------------------------------------------------------------- stdin


@dataclass(frozen=True)
class _StdinSpec:
    question: str
    code: str
    make_input: Callable[[random.Random], str]
    solve: Callable[[str], str]


def _ints_line(rng: random.Random, n: int, lo: int = -1000, hi: int = 1000) -> str:
    return " ".join(str(rng.randint(lo, hi)) for _ in range(n))


_STDIN: tuple[_StdinSpec, ...] = (
    _StdinSpec(
        "You are given two integers A and B on one line, separated by a space. Print A*B.\n\n"
        "Sample Input 1\n\n{sample}\nSample Output 1\n\n{output}",
        "a, b = map(int, input().split())\nprint(a * b)",
        lambda r: f"{r.randint(-(10**6), 10**6)} {r.randint(-(10**6), 10**6)}\n",
        lambda s: str(int(s.split()[0]) * int(s.split()[1])),
    ),
    _StdinSpec(
        "The first line holds N. The second line holds N integers. Print their sum.\n\n"
        "Sample Input 1\n\n{sample}\nSample Output 1\n\n{output}",
        "n = int(input())\nnums = list(map(int, input().split()))\nprint(sum(nums))",
        lambda r: (lambda n: f"{n}\n{_ints_line(r, n)}\n")(r.randint(1, 8)),
        lambda s: str(sum(map(int, s.split("\n")[1].split()))),
    ),
    _StdinSpec(
        "The first line holds N. The second line holds N integers. Print the largest of them minus the "
        "smallest.\n\nSample Input 1\n\n{sample}\nSample Output 1\n\n{output}",
        "n = int(input())\nnums = list(map(int, input().split()))\nprint(max(nums) - min(nums))",
        lambda r: (lambda n: f"{n}\n{_ints_line(r, n)}\n")(r.randint(1, 8)),
        lambda s: (lambda v: str(max(v) - min(v)))(list(map(int, s.split("\n")[1].split()))),
    ),
    _StdinSpec(
        "You are given a string S of lowercase letters. Print S reversed.\n\n"
        "Sample Input 1\n\n{sample}\nSample Output 1\n\n{output}",
        "s = input().strip()\nprint(s[::-1])",
        lambda r: "".join(r.choice("abcdefghij") for _ in range(r.randint(3, 12))) + "\n",
        lambda s: s.strip()[::-1],
    ),
    _StdinSpec(
        "You are given an integer N. Print the sum of the squares of the integers from 1 to N.\n\n"
        "Sample Input 1\n\n{sample}\nSample Output 1\n\n{output}",
        "n = int(input())\nprint(sum(i * i for i in range(1, n + 1)))",
        lambda r: f"{r.randint(1, 500)}\n",
        lambda s: str(sum(i * i for i in range(1, int(s) + 1))),
    ),
    _StdinSpec(
        "The first line holds N. The second line holds N integers. Print how many of them are even.\n\n"
        "Sample Input 1\n\n{sample}\nSample Output 1\n\n{output}",
        "n = int(input())\nnums = list(map(int, input().split()))\nprint(sum(1 for x in nums if x % 2 == 0))",
        lambda r: (lambda n: f"{n}\n{_ints_line(r, n)}\n")(r.randint(1, 8)),
        lambda s: str(sum(1 for x in map(int, s.split("\n")[1].split()) if x % 2 == 0)),
    ),
    _StdinSpec(
        "You are given a string S. Print the number of vowels (a, e, i, o, u) in S.\n\n"
        "Sample Input 1\n\n{sample}\nSample Output 1\n\n{output}",
        "s = input().strip()\nprint(sum(1 for c in s if c in 'aeiou'))",
        lambda r: "".join(r.choice("abcdeiouxyz") for _ in range(r.randint(3, 15))) + "\n",
        lambda s: str(sum(1 for c in s.strip() if c in "aeiou")),
    ),
)


def _stdin(rng: random.Random, pid: str) -> Problem:
    spec = rng.choice(_STDIN)
    inputs = [spec.make_input(rng) for _ in range(4)]
    tests = [{"input": i, "output": spec.solve(i) + "\n", "testtype": "stdin"} for i in inputs]
    question = spec.question.format(sample=inputs[0], output=tests[0]["output"])
    return generated_problem(pid, "stdin", question, tests[0]["output"].strip(), spec.code, tests)


# --------------------------------------------------------------------------- API

_MATH: dict[str, Callable[[random.Random], Draw]] = {
    "bignum": _bignum,
    "modular": _modular,
    "counting": _counting,
    "aime": _aime,
}


def generate_one(generator: Generator, rng: random.Random, pid: str) -> Problem:
    """One problem of ``generator`` drawn from ``rng``."""
    if generator == "stdin":
        return _stdin(rng, pid)
    if generator not in _MATH:
        raise ValueError(f"unknown problem generator {generator!r}; known: {', '.join(GENERATORS)}")
    question, answer, code = _MATH[generator](rng)
    if not 0 <= answer <= 999:
        raise AssertionError(f"generator {generator} produced answer {answer} outside 0-999 for {question!r}")
    return generated_problem(pid, generator, question, str(answer), code)


def generate(
    n: int,
    *,
    seed: int,
    generators: Sequence[Generator] = GENERATORS,
    weights: Sequence[float] | None = None,
    prefix: str = "gen",
) -> list[Problem]:
    """``n`` problems drawn with ``seed``, generators chosen with ``weights`` (default: equal).

    Ids are ``<prefix>-<seed>-<index>-<generator>``: distinct seeds give distinct problem sets
    (train on some seeds, measure on others).
    """
    if n < 0:
        raise ValueError(f"generate: n must be >= 0, got {n}")
    unknown = [g for g in generators if g not in GENERATORS]
    if unknown or not generators:
        raise ValueError(f"generate: unknown or no generators {unknown or generators}; known: {', '.join(GENERATORS)}")
    if weights is not None and len(weights) != len(generators):
        raise ValueError(f"generate: {len(weights)} weights for {len(generators)} generators")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        generator = rng.choices(list(generators), weights=weights)[0]
        out.append(generate_one(generator, rng, f"{prefix}-{seed}-{i:04d}-{generator}"))
    return out


def write_aime_jsonl(problems: Sequence[Problem], path: str | Path) -> Path:
    """Write math problems as an AIME-schema JSONL file (``-T data=<file>`` of the aime24 task).

    Returns the absolute path (Inspect loads a task from its own directory, so a relative one would not resolve).
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [aime_row(p) for p in problems if p.kind != "code"]
    if not rows:
        raise ValueError(f"write_aime_jsonl: no math problems to write to {out}")
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out.resolve()


def write_lcb_jsonl(problems: Sequence[Problem], path: str | Path) -> Path:
    """Write stdin problems as a LiveCodeBench-schema JSONL file (``-T data=<file>``); returns its absolute path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [lcb_row(p) for p in problems if p.kind == "code"]
    if not rows:
        raise ValueError(f"write_lcb_jsonl: no stdin problems to write to {out}")
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out.resolve()
