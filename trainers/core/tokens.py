"""Token-level view of a (purified) trajectory: observation ids and action ranges.

The rollout core works on messages; a trainer needs one token sequence with the
spans the policy wrote. This module turns the final messages of a trajectory into
that sequence, segment by segment, so that every boundary is exact:

* the prompt is rendered with the model's chat template (:func:`harness.core.chat.render`,
  the same rendering evaluation uses) and tokenized once;
* each later message contributes the text the template adds for it (the difference
  between the renderings with and without it). For an assistant turn that text is
  split after its end-of-turn marker: the turn body and marker are the *action*, the
  rest (a newline, say) is observation, like every tool result and generation prompt.

Token-in, token-out: a turn the engine sampled keeps the sampled ids, verbatim
(``"sampled"``). A SAAR *shallow* replacement keeps the installed turn's reasoning ids
and splices in the ids of the regenerated call, cut where each turn's call opens
(``"spliced"``); a *deep* replacement is the regenerated turn's own ids. Only a turn
the engine never sampled is tokenized from the template's text (``"retokenized"``).

The sampled ids are kept even where the template would render the turn differently
(the model wrote compact JSON, ``\\u`` escapes, no newline before ``<tool_call>``, a
second call): such a turn is flagged in :attr:`TokenTrajectory.matches_template` and
counted, never re-tokenized. That is harmless for training: the engine's context for
each generation is built by this same function from the same store, so what the model
saw when it sampled a turn is a prefix of the sequence trained on, and every action id
is one the model sampled. (Evaluation renders such a turn in the template's form.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.core import protocol
from harness.core.messages import Message
from harness.core.toolenv import ToolEnv

Render = Callable[..., str]
Source = Literal["sampled", "spliced", "retokenized"]


class TemplateError(ValueError):
    """The chat template is not prefix-stable, so turns cannot be cut out of it."""


@dataclass
class Sampled:
    """What the engine sampled for one generation."""

    text: str
    ids: list[int]
    logprobs: list[float] | None = None


@dataclass
class SampledStore:
    """Sampled token ids kept on the trainer's side, keyed by what the core keeps of a turn.

    The core's :class:`~harness.core.messages.Message` keeps text only: a turn without a call
    keeps the generated text as its content; a turn with a call keeps the reasoning
    before the call as content and the call as written (``call.raw``). Those are the
    keys here, so an installed turn, a shallow mix of two turns and a deep replacement
    all find the ids they were sampled as.
    """

    env: ToolEnv  #: the tool environment the turns were parsed under (its call form is the key)
    by_text: dict[str, Sampled] = field(default_factory=dict)  #: turns without an executable call
    by_turn: dict[tuple[str, str], Sampled] = field(default_factory=dict)  #: (reasoning, call.raw)
    by_reasoning: dict[str, Sampled] = field(default_factory=dict)
    by_call: dict[str, Sampled] = field(default_factory=dict)

    def add(self, text: str, ids: Sequence[int], logprobs: Sequence[float] | None = None) -> None:
        item = Sampled(text, list(ids), list(logprobs) if logprobs is not None else None)
        self.by_text[text] = item
        parsed = protocol.parse_turn(text, env=self.env)
        if parsed.call is not None:
            self.by_turn[(parsed.reasoning, parsed.call.raw)] = item
            self.by_reasoning[parsed.reasoning] = item
            self.by_call[parsed.call.raw] = item

    def lookup(self, msg: Message) -> tuple[Sampled | None, tuple[Sampled, Sampled] | None]:
        """The sample a turn is, or the (reasoning, call) samples a shallow replacement was made of."""
        if msg.call is None:
            return self.by_text.get(msg.content), None
        item = self.by_turn.get((msg.content, msg.call.raw))
        if item is not None:
            return item, None
        old, new = self.by_reasoning.get(msg.content), self.by_call.get(msg.call.raw)
        return None, (old, new) if old is not None and new is not None else None


@dataclass
class TokenTrajectory:
    """A trajectory as one token sequence for the trainer."""

    ids: list[int]
    action_ranges: list[tuple[int, int]]
    sources: list[Source]  #: how each action span's ids were obtained
    matches_template: list[bool] = field(default_factory=list)  #: each span's ids decode to the template's text

    def action_mask(self) -> list[int]:
        mask = [0] * len(self.ids)
        for start, end in self.action_ranges:
            mask[start:end] = [1] * (end - start)
        return mask


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False)


def _prefix_len(tokenizer: Any, ids: Sequence[int], text: str) -> int | None:
    """The number of leading ``ids`` that decode to exactly ``text`` (None if no cut does)."""
    if not text:
        return 0
    lo, hi = 1, len(ids)  # binary search: decoded length grows with the number of ids
    while lo < hi:
        mid = (lo + hi) // 2
        if len(_decode(tokenizer, ids[:mid])) < len(text):
            lo = mid + 1
        else:
            hi = mid
    for j in (lo, lo + 1):  # a partial multi-byte token may decode to a replacement character
        if j <= len(ids) and _decode(tokenizer, ids[:j]) == text:
            return j
    return None


def _end_marker(tokenizer: Any) -> str | None:
    eos = getattr(tokenizer, "eos_token", None)
    return eos if isinstance(eos, str) and eos else None


def _split_action(delta: str, marker: str | None) -> tuple[str, str]:
    """Cut an assistant delta after its end-of-turn marker: (action, observation tail)."""
    if marker and marker in delta:
        cut = delta.index(marker) + len(marker)
        return delta[:cut], delta[cut:]
    return delta, ""


def _splice(tokenizer: Any, msg: Message, old: Sampled, new: Sampled, env: ToolEnv) -> list[int] | None:
    """A shallow replacement's ids: ``old``'s ids up to its call, then ``new``'s from its call on."""
    old_cut = _prefix_len(tokenizer, old.ids, msg.content)
    new_cut = _prefix_len(tokenizer, new.ids, protocol.parse_turn(new.text, env=env).reasoning)
    if old_cut is None or new_cut is None:  # a call marker that does not start on a token boundary
        return None
    return list(old.ids[:old_cut]) + list(new.ids[new_cut:])


