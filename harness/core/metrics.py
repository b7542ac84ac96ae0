"""One definition of each metric, read by every face (Inspect scorers, reports, both trainers).

A trajectory's numbers are :class:`TrajectoryMetrics` (built from a
:class:`~harness.core.rollout.Trajectory` or from the summary a log keeps of one). A group of
trajectories (an arm of an ablation, a training step) is summarised by :func:`aggregate`.
Every name means one thing wherever it appears:

* ``tool_failure_rate``: the MEAN OVER TRAJECTORIES of each trajectory's failed / executed
  calls (a trajectory without calls counts 0). This is what Inspect's ``mean()`` of the
  per-sample value shows.
* ``tool_failure_rate_pooled``: failed calls / executed calls over the whole group (every
  attempt weighs the same, so trajectories with many calls dominate). Not the same number.
* Counts summed over a group keep their per-trajectory names (``tool_calls``,
  ``tool_failures``, ``failures_kept``, ``saar_<action>``, ``saar_purified``,
  ``tokens_generated``, ``tokens_kept``); means over trajectories end in ``_mean``
  (``tool_calls_mean``, ``turns_mean``, ``tokens_mean``, ``saar_on_rate``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.core.saar import SaarEvent


class Finished(Protocol):
    """What the metrics read of a finished rollout (:class:`harness.core.rollout.Trajectory` is one).

    A protocol, so that the metrics sit below the loop whose trajectories they count.
    """

    saar_on: bool
    assistant_turns: int
    tool_calls: int
    tool_failures: int
    failures_kept: int
    tokens_generated: int
    tokens_kept: int
    error_kinds: Mapping[str, int]

    events: Sequence[SaarEvent]


#: SAAR actions, in the order tables show them (see :class:`harness.core.saar.SaarEvent`).
ACTIONS = ("shallow", "deep", "no_call", "length", "max_turns", "exhausted", "cap")


def rate(part: float, whole: float) -> float:
    """``part / whole``, and 0 when ``whole`` is 0 (no calls: nothing failed)."""
    return part / whole if whole else 0.0


@dataclass(frozen=True)
class TrajectoryMetrics:
    """The numbers of one trajectory (one sample and epoch, or one training rollout)."""

    saar_on: bool = False
    turns: int = 0  #: assistant turns kept
    tool_calls: int = 0  #: executed calls, every attempt (purified ones included)
    tool_failures: int = 0  #: executed calls that failed (every attempt)
    failures_kept: int = 0  #: failed tool results left in the final trajectory
    tokens_generated: int = 0  #: every generated token, discarded regenerations included
    tokens_kept: int = 0  #: generated tokens of the turns that remain
    actions: Mapping[str, int] = field(default_factory=dict)  #: SAAR action -> events
    saar_purified: int = 0  #: SAAR events whose installed call then ran
    error_kinds: Mapping[str, int] = field(default_factory=dict)  #: error kind -> failed attempts

    @property
    def tool_failure_rate(self) -> float:
        """This trajectory's failed / executed calls (0 without calls)."""
        return rate(self.tool_failures, self.tool_calls)

    def scalars(self) -> dict[str, float]:
        """Flat per-trajectory numbers by their one name (Inspect scores, OpenRLHF extra_logs)."""
        out = {
            "saar_on": float(self.saar_on),
            "turns": float(self.turns),
            "tool_calls": float(self.tool_calls),
            "tool_failures": float(self.tool_failures),
            "tool_failure_rate": self.tool_failure_rate,
            "failures_kept": float(self.failures_kept),
            "tokens_generated": float(self.tokens_generated),
            "tokens_kept": float(self.tokens_kept),
            "saar_purified": float(self.saar_purified),
        }
        for action in ACTIONS:
            out[f"saar_{action}"] = float(self.actions.get(action, 0))
        return out

    @classmethod
    def of(cls, trajectory: Finished) -> TrajectoryMetrics:
        """The metrics of a finished rollout."""
        return cls(
            saar_on=trajectory.saar_on,
            turns=trajectory.assistant_turns,
            tool_calls=trajectory.tool_calls,
            tool_failures=trajectory.tool_failures,
            failures_kept=trajectory.failures_kept,
            tokens_generated=trajectory.tokens_generated,
            tokens_kept=trajectory.tokens_kept,
            actions=dict(Counter(e.action for e in trajectory.events)),
            saar_purified=sum(1 for e in trajectory.events if e.ok),
            error_kinds=dict(trajectory.error_kinds),
        )

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> TrajectoryMetrics:
        """The metrics kept in a log (:meth:`harness.core.rollout.Trajectory.summary`)."""
        events = list(summary.get("saar_events") or [])
        return cls(
            saar_on=bool(summary.get("saar_on", False)),
            turns=int(summary.get("assistant_turns", 0)),
            tool_calls=int(summary.get("tool_calls", 0)),
            tool_failures=int(summary.get("tool_failures", 0)),
            failures_kept=int(summary.get("failures_kept", 0)),
            tokens_generated=int(summary.get("tokens_generated", 0)),
            tokens_kept=int(summary.get("tokens_kept", 0)),
            actions=dict(Counter(str(e.get("action")) for e in events)),
            saar_purified=sum(1 for e in events if e.get("ok")),
            error_kinds={str(k): int(v) for k, v in (summary.get("error_kinds") or {}).items()},
        )


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def aggregate(samples: Sequence[TrajectoryMetrics]) -> dict[str, float]:
    """A group of trajectories by metric name (see the module docstring for what each name means).

    ``errors.<Kind>`` counts failed attempts by error kind over the group.
    """
    calls = sum(s.tool_calls for s in samples)
    failures = sum(s.tool_failures for s in samples)
    out: dict[str, float] = {
        "trajectories": float(len(samples)),
        "tool_calls": float(calls),
        "tool_failures": float(failures),
        "tool_failure_rate": _mean([s.tool_failure_rate for s in samples]),
        "tool_failure_rate_pooled": rate(failures, calls),
        "failures_kept": float(sum(s.failures_kept for s in samples)),
        "saar_on_rate": _mean([float(s.saar_on) for s in samples]),
        "saar_purified": float(sum(s.saar_purified for s in samples)),
        "tool_calls_mean": _mean([float(s.tool_calls) for s in samples]),
        "turns_mean": _mean([float(s.turns) for s in samples]),
        "tokens_generated": float(sum(s.tokens_generated for s in samples)),
        "tokens_kept": float(sum(s.tokens_kept for s in samples)),
        "tokens_mean": _mean([float(s.tokens_generated) for s in samples]),
    }
    for action in ACTIONS:
        out[f"saar_{action}"] = float(sum(s.actions.get(action, 0) for s in samples))
    kinds: Counter[str] = Counter()
    for s in samples:
        kinds.update(s.error_kinds)
    for kind, count in sorted(kinds.items()):
        out[f"errors.{kind}"] = float(count)
    return out


