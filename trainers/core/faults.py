"""A training rollout whose sandbox fails is rerun from its start, never scored as the model's failure.

The rollout core raises :class:`sandboxes.base.SandboxError` when a tool call comes back
``sandbox_failed`` (a container killed, a worker that died): what the model did up to there
cannot be scored, because the failure was not its program's. Both trainers (the CPU trainer's
``run_one`` and the OpenRLHF executor) run each rollout through :func:`rerun_on_sandbox_failure`:
the same trajectory seed, a fresh sandbox and a fresh token store, at most ``retries`` more
times; past that the step errors with the rollout's name, and the run resumes from its last
checkpoint (``--resume``) with nothing of the steps already logged lost.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sandboxes.base import SandboxError

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: reruns of one rollout after its sandbox failed (the trainers' configs default to this)
SANDBOX_RETRIES = 2


async def rerun_on_sandbox_failure(attempt: Callable[[], Awaitable[T]], *, retries: int, what: str) -> tuple[T, int]:
    """``await attempt()``; when it raises :class:`SandboxError`, run it again, at most ``retries`` more times.

    Returns the first result with the number of reruns it took. ``attempt`` must start the rollout
    afresh each time (its own sandbox, its own sampled-token store). Raises :class:`SandboxError`
    naming ``what`` when every attempt failed.
    """
    for rerun in range(retries + 1):
        try:
            return await attempt(), rerun
        except SandboxError as exc:
            failure = exc
            if rerun < retries:
                logger.warning("%s: %s; rerunning the rollout from its start (%d of %d)", what, exc, rerun + 1, retries)
    raise SandboxError(
        f"{what}: the sandbox failed in {retries + 1} attempt(s), last: {failure}; the rollout is not scored "
        "(the step errors; --resume continues the run from its last checkpoint)"
    ) from failure
