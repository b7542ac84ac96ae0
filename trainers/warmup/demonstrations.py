"""The cold-start SFT's demonstrations: generated problems solved by scripted turns in the exact protocol of evaluation.

Problems come from :mod:`harness.benchmarks.generators` (seeded). Each is solved by the rollout core
(:func:`harness.core.rollout.rollout`, SAAR off) running a scripted "model" (:class:`ScriptedTurns`) whose turns are
the project's demonstrations, so every call is parsed by :mod:`harness.core.protocol`, executed in the real local
sandbox and answered with the real tool output or traceback, exactly as at evaluation. A share (``fail_share``) of
demonstrations first makes a call with a planted bug (:func:`plant_bug`: a missing import, a typo, an unclosed
parenthesis, a str + int, a wrong function name, broken JSON); the real error comes back and the next turn explains
it and fixes the call. A demonstration's trained turns are its assistant turns but a turn whose call failed: the
model learns the fix, not the bug.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.benchmarks.generators import answer_of, program_of
from harness.benchmarks.problem import Problem
from harness.core import protocol
from harness.core.messages import Generation, Message
from harness.core.problems import rollout_config
from harness.core.rollout import rollout
from harness.core.toolenv import PROJECT


@dataclass(frozen=True)
class Bug:
    """A planted mistake: the failing first attempt and what the fixing turn says about it."""

    name: str
    attempt: str  #: the whole first assistant turn (reasoning and call, possibly malformed)
    explanation: str  #: why it failed, said by the fixing turn


@dataclass
class Demonstration:
    """One rendered trajectory with the indices of its assistant turns that are trained on."""

    problem: Problem
    messages: list[Message]
    trained_turns: list[int]  #: 0-based indices among the assistant turns
    bug: str | None = None
    error_kinds: list[str] = field(default_factory=list)


_OPENERS = (
    "I will compute this with Python.",
    "Let me compute it with the python tool.",
    "This is easiest to compute exactly with a short program.",
    "I'll write a small program to get the exact value.",
    "Computing this by hand is error-prone, so I use the tool.",
)
_CODE_OPENERS = (
    "I will write the program and test it on the sample input first.",
    "Let me test a solution on the sample input with the tool.",
    "I'll run my solution on Sample Input 1 before answering.",
)
_ANSWERS = (
    "The program printed {out}.\n\nThe answer is \\boxed{{{out}}}.",
    "The result is {out}, so the answer is \\boxed{{{out}}}.",
    "The tool returned {out}.\n\nFinal answer: \\boxed{{{out}}}",
)
_CODE_ANSWERS = (
    "It prints {out} for the sample, which matches Sample Output 1.\n\n```python\n{code}\n```",
    "The output {out} matches the sample. Final solution:\n\n```python\n{code}\n```",
)


def call_text(reasoning: str, code: str) -> str:
    """An assistant turn as the model writes it: reasoning, then the Hermes call."""
    return f"{reasoning}\n{protocol.serialize_call(code)}"


def sample_harness(problem: Problem, stdin: str) -> str:
    """The program a stdin solution is tried with: the sample input fed through ``sys.stdin``."""
    return f"import io, sys\nsys.stdin = io.StringIO({stdin!r})\n{program_of(problem)}"


def reference_program(problem: Problem) -> str:
    """The generator's own program as a demonstration calls it (a stdin solution on its first sample input)."""
    return sample_harness(problem, problem.tests[0]["input"]) if problem.kind == "code" else program_of(problem)


#: A function the reference programs use -> the name a small model guesses instead, and the fix's explanation.
_WRONG_FUNCTIONS = {
    "math.comb": ("math.choose", "math has no function choose; the binomial coefficient is math.comb."),
    "sympy.primepi": ("sympy.prime_pi", "sympy has no prime_pi; the prime-counting function is sympy.primepi."),
}


def plant_bug(problem: Problem, code: str, reasoning: str, rng: random.Random) -> Bug:
    """A first attempt with a mistake a small model makes, chosen among those that apply to ``code``."""
    options: list[Bug] = []
    for module in ("math", "sympy"):
        if f"import {module}\n" in code:
            options.append(
                Bug(
                    "missing_import",
                    call_text(reasoning, code.replace(f"import {module}\n", "")),
                    f"I forgot to import {module}. I add the import.",
                )
            )
    for right, (wrong, explanation) in _WRONG_FUNCTIONS.items():
        if right in code:
            options.append(Bug("wrong_function", call_text(reasoning, code.replace(right, wrong)), explanation))
    if code.rstrip().endswith(")"):
        options.append(
            Bug("unclosed_paren", call_text(reasoning, code.rstrip()[:-1]), "A closing parenthesis is missing.")
        )
    last = code.rstrip().splitlines()[-1]
    if last.startswith("print(") and problem.kind != "code":
        expr = last[len("print(") : -1]
        options.append(
            Bug(
                "str_plus_int",
                call_text(reasoning, code.replace(last, f'print("The answer is " + {expr})')),
                "A string cannot be added to an integer. I print the number alone.",
            )
        )
        options.append(
            Bug(
                "typo",
                call_text(reasoning, code.replace(last, f"pritn({expr})")),
                "I misspelled print.",
            )
        )
    if "input().split()" in code:
        options.append(
            Bug(
                "no_split",
                call_text(reasoning, code.replace("input().split()", "input()", 1)),
                "The numbers are on one line separated by spaces, so the line must be split first.",
            )
        )
    broken = protocol.serialize_call(code).replace("}}\n</tool_call>", "}\n</tool_call>")
    options.append(
        Bug(
            "malformed_json",
            f"{reasoning}\n{broken}",
            "My tool call was not valid JSON: a closing brace was missing. I write the call again.",
        )
    )
    return rng.choice(options)


