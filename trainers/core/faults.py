"""A training rollout whose sandbox fails is rerun from its start, never scored as the model's failure;
an engine that dies stops the step with :class:`EngineDied`, nothing of the step scored.

The rollout core raises :class:`sandboxes.base.SandboxError` when a tool call comes back
``sandbox_failed`` (a container killed, a worker that died): what the model did up to there
cannot be scored, because the failure was not its program's. Both trainers (the CPU trainer's
``run_one`` and the OpenRLHF executor) run each rollout through :func:`rerun_on_sandbox_failure`:
the same trajectory seed, a fresh sandbox and a fresh token store, at most ``retries`` more
times. Past that, in the CPU trainer, the step errors with the rollout's name, and the run resumes from its
last checkpoint (``--resume``) with nothing of the steps already logged lost (the OpenRLHF executor treats the
rollout as failed instead, below). The CPU trainer records such a
step in its run directory and samples it with new seeds when ``--resume`` reaches it again; after
``cpu.step_fault_runs`` runs of the step it stops with :class:`StepKeepsFailing` (:mod:`trainers.cpu.resume`),
so a fault that repeats cannot make ``--resume`` loop.

vLLM's engine dying mid-step (its process killed, out of memory) is not rerun: every rollout of the
step shares it. :class:`EngineDied` says so and how to continue; the step's rollouts are not scored
and its metrics line is not written, so ``--resume`` redoes the step from the last checkpoint.

In the OpenRLHF executor any exception of one rollout (a chat template it cannot render, a label it
cannot read, a sandbox image that is missing, a sandbox still failing after its reruns) is that rollout's:
:class:`FailureLedger` records it (kind, sample, message), the executor returns a loss-masked placeholder in
its place and the job goes on. When more than ``limit`` of an executor's last ``window`` rollouts failed, the
ledger raises :class:`RolloutsKeepFailing`, which stops the job: a fault that hits every rollout (no Docker
engine, a wrong template for the model) is the job's, not a sample's.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from sandboxes.base import SandboxError

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: reruns of one rollout after its sandbox failed (the trainers' configs default to this)
SANDBOX_RETRIES = 2
#: the job stops when more than this fraction of an executor's last FAILED_ROLLOUT_WINDOW rollouts failed
FAILED_ROLLOUT_LIMIT = 0.25
FAILED_ROLLOUT_WINDOW = 64


class EngineDied(RuntimeError):
    """vLLM's engine died during a training step: the step is not scored; ``--resume`` continues the run."""

    def __init__(self, what: str, cause: BaseException) -> None:
        super().__init__(
            f"vLLM's engine died during {what} ({type(cause).__name__}: {cause}); nothing of this step is scored "
            "or logged: --resume continues the run from its last checkpoint with a new engine"
        )


class StepKeepsFailing(SandboxError):
    """A training step ended on sandbox faults in every run allowed, each with other seeds: ``--resume`` stops."""


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
        "(the step errors; --resume continues the run from its last checkpoint, this step with new seeds)"
    ) from failure


@dataclass(frozen=True)
class RolloutFailure:
    """One rollout's exception: its class name, the sample (the item's id, else the prompt's start) and message."""

    kind: str
    sample: str
    message: str


class RolloutsKeepFailing(RuntimeError):
    """Too many of an executor's recent rollouts failed: the fault is the job's, so the job stops."""


class FailureLedger:
    """An executor's record of failed rollouts; :meth:`failed` raises :class:`RolloutsKeepFailing` past the limit.

    The rule: once ``window`` rollouts have finished, the job stops when more than ``limit`` (a fraction) of
    the last ``window`` failed.
    """

    def __init__(self, limit: float = FAILED_ROLLOUT_LIMIT, window: int = FAILED_ROLLOUT_WINDOW) -> None:
        self.limit, self.window = limit, window
        self._recent: deque[bool] = deque(maxlen=window)
        self.kinds: Counter[str] = Counter()
        self.last: RolloutFailure | None = None

    def ok(self) -> None:
        self._recent.append(False)

    def failed(self, failure: RolloutFailure) -> None:
        self._recent.append(True)
        self.kinds[failure.kind] += 1
        self.last = failure
        logger.warning(
            "rollout of %s failed (%s: %s); it is not trained on, the job goes on",
            failure.sample,
            failure.kind,
            failure.message,
        )
        failed = sum(self._recent)
        if len(self._recent) == self.window and failed > self.limit * self.window:
            raise RolloutsKeepFailing(
                f"{failed} of the last {self.window} rollouts failed (the limit is {self.limit:.0%}; failures by "
                f"kind so far: {dict(self.kinds)}); last: {failure.sample}: {failure.kind}: {failure.message}. "
                "A fault that hits most rollouts is the job's: fix it and resume from the last checkpoint"
            )
