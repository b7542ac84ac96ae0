"""Distillation at the warm model's own failures: the generator's program as the correction.

A round's own corrections are rare (few of a small model's SAAR regenerations run, and a best-of-K search finds
few more: :mod:`trainers.warmup.search`). Here every failure point whose
regenerations found none (:func:`~trainers.warmup.search.failure_points`: the model's own failed call
and its real error last in context, exactly what a SAAR regeneration sees) gets one demonstration whose
next turn is written by the project: the error named, then the generator's reference program
(:func:`~trainers.warmup.demonstrations.reference_program`), which must run in a fresh sandbox as the rollout runs
a call. Trained on that turn only, as a correction of the model's own is.

With ``finish`` (``warmup-iterate --reference-finish``) the demonstration goes on to the end, as the SFT's
demonstrations do: the reference call's real output, then the closing turn (the boxed answer, or the final
solution), trained on the correcting turn and the closing turn. Without it, a model trained on corrections
tends to go on rewriting a program after a call that ran, and to open turns with "The call failed" where no call
had failed: a correction that is never followed by its end teaches the correction and not when to stop.

This is distillation, not rejection sampling: the turn is not the model's. Rounds that use it
(``warmup-iterate --reference``) say so in their manifest (the selection source ``correction_reference``),
and what they teach is measured on held-out seeds and on problem kinds the generators do not make.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence

from harness.core import seeds
from harness.core.messages import Generation, Message
from harness.core.rollout import RolloutConfig, to_assistant
from harness.core.saar import SaarEvent
from sandboxes.base import Backend
from trainers.warmup.demonstrations import (
    Demonstration,
    DemonstrationError,
    answer_text,
    call_text,
    error_summary,
    reference_program,
)
from trainers.warmup.search import FailurePoint, execute
from trainers.warmup.selection import Sampled, Selected, _assistant_count


def reference_turn_text(error: str, program: str) -> str:
    """The correcting turn: the error's naming line, then the reference program's call."""
    return call_text(f"The call failed: {error_summary(error)}\nI write the whole program again.", program)


async def reference_corrections(
    points: Sequence[FailurePoint],
    backend: Backend,
    config_of: Callable[[Sampled], RolloutConfig],
    concurrency: int,
    finish: bool = False,
) -> list[Selected]:
    """One demonstration per failure point: its context, then the reference turn (trained on that turn only);
    with ``finish``, then the reference call's output and the closing turn (trained too)."""
    gate = asyncio.Semaphore(concurrency)

    def assistant(text: str, config: RolloutConfig) -> Message:
        gen = Generation(text=text, output_tokens=len(text) // 4)
        return to_assistant(gen, env=config.tool_env, accept_python_fence=config.accept_python_fence)

    async def point(s: Sampled, e: SaarEvent, context: list[Message]) -> Selected:
        config = config_of(s)
        text = reference_turn_text(context[-1].content, reference_program(s.problem))
        turn = assistant(text, config)
        async with gate:
            result = await execute(turn, backend, config) if turn.call is not None else None
        if result is None or not result.meta["ok"]:
            raise DemonstrationError(f"{s.problem.id}: the reference program did not run as a call:\n{text}")
        n = _assistant_count(context)
        if not finish:
            return Selected(Demonstration(s.problem, [*context, turn], [n]), "correction_reference")
        assert s.trajectory.seed is not None  # a failure point comes from a seeded trajectory's SAAR event
        rng = random.Random(seeds.derive("reference-finish", s.trajectory.seed, e.turn))
        messages = [*context, turn, result, assistant(answer_text(s.problem, result.content, rng), config)]
        return Selected(Demonstration(s.problem, messages, [n, n + 1]), "correction_reference")

    return list(await asyncio.gather(*(point(s, e, context) for s, e, context in points)))
