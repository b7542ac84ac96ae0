"""SAAR: Similarity-Aware Adaptive Rollback (CLEANER, arXiv 2601.15141).

This file holds every SAAR rule; :mod:`harness.core.rollout` calls :func:`rollback`
when a call fails. The behaviour follows the reference implementation
(Open-CLEANER's tool agent loop):

* On a failed call, the error is shown to the model as a tool message and ONE
  assistant turn is regenerated. The error message is then removed again and the
  regenerated turn is installed in place of the failed one, and its call runs.
  A further failure repeats this relative to the turn now installed (the earlier
  error is no longer in context), up to ``max_retries`` regenerations.
* Granularity: ``difflib.SequenceMatcher(None, old, new).ratio()`` between the
  failed call and the new one. ``ratio >= gamma``: *shallow*, the installed turn
  keeps its reasoning and takes the new call. Otherwise, or when a turn has no
  call to compare (:func:`call_text`): *deep*, the regenerated turn replaces the whole turn.
* Exhausted retries: the last error stays as an ordinary tool result (with a note
  from 2 retries on) and rollback is off for the rest of the trajectory. A
  regenerated turn without a call: the error and that turn stay, rollback off.
  A regenerated turn that hit the length limit: the state before the error is
  restored and the rollout ends; so does a regeneration that reaches ``max_turns``, under a
  profile that counts it as a turn (``regeneration_is_turn``: the reference's).
  ``max_attempts`` tool calls per trajectory turn rollback off, with a ``cap`` event (checked
  here only, before every regeneration).
"""

from __future__ import annotations

import difflib
import random
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

from harness.core.messages import Generation, Message
from harness.core.settings import setting
from harness.core.toolenv import Similarity, ToolEnv

Action = Literal["shallow", "deep", "no_call", "length", "max_turns", "exhausted", "cap"]


