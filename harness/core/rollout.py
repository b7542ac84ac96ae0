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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from harness.core import seeds
from harness.core.messages import Generation, Message
from harness.core.metrics import TrajectoryMetrics
from harness.core.saar import SaarConfig, SaarEvent, Spans, no_spans, rollback
from harness.core.toolenv import ToolEnv
from sandboxes.base import ExecResult, Sandbox, SandboxError

StopReason = Literal["answer", "max_turns", "length", "token_budget", "running"]


class Generate(Protocol):
    """The model, as the loop calls it: the context so far and the seed of this one generation.

    ``seed`` is None when the trajectory has no seed (the provider's own randomness);
    otherwise it is :func:`harness.core.seeds.generation_seed` of the turn and SAAR retry.
    Under a ``response`` budget (:class:`~harness.core.toolenv.ToolEnv`) the loop also passes
    ``max_tokens``, the tokens left in the budget, which the generation must not exceed; otherwise
    it is not passed.
    """

    async def __call__(self, context: list[Message], *, seed: int | None = None) -> Generation: ...


#: Tokens a tool result adds to the response, as the model's chat template renders it
#: (:func:`harness.core.chat.tool_result_counter`); what a ``response`` budget counts besides generated tokens.
CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class RolloutConfig:
    max_turns: int = 16  #: assistant turns kept in the trajectory (CLEANER: 16)
    #: the trajectory's token budget: generated tokens kept, or every response token (``tool_env.budget``)
    max_total_tokens: int | None = None
    timeout: float | None = None  #: seconds per tool call (None: the tool environment's)
    #: characters of tool output shown to the model, cut in the middle (None: the tool environment's)
    output_chars: int | None = None
    accept_python_fence: bool = True  #: a bare ```python block is a call; set by harness.core.problems (off for code)
    saar: SaarConfig = field(default_factory=SaarConfig)
    #: the tool's schema, call parsing, execution and result framing; always stated (no default profile)
    tool_env: ToolEnv = field(kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.tool_env, ToolEnv):
            raise TypeError(f"RolloutConfig.tool_env must be a ToolEnv (harness.core.toolenv), got {self.tool_env!r}")
        if self.timeout is None:
            object.__setattr__(self, "timeout", self.tool_env.timeout)
        if self.output_chars is None:
            object.__setattr__(self, "output_chars", self.tool_env.output_chars)

    @property
    def response_budget(self) -> bool:
        """Whether ``max_total_tokens`` counts every response token and caps each generation."""
        return self.tool_env.counts_response and self.max_total_tokens is not None

    @property
    def compares_turn_ends(self) -> bool:
        """Whether SAAR may compare call spans that run to the end of their turn, the model's end-of-turn token
        included (``reference``), so that the token must be known (:func:`harness.core.chat.tool_env_for`)."""
        saar = self.saar
        return saar.enabled and saar.prob > 0 and saar.similarity == "call" and self.tool_env.spans_turn


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
    response_tokens: int = 0  #: tokens of the response as a ``response`` budget counts them (0 otherwise)

    @property
    def final_text(self) -> str:
        """The answer: the last assistant turn, when it attempted no call.

        A trajectory stopped by a limit in a turn that still holds a call has no answer: that turn
        asked for a program to run, and what it wrote around the call is not its final word.
        """
        for m in reversed(self.messages):
            if m.role == "assistant":
                return "" if m.call is not None or m.call_error is not None else m.text
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
            "response_tokens": self.response_tokens,
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
        count_tokens: CountTokens | None = None,
    ):
        if config.response_budget and count_tokens is None:
            raise ValueError(
                f"the {config.tool_env.name!r} tool environment counts tool output in the response budget: "
                "the rollout needs count_tokens (the model's tokenizer)"
            )
        if config.compares_turn_ends and config.tool_env.turn_end is None:
            raise ValueError(
                f"the {config.tool_env.name!r} tool environment's SAAR compares a call's span to the model's "
                "end-of-turn token, which is not known: the rollout needs the profile for the model "
                "(harness.core.chat.tool_env_for(tokenizer, env), or env.with_turn_end(token))"
            )
        self.messages = list(messages)
        self.count_tokens = count_tokens
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
    def tool_env(self) -> ToolEnv:
        return self.config.tool_env

    @property
    def max_turns(self) -> int:
        return self.config.max_turns

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
        left = self.budget_left(context)
        if left is None:
            gen = await self._generate(context, seed=seed)
        elif left <= 0:  # nothing left to generate: a cut turn, as a generation of 0 tokens would be
            gen = Generation(text="", truncated=True, output_tokens=0)
        else:
            gen = await self._generate(context, seed=seed, max_tokens=left)
        self.tokens_generated += gen.output_tokens
        self.generations += 1
        env = self.config.tool_env
        call_id = f"call_{self.generations}"
        return gen, to_assistant(gen, env=env, accept_python_fence=self.config.accept_python_fence, call_id=call_id)

    def budget_left(self, context: list[Message]) -> int | None:
        """Response tokens the next generation may take after ``context`` (None: no response budget)."""
        if not self.config.response_budget:
            return None
        assert self.config.max_total_tokens is not None
        return self.config.max_total_tokens - response_tokens(context)

    def tool_message(self, content: str, call_id: str | None, ok: bool, kind: str | None) -> Message:
        """The tool result the model sees, with its response tokens when a response budget counts them."""
        meta: dict[str, Any] = {"ok": ok, "error_kind": kind}
        if self.config.response_budget:
            assert self.count_tokens is not None
            meta["tokens"] = self.count_tokens(content)
        return Message("tool", content, tool_call_id=call_id, meta=meta)

    def cap_reached(self) -> bool:
        """Whether the trajectory has used its ``max_attempts`` tool attempts (then rollback is off for good)."""
        return self.attempts >= self.config.saar.max_attempts

    async def execute(self, turn: Message) -> tuple[Message, bool, str | None]:
        """Run the call of ``turn``; return the tool message, success flag and error kind."""
        self.attempts += 1
        env = self.config.tool_env
        if turn.call is None:
            kind = "MalformedToolCall"
            content = env.show_call_error(turn.call_error or "no call found")
            ok, call_id = False, None
        else:
            program, limit = env.program(turn.call.code, self.config.timeout)
            result: ExecResult = await self._sandbox.run_python(program, timeout=limit)
            if result.sandbox_failed:  # never let a broken sandbox pass as the program's doing
                raise SandboxError(
                    f"sandbox failed while running a tool call: {result.stderr.strip() or result.error_kind}"
                )
            ok, kind, call_id = result.ok, env.error_kind(result), turn.call.id
            content = env.show_result(result, kind, limit=self.config.output_chars, timeout=self.config.timeout)
        if not ok:
            self.failures += 1
            self.error_kinds[kind or "Error"] += 1
        return self.tool_message(content, call_id, ok, kind), ok, kind


