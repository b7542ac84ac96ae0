"""What an expert-iteration round keeps of the warm model's own trajectories (:mod:`trainers.warmup.iterate`).

Rejection sampling, as STaR and RFT do: of the trajectories a round samples, two kinds become
demonstrations (:class:`~trainers.warmup.demonstrations.Demonstration`, tokenized and masked as the SFT's):

* **right endings**: trajectories whose final answer passes the training reward's strict check
  (:func:`trainers.core.reward.compute_reward`: the last box for math, every test for code). Natural
  recoveries and trajectories SAAR purified are among them. Every assistant turn is trained except a
  turn whose call failed (the error stays in context, the failed turn gets no loss).
* **corrections**: the model's own failed call, its real error, then a DIFFERENT call that ran. SAAR's
  regenerations provide them (the context the regeneration was sampled from ends with the failed turn and
  its error; recorded by :class:`Recorder`), and so does a next turn after an error that stayed in a
  trajectory that did not end right. The loss lies on the corrected turn only.

A call is different when its program differs from the failed one (whitespace at the ends aside); a
malformed call has no program, so any program that ran differs from it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from harness.benchmarks.problem import Problem
from harness.core import seeds
from harness.core.messages import Generation, Message
from harness.core.metrics import INSTALLED_ACTIONS
from harness.core.rollout import Generate, RolloutConfig, Trajectory, to_assistant
from harness.core.saar import SaarEvent
from trainers.warmup.demonstrations import Demonstration, _failed_turns

Source = Literal[
    "right",
    "right_recovered",
    "right_purified",
    "correction_saar",
    "correction_next_turn",
    "correction_search",
    "correction_reference",  #: distillation: the generator's program, not the model's (trainers.warmup.reference)
]


@dataclass(frozen=True)
class Recorded:
    """One generation of a rollout: the context the model saw and the turn it wrote (parsed as the rollout parses)."""

    context: list[Message]
    turn: Message


class Recorder:
    """A rollout's ``Generate`` that keeps every generation by its seed (the seed names its turn and SAAR retry)."""

    def __init__(self, generate: Generate, config: RolloutConfig) -> None:
        self.generate, self.config = generate, config
        self.by_seed: dict[int | None, Recorded] = {}

    async def __call__(self, context: list[Message], *, seed: int | None = None) -> Generation:
        gen = await self.generate(context, seed=seed)
        self.by_seed[seed] = Recorded(
            list(context),
            to_assistant(gen, env=self.config.tool_env, accept_python_fence=self.config.accept_python_fence),
        )
        return gen


@dataclass(frozen=True)
class Sampled:
    """One trajectory a round sampled, with its outcome and its recorded generations."""

    problem: Problem
    trajectory: Trajectory
    correct: bool  #: the strict training reward's verdict
    recorded: dict[int | None, Recorded] = field(default_factory=dict)


@dataclass(frozen=True)
class Selected:
    demo: Demonstration
    source: Source


def differs(failed_code: str | None, new_code: str | None) -> bool:
    """Whether a new call's program is another program than the failed call's."""
    return new_code is not None and (failed_code or "").strip() != new_code.strip()


def corrects(e: SaarEvent) -> bool:
    """Whether a SAAR event installed a different call that ran: a correction of the model's own."""
    return e.action in INSTALLED_ACTIONS and e.ok and differs(e.failed_code, e.new_code)


def _assistant_count(messages: Sequence[Message]) -> int:
    return sum(1 for m in messages if m.role == "assistant")


def right_ending(s: Sampled) -> Selected | None:
    """A trajectory that ends right, every turn trained but the failed ones; None when it does not end right."""
    if not s.correct:
        return None
    traj = s.trajectory
    failed = _failed_turns(traj.messages)
    trained = [i for i in range(_assistant_count(traj.messages)) if i not in failed]
    source: Source = "right_purified" if any(e.ok for e in traj.events) else "right_recovered" if failed else "right"
    return Selected(Demonstration(s.problem, list(traj.messages), trained, None, list(traj.error_kinds)), source)


def saar_corrections(s: Sampled) -> list[Selected]:
    """SAAR's regenerations whose installed call ran and differs from the failed one: the regeneration's context
    (the failed turn and its error last) and the regenerated turn, trained on that turn only."""
    traj, out = s.trajectory, []
    if traj.seed is None:
        return out
    for e in traj.events:
        if not corrects(e):
            continue
        rec = s.recorded.get(seeds.generation_seed(traj.seed, turn=e.turn, retry=e.retry))
        if rec is None:
            raise KeyError(f"{s.problem.id}: no recorded generation for turn {e.turn}, retry {e.retry}")
        messages = [*rec.context, rec.turn]
        out.append(Selected(Demonstration(s.problem, messages, [_assistant_count(rec.context)]), "correction_saar"))
    return out


def next_turn_corrections(s: Sampled) -> list[Selected]:
    """A failed call whose error stayed, then a next turn with a different call that ran: trained on that turn only."""
    msgs, out = s.trajectory.messages, []
    for i in range(len(msgs) - 3):
        failed, error, fix, result = msgs[i : i + 4]
        if not (failed.role == "assistant" and error.role == "tool" and fix.role == "assistant"):
            continue
        if error.meta.get("ok", True) or result.role != "tool" or not result.meta.get("ok", False):
            continue
        if fix.call is None or not differs(failed.call.code if failed.call else None, fix.call.code):
            continue
        messages = list(msgs[: i + 3])
        out.append(
            Selected(Demonstration(s.problem, messages, [_assistant_count(messages) - 1]), "correction_next_turn")
        )
    return out


def select(sampled: Sequence[Sampled]) -> list[Selected]:
    """What a round trains on, in the order sampled: right endings (whose own recoveries they train), and the
    corrections of SAAR's regenerations everywhere and of next turns in trajectories that did not end right."""
    out: list[Selected] = []
    for s in sampled:
        kept = right_ending(s)
        if kept is not None:
            out.append(kept)
        out += saar_corrections(s)
        if kept is None:
            out += next_turn_corrections(s)
    return out


def counts(selected: Sequence[Selected]) -> dict[str, int]:
    """Selected demonstrations by source."""
    return dict(sorted(Counter(s.source for s in selected).items()))