def _turn_ids(
    tokenizer: Any, msg: Message, action: str, marker: str | None, store: SampledStore | None
) -> tuple[list[int], Source, int, bool]:
    """Ids of one assistant action: (ids, source, how many of them are action, whether they decode to ``action``).

    ``action`` is the template's text of the turn, ending with its end-of-turn marker.
    Ids past the action count are the marker the engine did not sample (it stopped at a
    stop token or the length limit), which the template adds as observation.
    """
    ids: list[int] | None = None
    source: Source = "sampled"
    if store is not None:
        item, pair = store.lookup(msg)
        if item is not None:
            ids = list(item.ids)
        elif pair is not None:
            ids, source = _splice(tokenizer, msg, *pair, env=store.env), "spliced"
    if ids is None:
        return _encode(tokenizer, action), "retokenized", 0, True
    n_action = len(ids)
    decoded = _decode(tokenizer, ids)
    if marker and action.endswith(marker) and not decoded.endswith(marker):
        ids += _encode(tokenizer, marker)
        decoded += marker
    return ids, source, n_action, decoded == action


def assemble(
    tokenizer: Any,
    messages: Sequence[Message],
    n_prompt: int,
    *,
    env: ToolEnv,
    store: SampledStore | None = None,
    add_generation_prompt: bool = False,
    render: Render | None = None,
) -> TokenTrajectory:
    """Token ids and action ranges of ``messages`` (the first ``n_prompt`` are the prompt), rendered with the tool
    of ``env`` (the tool environment the turns were parsed under: the store's, when given).

    With ``add_generation_prompt`` the sequence ends with the template's assistant
    header: that is the engine's context for the next turn.
    """
    if render is None:
        from trainers.core._compat import get_render  # noqa: PLC0415

        render = get_render()
    msgs = list(messages)
    if not 0 < n_prompt <= len(msgs):
        raise ValueError(f"assemble: n_prompt must be in 1..{len(msgs)}, got {n_prompt}")
    marker = _end_marker(tokenizer)

    def gen_after(i: int) -> bool:  # a generation prompt follows message i-1 when an assistant turn comes next
        return msgs[i].role == "assistant" if i < len(msgs) else add_generation_prompt

    if store is not None and store.env is not env:
        raise ValueError(f"assemble: the store holds turns parsed under {store.env.name!r}, not {env.name!r}")
    prev = render(tokenizer, msgs[:n_prompt], env=env, add_generation_prompt=gen_after(n_prompt))
    ids = _encode(tokenizer, prev)
    ranges: list[tuple[int, int]] = []
    sources: list[Source] = []
    matches: list[bool] = []
    for i in range(n_prompt, len(msgs)):
        full = render(tokenizer, msgs[: i + 1], env=env, add_generation_prompt=gen_after(i + 1))
        if not full.startswith(prev):
            raise TemplateError(
                f"the chat template is not prefix-stable at message {i} ({msgs[i].role}): rendering the first "
                f"{i + 1} messages does not extend the rendering of the first {i}; use a template that renders "
                "earlier turns unchanged"
            )
        delta, prev = full[len(prev) :], full
        if msgs[i].role != "assistant":
            ids += _encode(tokenizer, delta)
            continue
        action, tail = _split_action(delta, marker)
        turn_ids, source, n_action, matches_template = _turn_ids(tokenizer, msgs[i], action, marker, store)
        if source == "retokenized":  # not sampled: the body and marker count as action, like a sampled turn
            n_action = len(turn_ids)
        ranges.append((len(ids), len(ids) + n_action))
        sources.append(source)
        matches.append(matches_template)
        ids += turn_ids + _encode(tokenizer, tail)
    return TokenTrajectory(ids, ranges, sources, matches)
