"""Distillation at the warm model's own failures: the generator's program as the correction (issue 17).

A round's own corrections are rare (5-8% of the committed warm model's SAAR regenerations run, and a
best-of-8 search found 1.5% more: :mod:`trainers.warmup.search`). Here every failure point whose
regenerations found none (:func:`~trainers.warmup.search.failure_points`: the model's own failed call
and its real error last in context, exactly what a SAAR regeneration sees) gets one demonstration whose
next turn is written by the project: the error named, then the generator's reference program
(:func:`~trainers.warmup.build.reference_program`), which must run in a fresh sandbox as the rollout runs
a call. Trained on that turn only, as a correction of the model's own is.

This is distillation, not rejection sampling: the turn is not the model's. Rounds that use it
(``warmup-iterate --reference``) say so in their manifest (the selection source ``correction_reference``),
and what they teach is measured on held-out seeds and on problem kinds the generators do not make.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from harness.core.messages import Generation, Message
from harness.core.rollout import RolloutConfig, to_assistant
from sandboxes.base import Backend
from trainers.warmup.build import Demonstration, DemonstrationError, call_text, error_summary, reference_program
from trainers.warmup.search import FailurePoint, runs
from trainers.warmup.selection import Sampled, Selected, _assistant_count


def reference_turn_text(error: str, program: str) -> str:
    """The correcting turn: the error's naming line, then the reference program's call."""
    return call_text(f"The call failed: {error_summary(error)}\nI write the whole program again.", program)


async def reference_corrections(
    points: Sequence[FailurePoint],
    backend: Backend,
    config_of: Callable[[Sampled], RolloutConfig],
    concurrency: int,
) -> list[Selected]:
    """One demonstration per failure point: its context, then the reference turn (trained on that turn only)."""
    gate = asyncio.Semaphore(concurrency)

    async def point(s: Sampled, context: list[Message]) -> Selected:
        config = config_of(s)
        text = reference_turn_text(context[-1].content, reference_program(s.problem))
        turn = to_assistant(Generation(text=text, output_tokens=len(text) // 4), config.accept_python_fence)
        async with gate:
            if turn.call is None or not await runs(turn, backend, config):
                raise DemonstrationError(f"{s.problem.id}: the reference program did not run as a call:\n{text}")
        return Selected(Demonstration(s.problem, [*context, turn], [_assistant_count(context)]), "correction_reference")

    return list(await asyncio.gather(*(point(s, context) for s, _, context in points)))