def first_attempts(traj: Finished) -> tuple[int, int]:
    """(calls, failures) of the policy's own first attempt at each turn, SAAR's regenerations left out.

    Every SAAR regeneration that ran a call is a shallow or deep event; the remaining
    executed calls are first attempts. With SAAR off this is every call.
    """
    regenerated = [e for e in traj.events if e.action in ("shallow", "deep")]
    return traj.tool_calls - len(regenerated), traj.tool_failures - sum(1 for e in regenerated if not e.ok)


#: SAAR actions that are a regeneration of a failed turn (a generation with the error in view).
REGENERATION_ACTIONS = ("shallow", "deep", "no_call", "length")
#: SAAR actions whose regenerated call was installed in place of the failed one and run.
INSTALLED_ACTIONS = ("shallow", "deep")


def _field(event: SaarEvent | Mapping[str, Any], name: str) -> Any:
    return event.get(name) if isinstance(event, Mapping) else getattr(event, name)


def is_repeat(event: SaarEvent | Mapping[str, Any]) -> bool:
    """Whether a regeneration's installed call was the failed call verbatim (similarity 1.0: it fails again)."""
    return _field(event, "action") in INSTALLED_ACTIONS and _field(event, "similarity") == 1.0


@dataclass(frozen=True)
class Regenerations:
    """What SAAR's regenerations did, over a group of events (a log's dicts or :class:`SaarEvent` objects).

    ``regenerations``: every regeneration of a failed turn (shallow, deep, no call, length);
    ``ran``: those whose installed call ran (SAAR purified the failure); ``repeated``: those whose
    installed call was the failed call verbatim. The shares are of ``regenerations``.
    """

    regenerations: int = 0
    ran: int = 0
    repeated: int = 0

    @classmethod
    def of(cls, events: Sequence[SaarEvent | Mapping[str, Any]]) -> Regenerations:
        regens = [e for e in events if _field(e, "action") in REGENERATION_ACTIONS]
        return cls(len(regens), sum(1 for e in regens if _field(e, "ok")), sum(1 for e in regens if is_repeat(e)))

    @property
    def ran_share(self) -> float:
        return rate(self.ran, self.regenerations)

    @property
    def repeated_share(self) -> float:
        return rate(self.repeated, self.regenerations)
