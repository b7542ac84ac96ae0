"""The compared form of a rollout, the same on every path (:class:`SampleRecord`), and where two paths part
(:func:`first_difference`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from harness.core.messages import Message

#: The SAAR events' fields that are compared (``tokens`` counts a replay turn differently per path).
EVENT_FIELDS = ("turn", "retry", "action", "error_kind", "similarity", "ok", "failed_code", "new_code")
#: The trajectory summary's fields that are compared.
SUMMARY_FIELDS = (
    "stop_reason",
    "saar_on",
    "assistant_turns",
    "tool_calls",
    "tool_failures",
    "failures_kept",
    "error_kinds",
)
#: The trajectory's token counts, compared where every path counts tokens (a real model; :class:`SampleRecord`).
COUNT_FIELDS = ("tokens_generated", "tokens_kept", "response_tokens")


class ParityError(ValueError):
    """A parity run cannot be made as asked (a script, task or option); the message says which."""


@dataclass(frozen=True)
class SampleRecord:
    """One problem's rollout on one path, in the normalized form every path can give (module docstring)."""

    messages: list[dict[str, Any]]
    saar_events: list[dict[str, Any]]
    summary: dict[str, Any]
    final_text: str
    correct: bool
    reward: float | None  #: the training reward (None on the Inspect path, which computes none)
    seeds: list[int | None]  #: the seed each generation was asked with, in order
    #: the token paths: each generation's context, decoded (the prompt as the model saw it; None on Inspect)
    contexts: list[str] | None = None
    #: the token counts the budgets read (:data:`COUNT_FIELDS`, each SAAR event's ``tokens``); None where a path
    #: counts otherwise (a replay turn counts words on Inspect)
    counts: dict[str, Any] | None = None


@dataclass(frozen=True)
class PathRun:
    """Every problem's :class:`SampleRecord` on one path, by sample id."""

    path: str
    tool_env: str
    samples: dict[str, SampleRecord] = field(default_factory=dict)


def message_record(m: Message, outcome: dict[str, Any] | None = None) -> dict[str, Any]:
    """A message in the compared form: role and text; a tool result with its ``ok`` and error kind, from
    ``outcome`` when given (an Inspect message's metadata), else from the message's own."""
    record: dict[str, Any] = {"role": m.role, "text": m.text}
    if m.role == "tool":
        meta = m.meta if outcome is None else outcome
        record |= {"ok": meta.get("ok", True), "error_kind": meta.get("error_kind")}
    return record


def summary_record(summary: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The compared part of a trajectory summary (:meth:`harness.core.rollout.Trajectory.summary`) and its events."""
    events = [{k: e.get(k) for k in EVENT_FIELDS} for e in summary["saar_events"]]
    return {k: summary[k] for k in SUMMARY_FIELDS}, events


def count_record(summary: dict[str, Any], turn_tokens: list[int | None]) -> dict[str, Any]:
    """A trajectory's token counts: :data:`COUNT_FIELDS` of its summary, each assistant turn's generated tokens
    (``turn_tokens``, in order) and each SAAR event's."""
    return {
        **{k: summary[k] for k in COUNT_FIELDS},
        "turn_tokens": turn_tokens,
        "event_tokens": [e["tokens"] for e in summary["saar_events"]],
    }


def first_difference(a: PathRun, b: PathRun, *, seeds: bool = True, counts: bool = True) -> str | None:
    """Where ``b`` first departs from ``a`` (sample, field, both values), or None when they agree.

    Fields are compared in the order a rollout meets them: the prompt (the first context), the messages, the SAAR
    events and the rest. A reward, the contexts and the token counts are compared only where both paths have them;
    ``seeds=False`` leaves the generation seeds out, ``counts=False`` the token counts.
    """
    if sorted(a.samples) != sorted(b.samples):
        return f"samples: {a.path} ran {sorted(a.samples)}, {b.path} ran {sorted(b.samples)}"
    for sid in sorted(a.samples):
        x, y = _compared(a.samples[sid], seeds, counts), _compared(b.samples[sid], seeds, counts)
        for key in ("reward", "prompt", "contexts", "counts"):
            if x.get(key) is None or y.get(key) is None:
                x.pop(key, None), y.pop(key, None)
        if (where := _diff(x, y, "")) is not None:
            name, left, right = where
            return f"sample {sid}, {name}: {a.path} {left!r} vs {b.path} {right!r}"
    return None


def _compared(record: SampleRecord, seeds: bool, counts: bool) -> dict[str, Any]:
    """``record``'s fields in the order :func:`first_difference` compares them (``prompt``: the first context)."""
    fields = asdict(record)
    contexts = fields.pop("contexts")
    if not seeds:
        del fields["seeds"]
    if not counts:
        del fields["counts"]
    return fields if contexts is None else {"prompt": contexts[0], **fields, "contexts": contexts}


def _diff(x: Any, y: Any, name: str) -> tuple[str, Any, Any] | None:
    if isinstance(x, dict) and isinstance(y, dict):
        for key in [*x, *(k for k in y if k not in x)]:
            if (d := _diff(x.get(key), y.get(key), f"{name}.{key}" if name else str(key))) is not None:
                return d
        return None
    if isinstance(x, list) and isinstance(y, list):
        for i, (u, v) in enumerate(zip(x, y, strict=False)):
            if (d := _diff(u, v, f"{name}[{i}]")) is not None:
                return d
        if len(x) != len(y):
            return f"{name} length", len(x), len(y)
        return None
    return None if x == y else (name, x, y)
