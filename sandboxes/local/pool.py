"""The local pool: :class:`LocalBackend` hands out :class:`~sandboxes.local.sandbox.LocalSandbox` objects."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from sandboxes.base import Backend, Sandbox

logger = logging.getLogger(__name__)


@functools.cache
def _warn_missing(python: str, missing: tuple[str, ...]) -> None:
    """Say once per process which of a runtime's modules ``python`` lacks."""
    logger.warning(
        "local sandbox: the interpreter %s cannot import %s, which the programs' runtime has: a program importing "
        "them fails here (install them, e.g. `pip install -r sandboxes/reference_runtime.txt`, or use the docker "
        "backend with its image: docs/sandboxes.md)",
        python,
        ", ".join(missing),
    )


class LocalBackend(Backend):
    """Pool of :class:`~sandboxes.local.sandbox.LocalSandbox` objects.

    A released sandbox is reset (leftover processes killed, work dir emptied) and kept for the next
    :meth:`acquire`, up to ``max_idle`` of them; beyond that it is closed. ``max_idle=None`` (the default) keeps
    as many as were ever held at once (in use or prewarmed), so a steady load of N rollouts in flight reuses N
    sandboxes instead of making new ones; an idle sandbox holds a directory and a reserved uid, no process.
    A new backend removes the sandbox directories of dead processes (SIGKILL runs no clean-up;
    :func:`~sandboxes.local.sandbox.reap_orphan_dirs`). Options are those of
    :class:`~sandboxes.local.policy.LocalConfig`. ``require_modules`` are modules the programs' runtime should
    have (:mod:`sandboxes.runtimes`): those the interpreter cannot import are named in a warning when the backend
    is made and in :meth:`describe` (``missing_modules``), which every eval log records.

    Raises:
        IsolationUnavailable: programs could not be isolated here (decided now, not at the first acquire).
    """

    name = "local"

    def __init__(self, *, max_idle: int | None = None, require_modules: tuple[str, ...] = (), **options: Any) -> None:
        from sandboxes.local.policy import missing_modules
        from sandboxes.local.sandbox import LocalConfig, choose_isolation, reap_orphan_dirs

        if max_idle is not None and max_idle < 0:
            raise ValueError(f"max_idle must be >= 0, not {max_idle!r}")
        self.config = LocalConfig(**options)  # validates the options now, not at the first acquire
        self.choice = choose_isolation(self.config)
        self.missing_modules = missing_modules(self.config.python, tuple(require_modules)) if require_modules else ()
        if self.missing_modules:
            _warn_missing(self.config.python, self.missing_modules)
        self.max_idle = max_idle
        self._idle: list[Sandbox] = []
        self._all: set[Sandbox] = set()
        self._peak = 0  #: the most sandboxes this backend has held at once (in use and prewarmed idle)
        self._closed = False
        reap_orphan_dirs()

    async def _new(self) -> Sandbox:
        from sandboxes.local.sandbox import LocalSandbox

        # constructing probes bwrap once per process (a few subprocess calls): off the event loop
        return await asyncio.to_thread(LocalSandbox, self.config)

    async def prewarm(self, n: int | None = None) -> None:
        for _ in range(max(0, (n or 1) - len(self._idle))):
            sandbox = await self._new()
            self._all.add(sandbox)
            self._idle.append(sandbox)
        self._peak = max(self._peak, len(self._all))

    async def acquire(self) -> Sandbox:
        if self._closed:
            raise RuntimeError("LocalBackend is shut down")
        if self._idle:
            return self._idle.pop()
        sandbox = await self._new()
        self._all.add(sandbox)
        self._peak = max(self._peak, len(self._all))
        return sandbox

    @property
    def idle_limit(self) -> int:
        """How many released sandboxes are kept: ``max_idle``, or the most held at once when it is None."""
        return self._peak if self.max_idle is None else self.max_idle

    async def release(self, sandbox: Sandbox) -> None:
        if sandbox not in self._all:
            raise ValueError("release() got a sandbox that this backend did not hand out")
        if self._closed or len(self._idle) >= self.idle_limit:
            self._all.discard(sandbox)
            await sandbox.close()
            return
        try:
            await sandbox.reset()
        except Exception:
            logger.exception("resetting a local sandbox failed; closing it")
            self._all.discard(sandbox)
            await sandbox.close()
            return
        self._idle.append(sandbox)

    async def shutdown(self) -> None:
        self._closed = True
        sandboxes, self._all, self._idle = list(self._all), set(), []
        for sandbox in sandboxes:
            await sandbox.close()

    def describe(self) -> dict[str, Any]:
        missing = {"missing_modules": list(self.missing_modules)} if self.missing_modules else {}
        return {"backend": "local", **self.choice.to_dict(), **missing}
