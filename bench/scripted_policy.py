"""The stand-in engine's scripted policy (not a model): what it answers to a conversation, deterministically.

Seeded by the request's ``seed`` and the conversation's length, it writes a program (some of them failing:
``NameError``, ``SyntaxError``, ``ZeroDivisionError``), answers a failed run with a correction (the same program
fixed, or rewritten, so SAAR sees similar and dissimilar corrections), and after :attr:`Policy.calls` successful
runs gives a final answer ``\\boxed{N}`` with the number the last run printed. :mod:`bench.standin` serves it;
:mod:`bench.executor_speed` puts it behind the OpenRLHF executor's engine.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any

#: Tool names the policy calls (the project's tool and Open-CLEANER's).
TOOL_NAMES = ("python", "code_interpreter")

_FILLER = (
    "Let me set up the computation carefully before running it.",
    "The quantity asked for can be computed directly, so a short program will check it.",
    "I will enumerate the cases and sum them, reducing modulo 1000 at the end.",
    "A closed form exists, but a brute-force count is safer at this size.",
    "The constraint reduces to a sum of squares over a range, which Python evaluates exactly.",
    "Before trusting the pattern I will verify it numerically.",
    "Splitting the problem into residues keeps every case small.",
    "The symmetry halves the work, but I will compute the full range to be sure.",
)


@dataclass(frozen=True)
class Policy:
    """The scripted policy: how many runs a trajectory makes, how often a program fails, how much it writes."""

    calls: int = 3  #: successful program runs before the final answer
    fail_rate: float = 0.3  #: chance that a new program fails
    refail_rate: float = 0.1  #: chance that a correction fails again
    rewrite_rate: float = 0.34  #: chance that a correction is a rewrite (dissimilar: SAAR's deep case)
    reasoning_chars: int = 400  #: characters of reasoning before each call and in the answer
    max_turns: int = 12  #: assistant turns after which it answers whatever happened

    def __post_init__(self) -> None:
        for name in ("fail_rate", "refail_rate", "rewrite_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.calls < 0 or self.reasoning_chars < 0 or self.max_turns < 1:
            raise ValueError("calls and reasoning_chars must be >= 0, max_turns >= 1")


@dataclass(frozen=True)
class Turn:
    """One answer of the policy: its text, and the call it makes (tool name, program) or None."""

    text: str
    call: tuple[str, str] | None = None


def text_of(content: Any) -> str:
    """A message's content as text (a string, or OpenAI content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _failed(text: str) -> bool:
    """Whether a tool result reports a failed run (the project's ``Error:``, the reference's ``failure``)."""
    return "Error" in text or "Traceback" in text or "failure" in text


def _declared_tool(tools: Any) -> str | None:
    """The first tool the request declares that the policy calls, or None."""
    for tool in tools or []:
        name = tool.get("function", {}).get("name") if isinstance(tool, dict) else None
        if name in TOOL_NAMES:
            return name
    return None


def _last_code(messages: list[dict[str, Any]]) -> str | None:
    """The program of the last assistant call in ``messages``."""
    for m in reversed(messages):
        if m.get("role") == "assistant":
            for call in m.get("tool_calls") or []:
                try:
                    code = json.loads(call["function"]["arguments"]).get("code")
                except (KeyError, TypeError, ValueError, AttributeError):
                    return None
                return code if isinstance(code, str) else None
            return None
    return None


def program(n: int, form: str = "sum") -> str:
    """A program that prints the sum of the squares 1..n modulo 1000: ``sum`` (a sum over the range) or ``closed``
    (the closed form, a rewrite unlike the others), or broken: ``name`` (a NameError), ``syntax`` (a SyntaxError),
    ``zero`` (a ZeroDivisionError), each one edit away from ``sum``."""
    if form == "closed":
        return f"print({n} * ({n} + 1) * (2 * {n} + 1) // 6 % 1000)\n"
    line = "total = sum(i * i for i in range(1, n + 1)) % 1000"
    if form == "syntax":
        line = "total = sum(i * i for i in range(1, n + 1) % 1000"
    elif form == "zero":
        line = "total = sum(i * i for i in range(1, n + 1)) % (n - n)"
    out = "print(totl)" if form == "name" else "print(total)"
    return f"n = {n}\n{line}\n{out}\n"


def _reasoning(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    size = 0
    while size < chars:
        sentence = rng.choice(_FILLER)
        parts.append(sentence)
        size += len(sentence) + 1
    return " ".join(parts)


def decide(policy: Policy, messages: list[dict[str, Any]], tools: Any, seed: int | None) -> Turn:
    """The policy's answer to a conversation, deterministic from ``seed`` and the conversation's length.

    A conversation whose last message reports a failed run gets a correction of the last program; one with
    :attr:`Policy.calls` successful runs (or :attr:`Policy.max_turns` assistant turns, or no declared
    ``python``/``code_interpreter`` tool) gets the final answer; any other gets a new program.
    """
    rng = random.Random((seed or 0) * 1_000_003 + len(messages))
    reasoning = _reasoning(rng, policy.reasoning_chars)
    tool = _declared_tool(tools)
    turns = sum(1 for m in messages if m.get("role") == "assistant")
    results = [text_of(m.get("content")) for m in messages if m.get("role") == "tool"]
    runs = [r for r in results if not _failed(r)]
    if tool is None or len(runs) >= policy.calls or turns >= policy.max_turns:
        found = re.findall(r"-?\d+", runs[-1]) if runs else []
        answer = found[-1] if found else str(rng.randrange(1000))
        return Turn(f"{reasoning}\nThe computation gives {answer}, so the answer is \\boxed{{{answer}}}.")
    last = messages[-1] if messages else {}
    if last.get("role") == "tool" and _failed(text_of(last.get("content"))):
        previous = _last_code(messages) or ""
        found_n = re.match(r"n = (\d+)", previous)
        n = int(found_n.group(1)) if found_n else rng.randrange(10, 100)
        if rng.random() < policy.refail_rate:
            form = rng.choice(("name", "syntax", "zero"))
        else:
            form = "closed" if rng.random() < policy.rewrite_rate else "sum"
        return Turn(f"The run failed; fixing the program. {reasoning}", (tool, program(n, form)))
    n = rng.randrange(10, 100)
    form = rng.choice(("name", "syntax", "zero")) if rng.random() < policy.fail_rate else "sum"
    return Turn(reasoning, (tool, program(n, form)))
