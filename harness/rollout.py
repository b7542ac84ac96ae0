"""The multi-turn tool-use loop shared by evaluation (Inspect) and training (OpenRLHF, TRL).

The loop knows nothing of Inspect or OpenRLHF: it is given a ``generate`` function
(messages -> :class:`Generation`) and a :class:`~sandboxes.base.Sandbox`, and returns
a :class:`Trajectory` (the final messages, SAAR events and counters).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from harness import protocol
from harness.messages import Generation, Message
from harness.saar import SaarConfig, SaarEvent, rollback
from sandboxes.base import ExecResult, Sandbox

Generate = Callable[[list[Message]], Awaitable[Generation]]
StopReason = Literal["answer", "max_turns", "length", "token_budget", "running"]


@dataclass(frozen=True)
class RolloutConfig:
    max_turns: int = 16  #: assistant turns kept in the trajectory (CLEANER: 16)
    max_total_tokens: int | None = None  #: budget of generated tokens kept in the trajectory
    timeout: float = 10.0  #: seconds per tool call
    output_chars: int = 256  #: characters of tool output shown to the model (middle cut)
    accept_python_fence: bool = True  #: treat a bare ```python block as a call (off for code tasks)
    saar: SaarConfig = field(default_factory=SaarConfig)


@dataclass
class Trajectory:
    messages: list[Message]
    saar_on: bool
    events: list[SaarEvent]
    stop_reason: StopReason
    assistant_turns: int
    tool_calls: int  #: calls executed (every attempt, purified ones included)
    tool_failures: int  #: executed calls that failed (every attempt)
    failures_kept: int  #: failed tool results that remain in the final trajectory
    error_kinds: dict[str, int]  #: error kind -> count over every failed attempt
    tokens_generated: int  #: every generated token, discarded regenerations included
    tokens_kept: int  #: generated tokens of the turns that remain

    @property
    def final_text(self) -> str:
        """The content of the last assistant message (where the answer is looked for)."""
        for m in reversed(self.messages):
            if m.role == "assistant":
                return m.text
        return ""

    def summary(self) -> dict[str, Any]:
        actions = Counter(e.action for e in self.events)
        return {
            "saar_on": self.saar_on,
            "stop_reason": self.stop_reason,
            "assistant_turns": self.assistant_turns,
            "tool_calls": self.tool_calls,
            "tool_failures": self.tool_failures,
            "failures_kept": self.failures_kept,
            "error_kinds": dict(self.error_kinds),
            "saar_shallow": actions["shallow"],
            "saar_deep": actions["deep"],
            "saar_purified": sum(1 for e in self.events if e.ok),
            "saar_exhausted": actions["exhausted"],
            "tokens_generated": self.tokens_generated,
            "tokens_kept": self.tokens_kept,
            "saar_events": [e.to_dict() for e in self.events],
        }


class RolloutState:
    """Mutable state of one rollout; SAAR (:func:`harness.saar.rollback`) acts on it."""

    def __init__(
        self, messages: list[Message], generate: Generate, sandbox: Sandbox, config: RolloutConfig, saar_on: bool
    ):
        self.messages = list(messages)
        self.config = config
        self.rollback_on = saar_on
        self.events: list[SaarEvent] = []
        self.attempts = 0
        self.failures = 0
        self.error_kinds: Counter[str] = Counter()
        self.tokens_generated = 0
        self.stop_reason: StopReason = "running"
        self._generate = generate
        self._sandbox = sandbox

    @property
    def assistant_turns(self) -> int:
        return sum(1 for m in self.messages if m.role == "assistant")

    def stop(self, reason: StopReason) -> None:
        self.stop_reason = reason

    def record(self, event: SaarEvent) -> None:
        self.events.append(event)

    async def generate_turn(self, context: list[Message]) -> tuple[Generation, Message]:
        gen = await self._generate(context)
        self.tokens_generated += gen.output_tokens
        return gen, to_assistant(gen, self.config.accept_python_fence)

    async def execute(self, turn: Message) -> tuple[Message, bool, str | None]:
        """Run the call of ``turn``; return the tool message, success flag and error kind."""
        self.attempts += 1
        if turn.call is None:
            kind = "MalformedToolCall"
            content = protocol.format_call_error(turn.call_error or "no call found")
            ok, call_id = False, None
        else:
            result: ExecResult = await self._sandbox.run_python(turn.call.code, timeout=self.config.timeout)
            if result.sandbox_failed:  # never let a broken sandbox pass as the program's doing
                raise SandboxFailure(
                    f"sandbox failed while running a tool call: {result.stderr.strip() or result.error_kind}"
                )
            ok, kind, call_id = result.ok, result.error_kind, turn.call.id
            content = protocol.format_result(
                ok=result.ok,
                stdout=result.stdout,
                stderr=result.stderr,
                error_kind=result.error_kind,
                limit=self.config.output_chars,
            )
        if not ok:
            self.failures += 1
            self.error_kinds[kind or "Error"] += 1
        return Message("tool", content, tool_call_id=call_id, meta={"ok": ok, "error_kind": kind}), ok, kind


class SandboxFailure(RuntimeError):
    """The sandbox broke (dead container, lost worker); the sample must error, not score."""


def to_assistant(gen: Generation, accept_python_fence: bool = True) -> Message:
    """The assistant message for a generation, with its call parsed natively or from text."""
    if gen.tool_calls:
        call = gen.tool_calls[0]
        return Message("assistant", gen.text, call=call, meta={"form": "native", "tokens": gen.output_tokens})
    parsed = protocol.parse_turn(gen.text, accept_python_fence=accept_python_fence)
    if parsed.call is None and parsed.error is None:
        return Message("assistant", gen.text, meta={"tokens": gen.output_tokens})
    # a malformed call keeps the text as written: there is no call to re-serialize it from
    content = parsed.reasoning if parsed.call is not None else gen.text
    meta = {"form": parsed.form, "tokens": gen.output_tokens}
    return Message("assistant", content, call=parsed.call, call_error=parsed.error, meta=meta)


async def rollout(
    prompt: list[Message],
    generate: Generate,
    sandbox: Sandbox,
    config: RolloutConfig,
    rng: random.Random | None = None,
) -> Trajectory:
    """Run one tool-use trajectory from ``prompt`` to an answer or a limit.

    SAAR is drawn once per trajectory from ``config.saar`` with ``rng``.
    """
    saar_on = config.saar.draw(rng or random.Random(0))
    state = RolloutState(prompt, generate, sandbox, config, saar_on)
    while state.stop_reason == "running":
        if state.assistant_turns >= config.max_turns:
            state.stop("max_turns")
            break
        gen, turn = await state.generate_turn(state.messages)
        state.messages.append(turn)
        if gen.truncated:
            state.stop("length")
            break
        if turn.call is None and turn.call_error is None:
            state.stop("answer")
            break
        result, ok, kind = await state.execute(turn)
        if state.attempts >= config.saar.max_attempts:
            state.rollback_on = False
        if not ok and state.rollback_on:
            result = await rollback(state, len(state.messages) - 1, result, kind)
            if result is None:
                break
        state.messages.append(result)
        if config.max_total_tokens is not None and kept_tokens(state.messages) >= config.max_total_tokens:
            state.stop("token_budget")
    return Trajectory(
        messages=state.messages,
        saar_on=saar_on,
        events=state.events,
        stop_reason=state.stop_reason,
        assistant_turns=state.assistant_turns,
        tool_calls=state.attempts,
        tool_failures=state.failures,
        failures_kept=sum(1 for m in state.messages if m.role == "tool" and not m.meta.get("ok", True)),
        error_kinds=dict(state.error_kinds),
        tokens_generated=state.tokens_generated,
        tokens_kept=kept_tokens(state.messages),
    )


def kept_tokens(messages: list[Message]) -> int:
    return sum(int(m.meta.get("tokens", 0)) for m in messages if m.role == "assistant")