def reasoning_share(gen: Generation, reasoning: str) -> int:
    """Tokens of ``gen`` before its call: as the generator counted them, else split by characters."""
    if gen.reasoning_tokens is not None:
        return gen.reasoning_tokens
    text = gen.text
    return round(gen.output_tokens * len(reasoning) / len(text)) if text else 0


def to_assistant(
    gen: Generation, *, env: ToolEnv, accept_python_fence: bool = True, call_id: str = "call_1"
) -> Message:
    """The assistant message for a generation, with its call parsed natively or from text.

    A call parsed from text gets ``call_id`` (the rollout numbers them, so every call of a
    trajectory has its own id); a native call keeps the provider's id.
    """
    if gen.tool_calls:
        call = gen.tool_calls[0]
        meta = {"form": "native", "tokens": gen.output_tokens, "reasoning_tokens": reasoning_share(gen, gen.text)}
        return Message("assistant", gen.text, call=call, meta=meta)
    parsed = env.read_turn(gen.text, accept_python_fence=accept_python_fence, call_id=call_id)
    if parsed.call is None and parsed.error is None:
        meta: dict[str, Any] = {"tokens": gen.output_tokens}
        if "unread_call" in parsed.meta:  # a call the profile cannot read is no call: the turn is the answer
            meta["unread_call"] = parsed.meta["unread_call"]
        return Message("assistant", gen.text, meta=meta)
    # a malformed call keeps the text as written: there is no call to re-serialize it from
    content = parsed.reasoning if parsed.call is not None else gen.text
    meta = {"form": parsed.form, "tokens": gen.output_tokens, "reasoning_tokens": reasoning_share(gen, content)}
    if "call_raw" in parsed.meta:  # a failed call SAAR compares as written: its reasoning is what precedes it
        meta |= {"call_raw": parsed.meta["call_raw"], "call_start": len(parsed.reasoning)}
        meta["reasoning_tokens"] = reasoning_share(gen, parsed.reasoning)
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
    count_tokens: CountTokens | None = None,
) -> Trajectory:
    """Run one tool-use trajectory from ``prompt`` to an answer or a limit.

    ``seed`` is the trajectory's seed (:func:`harness.core.seeds.trajectory_seed`): each generation
    is called with a seed derived from it, the turn and the SAAR retry. SAAR is drawn once per
    trajectory from ``config.saar`` with ``rng`` (default: seeded from ``seed``, or 0). ``spans``
    opens the transcript spans SAAR marks its rollbacks with (Inspect's ``span`` at evaluation).

    The budget (``config.max_total_tokens``) is counted as ``config.tool_env.budget`` says. ``generated``:
    after a tool result, the trajectory stops once its kept generated tokens reach it. ``response``
    (the reference's): every token of the response counts, generated and tool output alike
    (``count_tokens`` gives a tool result's); each generation may take only what is left; a turn that
    reaches the budget ends the trajectory (its call does not run), and so does a tool result that
    would reach it (it is not kept), as Open-CLEANER's agent loop ends a response.
    """
    if rng is None:
        rng = random.Random(0 if seed is None else seeds.saar_draw_seed(seed))
    saar_on = config.saar.draw(rng)
    state = RolloutState(prompt, generate, sandbox, config, saar_on, seed, spans, count_tokens)
    budget = config.max_total_tokens
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
        if not config.tool_env.call_on_last_turn and state.assistant_turns >= config.max_turns:
            state.stop("max_turns")  # the reference's loop ends at its last turn before running that turn's call
            break
        if config.response_budget and response_tokens(state.messages) >= budget:  # type: ignore[operator]
            state.stop("token_budget")
            break
        result, ok, kind = await state.execute(turn)
        if not ok and state.rollback_on:  # SAAR decides, the attempt cap included
            result = await rollback(state, len(state.messages) - 1, result, kind)
            if result is None:
                break
        if config.response_budget and response_tokens([*state.messages, result]) >= budget:  # type: ignore[operator]
            state.stop("token_budget")
            break
        state.messages.append(result)
        if not config.response_budget and budget is not None and kept_tokens(state.messages) >= budget:
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
        response_tokens=response_tokens(state.messages) if config.response_budget else 0,
    )


def kept_tokens(messages: list[Message]) -> int:
    """Generated tokens of the assistant turns in ``messages``."""
    return sum(m.tokens for m in messages)


def response_tokens(messages: list[Message]) -> int:
    """Tokens of the response in ``messages`` as a ``response`` budget counts them: every assistant turn's
    generated tokens and every tool result's tokens (set when the rollout made it under that budget)."""
    return sum(m.tokens if m.role == "assistant" else int(m.meta.get("tokens", 0)) for m in messages)
