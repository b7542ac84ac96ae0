"""The multi-turn tool-use loop shared by evaluation (Inspect) and training (OpenRLHF, TRL).

The loop knows nothing of Inspect or OpenRLHF: it is given a ``generate`` function
(messages and a sampling seed -> :class:`Generation`) and a :class:`~sandboxes.base.Sandbox`,
and returns a :class:`Trajectory` (the final messages, SAAR events and counters).

Build the :class:`RolloutConfig` with :func:`harness.core.problems.rollout_config`: the problem
kind decides how turns are parsed. Seeds come from :mod:`harness.core.seeds`.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from harness.core import protocol, seeds
from harness.core.messages import Generation, Message
from harness.core.metrics import TrajectoryMetrics
from harness.core.saar import SaarConfig, SaarEvent, Spans, no_spans, rollback
from sandboxes.base import ExecResult, Sandbox, SandboxError

StopReason = Literal["answer", "max_turns", "length", "token_budget", "running"]


class Generate(Protocol):
    """The model, as the loop calls it: the context so far and the seed of this one generation.

    ``seed`` is None when the trajectory has no seed (the provider's own randomness);
    otherwise it is :func:`harness.core.seeds.generation_seed` of the turn and SAAR retry.
    """

    async def __call__(self, context: list[Message], *, seed: int | None = None) -> Generation: ...


@dataclass(frozen=True)
class RolloutConfig:
    max_turns: int = 16  #: assistant turns kept in the trajectory (CLEANER: 16)
    max_total_tokens: int | None = None  #: budget of generated tokens kept in the trajectory
    timeout: float = 10.0  #: seconds per tool call
    output_chars: int = 256  #: characters of tool output shown to the model (middle cut)
    accept_python_fence: bool = True  #: a bare ```python block is a call; set by harness.core.problems (off for code)
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
    seed: int | None = None  #: the trajectory seed its generation seeds derive from (None: unseeded)

    @property
    def final_text(self) -> str:
        """The content of the last assistant message (where the answer is looked for)."""
        for m in reversed(self.messages):
            if m.role == "assistant":
                return m.text
        return ""

    def metrics(self) -> TrajectoryMetrics:
        """This trajectory's numbers (:mod:`harness.core.metrics` defines each)."""
        return TrajectoryMetrics.of(self)

    def summary(self) -> dict[str, Any]:
        """What logs keep of the trajectory: its metrics, stop reason, error kinds and SAAR events."""
        return {
            **self.metrics().scalars(),
            "saar_on": self.saar_on,
            "assistant_turns": self.assistant_turns,
            "stop_reason": self.stop_reason,
            "seed": self.seed,
            "error_kinds": dict(self.error_kinds),
            "saar_events": [e.to_dict() for e in self.events],
        }


class RolloutState:
    """Mutable state of one rollout; SAAR (:func:`harness.core.saar.rollback`) acts on it as a ``RollbackState``."""

    def __init__(
        self,
        messages: list[Message],
        generate: Generate,
        sandbox: Sandbox,
        config: RolloutConfig,
        saar_on: bool,
        seed: int | None = None,
        spans: Spans = no_spans,
    ):
        self.messages = list(messages)
        self.seed = seed
        self.spans = spans
        self.generations = 0  #: generations so far (numbers the parsed calls' ids)
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
    def saar(self) -> SaarConfig:
        return self.config.saar

    @property
    def assistant_turns(self) -> int:
        return sum(1 for m in self.messages if m.role == "assistant")

    def stop(self, reason: StopReason) -> None:
        self.stop_reason = reason

    def record(self, event: SaarEvent) -> None:
        self.events.append(event)

    async def generate_turn(self, context: list[Message], *, turn: int, retry: int = 0) -> tuple[Generation, Message]:
        """Generate assistant turn ``turn`` (0-based) from ``context``; ``retry`` > 0 for a SAAR regeneration."""
        seed = None if self.seed is None else seeds.generation_seed(self.seed, turn=turn, retry=retry)
        gen = await self._generate(context, seed=seed)
        self.tokens_generated += gen.output_tokens
        self.generations += 1
        return gen, to_assistant(gen, self.config.accept_python_fence, call_id=f"call_{self.generations}")

    def cap_reached(self) -> bool:
        """Whether the trajectory has used its ``max_attempts`` tool attempts (then rollback is off for good)."""
        return self.attempts >= self.config.saar.max_attempts

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
                raise SandboxError(
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


def reasoning_share(gen: Generation, reasoning: str) -> int:
    """Tokens of ``gen`` before its call: as the generator counted them, else split by characters."""
    if gen.reasoning_tokens is not None:
        return gen.reasoning_tokens
    text = gen.text
    return round(gen.output_tokens * len(reasoning) / len(text)) if text else 0


def to_assistant(gen: Generation, accept_python_fence: bool = True, call_id: str = "call_1") -> Message:
    """The assistant message for a generation, with its call parsed natively or from text.

    A call parsed from text gets ``call_id`` (the rollout numbers them, so every call of a
    trajectory has its own id); a native call keeps the provider's id.
    """
    if gen.tool_calls:
        call = gen.tool_calls[0]
        meta = {"form": "native", "tokens": gen.output_tokens, "reasoning_tokens": reasoning_share(gen, gen.text)}
        return Message("assistant", gen.text, call=call, meta=meta)
    parsed = protocol.parse_turn(gen.text, accept_python_fence=accept_python_fence, call_id=call_id)
    if parsed.call is None and parsed.error is None:
        return Message("assistant", gen.text, meta={"tokens": gen.output_tokens})
    # a malformed call keeps the text as written: there is no call to re-serialize it from
    content = parsed.reasoning if parsed.call is not None else gen.text
    meta = {"form": parsed.form, "tokens": gen.output_tokens, "reasoning_tokens": reasoning_share(gen, content)}
    return Message("assistant", content, call=parsed.call, call_error=parsed.error, meta=meta)


async def rollout(
    prompt: list[Message],
    generate: Generate,
    sandbox: Sandbox,
    config: RolloutConfig,
    rng: random.Random | None = None,
    *,
    seed: int | None = None,
    spans: Spans = no_spans,
) -> Trajectory:
    """Run one tool-use trajectory from ``prompt`` to an answer or a limit.

    ``seed`` is the trajectory's seed (:func:`harness.core.seeds.trajectory_seed`): each generation
    is called with a seed derived from it, the turn and the SAAR retry. SAAR is drawn once per
    trajectory from ``config.saar`` with ``rng`` (default: seeded from ``seed``, or 0). ``spans``
    opens the transcript spans SAAR marks its rollbacks with (Inspect's ``span`` at evaluation).
    """
    if rng is None:
        rng = random.Random(0 if seed is None else seeds.saar_draw_seed(seed))
    saar_on = config.saar.draw(rng)
    state = RolloutState(prompt, generate, sandbox, config, saar_on, seed, spans)
    while state.stop_reason == "running":
        if state.assistant_turns >= config.max_turns:
            state.stop("max_turns")
            break
        gen, turn = await state.generate_turn(state.messages, turn=state.assistant_turns)
        state.messages.append(turn)
        if gen.truncated:
            state.stop("length")
            break
        if turn.call is None and turn.call_error is None:
            state.stop("answer")
            break
        result, ok, kind = await state.execute(turn)
        if not ok and state.rollback_on:  # SAAR decides, the attempt cap included
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
        seed=seed,
    )


def kept_tokens(messages: list[Message]) -> int:
    """Generated tokens of the assistant turns in ``messages``."""
    return sum(m.tokens for m in messages)