class ScriptedTurns:
    """The ``generate`` of a demonstration: the project's turns, chosen after seeing each tool result."""

    def __init__(self, problem: Problem, code: str, opener: str, bug: Bug | None, rng: random.Random) -> None:
        self.problem, self.code, self.reasoning, self.bug, self.rng = problem, code, opener, bug, rng
        self.turn = 0

    async def __call__(self, context: list[Message], *, seed: int | None = None) -> Generation:
        self.turn += 1
        if self.turn == 1:
            text = self.bug.attempt if self.bug else call_text(self.reasoning, self.code)
            return Generation(text=text, output_tokens=len(text) // 4)
        last = context[-1]
        if last.role != "tool":
            raise AssertionError(f"{self.problem.id}: scripted turn {self.turn} after a {last.role} message")
        if not last.meta.get("ok", False):
            if self.bug is None or self.turn > 2:
                raise DemonstrationError(
                    f"{self.problem.id}: the reference program failed in the sandbox:\n{last.content}"
                )
            error_line = error_summary(last.content)
            text = call_text(f"The call failed: {error_line}\n{self.bug.explanation}", self.code)
            return Generation(text=text, output_tokens=len(text) // 4)
        text = answer_text(self.problem, last.content, self.rng)
        return Generation(text=text, output_tokens=len(text) // 4)


def answer_text(problem: Problem, output: str, rng: random.Random) -> str:
    """The closing turn after the reference program printed ``output``: the boxed answer, or the final solution.
    A reference program that printed anything but the problem's answer is a generator defect."""
    out = output.strip()
    if out != answer_of(problem):
        raise DemonstrationError(f"{problem.id}: the reference program printed {out!r}, not {answer_of(problem)!r}")
    if problem.kind == "code":
        return rng.choice(_CODE_ANSWERS).format(out=out, code=program_of(problem))
    return rng.choice(_ANSWERS).format(out=out)


def error_summary(tool_output: str) -> str:
    """The line of a tool error that names it (a traceback's last line; a malformed call's reason)."""
    text = tool_output.strip().removeprefix("Error:").strip()
    if protocol.CALL_OPEN in text:  # the malformed-call message ends with an example call: not quoted
        text = text[: text.index(protocol.CALL_OPEN)].removesuffix("Call the tool as").strip()
    return text.splitlines()[-1] if text else "an error"


class DemonstrationError(RuntimeError):
    """A demonstration did not go as scripted (a generator or sandbox defect, never skipped silently)."""


async def build_demonstrations(
    problems: Sequence[Problem], *, fail_share: float, seed: int, sandbox: str = "local"
) -> list[Demonstration]:
    """Run every problem's scripted demonstration through the rollout core and the real sandbox."""
    from sandboxes.backends import get_backend

    rng = random.Random(seed)
    # as the tasks configure it (harness.core.problems): a code task's final ```python block is the answer, not a call
    configs = {
        code: rollout_config("code" if code else "math", max_turns=4, tool_env=PROJECT) for code in (False, True)
    }
    backend = get_backend(sandbox)
    demos: list[Demonstration] = []
    try:
        box = await backend.acquire()
        try:
            for problem in problems:
                turns_rng = random.Random(rng.random())
                fails = turns_rng.random() < fail_share
                opener = turns_rng.choice(_CODE_OPENERS if problem.kind == "code" else _OPENERS)
                code = reference_program(problem)
                bug = plant_bug(problem, code, opener, turns_rng) if fails else None
                script = ScriptedTurns(problem, code, opener, bug, turns_rng)
                prompt = problem.messages()
                traj = await rollout(prompt, script, box, configs[problem.kind == "code"], random.Random(0))
                if traj.stop_reason != "answer":
                    raise DemonstrationError(f"{problem.id}: demonstration ended with {traj.stop_reason}")
                if bug is not None and traj.tool_failures != 1:
                    raise DemonstrationError(f"{problem.id}: planted bug {bug.name} did not fail exactly once")
                failed = _failed_turns(traj.messages)
                n_turns = sum(1 for m in traj.messages if m.role == "assistant")
                trained = [i for i in range(n_turns) if i not in failed]
                demos.append(
                    Demonstration(problem, traj.messages, trained, bug.name if bug else None, list(traj.error_kinds))
                )
                await box.reset()
        finally:
            await backend.release(box)
    finally:
        await backend.shutdown()
    return demos


def _failed_turns(messages: Sequence[Message]) -> set[int]:
    """Indices (among assistant turns) of turns whose call failed (the next tool message is not ok)."""
    failed, turn = set(), -1
    for i, m in enumerate(messages):
        if m.role == "assistant":
            turn += 1
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            if nxt is not None and nxt.role == "tool" and not nxt.meta.get("ok", True):
                failed.add(turn)
    return failed