@dataclass(frozen=True)
class SaarConfig:
    """SAAR's switch and parameters (defaults: the paper and the reference scripts): a recipe's ``saar`` mapping, and
    an evaluation protocol's SAAR (its task arguments ``saar``, ``saar_prob``, ``gamma``, ``similarity``,
    ``max_retries``: :data:`harness.benchmarks.presets.SAAR_ARGUMENTS`)."""

    enabled: bool = setting(False, "SAAR (rollback) on")
    prob: float = setting(1.0, "probability that SAAR is on for a trajectory (the paper's 70/30 curriculum: 0.7)")
    gamma: float = setting(0.5, "similarity threshold: ≥ γ shallow, < γ deep")
    max_retries: int = setting(3, "regenerations per failed turn (so at most 4 attempts)")
    similarity: Similarity = setting(
        "code",
        "`code`: ratio between the two programs (the paper; `project`); `call`: between the calls as written, from "
        "`<tool_call>` to the turn's end (the reference implementation, whose JSON boilerplate pushes ratios up; "
        "`reference`)",
        shown="the tool env's",
    )
    max_attempts: int = setting(30, "tool attempts per trajectory after which rollback turns off")

    def __post_init__(self) -> None:
        if not 0.0 <= self.prob <= 1.0:
            raise ValueError(f"saar prob must be in [0, 1], got {self.prob}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"saar gamma must be in [0, 1], got {self.gamma}")
        if self.max_retries < 0 or self.max_attempts < 1:
            raise ValueError("saar max_retries must be >= 0 and max_attempts >= 1")
        if self.similarity not in ("code", "call"):
            raise ValueError(f"saar similarity must be 'code' or 'call', got {self.similarity!r}")

    def draw(self, rng: random.Random) -> bool:
        """Whether SAAR is on for one trajectory."""
        return self.enabled and (self.prob >= 1.0 or rng.random() < self.prob)


class Spans(Protocol):
    """Opens a named span of a transcript (the Inspect face passes Inspect's own ``span``); SAAR marks each
    rollback and each of its regenerations with one, so a reader can follow them."""

    def __call__(self, name: str, type: str) -> AbstractAsyncContextManager[Any]: ...


def no_spans(name: str, type: str) -> AbstractAsyncContextManager[Any]:
    """No transcript: the trainers' default."""
    return nullcontext()


class RollbackState(Protocol):
    """What SAAR reads and changes of a running rollout (:class:`harness.core.rollout.RolloutState` is one).

    A protocol rather than the rollout's class, so that SAAR sits below the loop that calls it.
    """

    messages: list[Message]
    rollback_on: bool
    spans: Spans

    @property
    def saar(self) -> SaarConfig: ...

    @property
    def assistant_turns(self) -> int: ...

    def stop(self, reason: Literal["answer", "length", "max_turns"]) -> None: ...

    def record(self, event: SaarEvent) -> None: ...

    def cap_reached(self) -> bool: ...

    @property
    def tool_env(self) -> ToolEnv: ...

    @property
    def max_turns(self) -> int: ...

    def tool_message(self, content: str, call_id: str | None, ok: bool, kind: str | None) -> Message: ...

    async def generate_turn(
        self, context: list[Message], *, turn: int, retry: int = 0
    ) -> tuple[Generation, Message]: ...

    async def execute(self, turn: Message) -> tuple[Message, bool, str | None]: ...


@dataclass(frozen=True)
class SaarEvent:
    """One SAAR decision, recorded so an ablation can say which failures were purified.

    ``turn`` is the index of the assistant turn (0-based) being corrected; ``retry``
    the regeneration number (1..max_retries); ``error_kind`` the failure being
    corrected; ``similarity`` the ratio between failed and new call (None when a
    call could not be parsed); ``ok`` whether the installed call then ran;
    ``failed_code`` and ``new_code`` the programs of the failed and the regenerated
    call (shallow and deep events, when parsed), so a report can show what was purified.
    """

    turn: int
    retry: int
    action: Action
    error_kind: str | None
    similarity: float | None = None
    ok: bool = False
    tokens: int = 0
    failed_code: str | None = None
    new_code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def call_text(turn: Message, mode: Similarity = "code") -> str | None:
    """What SAAR compares of a turn's call: its program (``code``) or the call as written (``call``), which a
    failed call has when its profile keeps it (``meta["call_raw"]``); None when there is nothing to compare."""
    if mode == "code":
        return turn.call.code if turn.call is not None else None
    return turn.call.raw if turn.call is not None else turn.meta.get("call_raw")


def similarity(old: Message, new: Message, mode: Similarity = "code") -> float | None:
    """Ratio between the calls of two turns (:func:`call_text`), or None when either has none."""
    a, b = call_text(old, mode), call_text(new, mode)
    if a is None or b is None:
        return None
    return difflib.SequenceMatcher(None, a, b).ratio()


def replace_turn(installed: Message, regenerated: Message, cfg: SaarConfig) -> tuple[Message, Action, float | None]:
    """The turn that takes the failed turn's place, and whether that was shallow or deep.

    A shallow replacement keeps the installed turn's reasoning and takes the regenerated call, or, when that
    call failed and is kept as written, the failed call (Open-CLEANER's ``_overwrite_last_assistant_turn``,
    ``tool_agent_loop.py`` lines 884-980: whatever tool it names).
    """
    ratio = similarity(installed, regenerated, cfg.similarity)
    if ratio is None or ratio < cfg.gamma:
        return regenerated, "deep", ratio
    if regenerated.call is not None:
        return installed.with_call(regenerated.call, regenerated.call_tokens), "shallow", ratio
    return installed.with_failed_call(regenerated), "shallow", ratio


async def rollback(state: RollbackState, index: int, error: Message, error_kind: str | None) -> Message | None:
    """Purify the failed turn at ``state.messages[index]`` whose call produced ``error``.

    Returns the tool message to append after the (possibly replaced) turn, or None
    when the rollout must end here (the regenerated turn hit the length limit, or it
    answered without a call and was appended itself). The rollback is a ``saar`` span of
    ``state.spans``, each regeneration (with the run of its call) a ``regeneration`` span in it.
    """
    turn = state.assistant_turns - 1
    async with state.spans(f"saar rollback: turn {turn}", "saar"):
        return await _rollback(state, index, error, error_kind, turn)


async def _rollback(
    state: RollbackState, index: int, error: Message, error_kind: str | None, turn: int
) -> Message | None:
    cfg = state.saar
    for retry in range(1, cfg.max_retries + 1):
        if state.cap_reached():
            state.rollback_on = False
            state.record(SaarEvent(turn, retry, "cap", error_kind))
            return error
        async with state.spans(f"regeneration {retry}", "regeneration"):
            installed = state.messages[index]
            gen, regenerated = await state.generate_turn([*state.messages[: index + 1], error], turn=turn, retry=retry)
            if state.tool_env.regeneration_is_turn and turn + 2 >= state.max_turns:
                # the regeneration is turn ``turn + 2`` of at most ``max_turns``: the state before the error is
                # restored and the trajectory ends there (tool_agent_loop.py lines 391-397, 846-852)
                state.record(SaarEvent(turn, retry, "max_turns", error_kind, tokens=gen.output_tokens))
                state.stop("max_turns")
                return None
            if gen.truncated:
                state.record(SaarEvent(turn, retry, "length", error_kind, tokens=gen.output_tokens))
                state.stop("length")
                return None
            if not regenerated.call and not regenerated.call_error:
                state.rollback_on = False
                state.record(SaarEvent(turn, retry, "no_call", error_kind, tokens=gen.output_tokens))
                state.messages.append(error)
                state.messages.append(regenerated)
                state.stop("answer")
                return None
            new_turn, action, ratio = replace_turn(installed, regenerated, cfg)
            state.messages[index] = new_turn
            result_msg, ok, kind = await state.execute(new_turn)
            state.record(
                SaarEvent(
                    turn,
                    retry,
                    action,
                    error_kind,
                    ratio,
                    ok,
                    gen.output_tokens,
                    failed_code=installed.call.code if installed.call else None,
                    new_code=regenerated.call.code if regenerated.call else None,
                )
            )
            if ok:
                return result_msg
            error, error_kind = result_msg, kind
    # retries exhausted: the last error stays, with a note when it has been retried twice or more
    state.rollback_on = False
    state.record(SaarEvent(turn, cfg.max_retries + 1, "exhausted", error_kind))
    if cfg.max_retries >= 2:
        note = state.tool_env.retry_note(cfg.max_retries + 1, cfg.max_retries)
        error = state.tool_message(error.content + note, error.tool_call_id, False, error.meta.get("error_kind"))
    return error
