"""More of the warm model's own corrections: best-of-K regenerations at the failures SAAR did not correct.

A small model's SAAR regenerations seldom run, so a round finds few of the model's own corrections. Here every
failure point whose regenerations found none gets
``k`` more samples from the same context the first regeneration saw (the failed turn and its real error
last), each run as the rollout runs a call (:meth:`harness.core.rollout.RolloutState.execute`, in a fresh
sandbox); the first that makes a DIFFERENT call (:func:`~trainers.warmup.selection.differs`) that runs becomes a
correction, trained on that turn only, exactly as a SAAR correction is. Still rejection sampling of the
model's own turns: nothing is written for it, only more is drawn and the filter is the same.

The sandbox is fresh, not the trajectory's: a call that reads a file an earlier call wrote fails here (the
tool's programs seldom write files; such a point simply yields no correction).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence

from harness.core import seeds
from harness.core.messages import Generation, Message
from harness.core.metrics import INSTALLED_ACTIONS
from harness.core.rollout import Generate, RolloutConfig, RolloutState, to_assistant
from harness.core.saar import SaarEvent
from sandboxes.base import Backend
from trainers.warmup.demonstrations import Demonstration
from trainers.warmup.selection import Sampled, Selected, _assistant_count, corrects, differs

#: SAAR events that follow a regeneration (a ``cap`` event stops rollback before one; ``exhausted`` comes after all)
_GENERATED = (*INSTALLED_ACTIONS, "no_call", "length")


def uncorrected(s: Sampled) -> Iterator[tuple[SaarEvent, list[Message]]]:
    """The first regeneration of every failed turn of ``s`` whose regenerations gave no correction, with the
    context it was sampled from (the failed turn and its error last)."""
    traj = s.trajectory
    if traj.seed is None:
        return
    turns_corrected = {e.turn for e in traj.events if corrects(e)}
    for e in traj.events:
        if e.retry != 1 or e.action not in _GENERATED or e.turn in turns_corrected:
            continue
        rec = s.recorded.get(seeds.generation_seed(traj.seed, turn=e.turn, retry=1))
        if rec is None:
            raise KeyError(f"{s.problem.id}: no recorded generation for turn {e.turn}, retry 1")
        yield e, rec.context


#: A failure SAAR did not correct: its trajectory, the first regeneration's event and the context it saw.
FailurePoint = tuple[Sampled, SaarEvent, list[Message]]


def failure_points(sampled: Sequence[Sampled]) -> list[FailurePoint]:
    """Every failure of ``sampled`` that the search samples again (:func:`uncorrected`)."""
    return [(s, e, context) for s in sampled for e, context in uncorrected(s)]


async def execute(turn: Message, backend: Backend, config: RolloutConfig) -> Message:
    """The tool message of ``turn``'s call, executed as the rollout executes a call, in a fresh sandbox."""

    async def no_generation(context: list[Message], *, seed: int | None = None) -> Generation:
        raise AssertionError("executing a call generates nothing")

    box = await backend.acquire()
    try:
        result, _, _ = await RolloutState([], no_generation, box, config, saar_on=False).execute(turn)
    finally:
        await backend.release(box)
    return result


async def runs(turn: Message, backend: Backend, config: RolloutConfig) -> bool:
    """Whether ``turn``'s call runs (:func:`execute`)."""
    return bool((await execute(turn, backend, config)).meta["ok"])


async def search_corrections(
    points: Sequence[FailurePoint],
    generate: Generate,
    backend: Backend,
    config_of: Callable[[Sampled], RolloutConfig],
    k: int,
    concurrency: int,
) -> list[Selected]:
    """Up to one correction per failure point, from ``k`` more samples each."""
    gate = asyncio.Semaphore(concurrency)

    async def attempt(s: Sampled, e: SaarEvent, context: list[Message], j: int) -> Message | None:
        config = config_of(s)
        failed = context[-2].call  # the failed turn (an event without a call's code records none)
        assert s.trajectory.seed is not None
        async with gate:
            gen = await generate(context, seed=seeds.derive("correction-search", s.trajectory.seed, e.turn, j))
            turn = to_assistant(gen, env=config.tool_env, accept_python_fence=config.accept_python_fence)
            if turn.call is None or not differs(failed.code if failed else None, turn.call.code):
                return None
            return turn if await runs(turn, backend, config) else None

    async def point(s: Sampled, e: SaarEvent, context: list[Message]) -> Selected | None:
        turns = await asyncio.gather(*(attempt(s, e, context, j) for j in range(k)))
        found = next((t for t in turns if t is not None), None)
        if found is None:
            return None
        demo = Demonstration(s.problem, [*context, found], [_assistant_count(context)])
        return Selected(demo, "correction_search")

    found = await asyncio.gather(*(point(s, e, context) for s, e, context in points))
    return [c for c in found if c is not None]
