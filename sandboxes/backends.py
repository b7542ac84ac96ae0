"""The backend registry: where sandboxes come from.

A :class:`Backend` hands out one :class:`~sandboxes.base.Sandbox` per concurrent
rollout and takes it back afterwards. The Inspect provider, the trainer and the
CLI ask :func:`get_backend` for one by name and never import a backend module
themselves:

- ``"local"``: :class:`LocalBackend`, child processes on this machine (:mod:`sandboxes.local`);
- ``"docker"``: ``DockerBackend`` of :mod:`sandboxes.docker_backend`, one container per rollout;
- ``"auto"`` or ``None``: docker when a daemon answers and the sandbox image is
  present, else local, with one warning line saying how to get docker.

The docker module is imported lazily, so that the local backend works on a machine
without the ``docker`` SDK or daemon.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from typing import Any

from sandboxes.base import Sandbox

logger = logging.getLogger(__name__)

BACKEND_NAMES = ("auto", "local", "docker")

_auto_warned = False


class Backend(abc.ABC):
    """A factory and pool of sandboxes: one per concurrent rollout."""

    #: Name the registry knows this backend by.
    name: str = "abstract"

    @abc.abstractmethod
    async def acquire(self) -> Sandbox:
        """A clean sandbox for one rollout (a pooled one when available)."""

    @abc.abstractmethod
    async def release(self, sandbox: Sandbox) -> None:
        """Take back a sandbox from :meth:`acquire`: reset it for reuse, or close it."""

    @abc.abstractmethod
    async def shutdown(self) -> None:
        """Close every sandbox this backend made; the backend is unusable afterwards."""

    async def prewarm(self, n: int | None = None) -> None:  # noqa: B027 - optional hook, default nothing
        """Make sandboxes ahead of the first :meth:`acquire` (default: nothing)."""

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()


class LocalBackend(Backend):
    """Pool of :class:`~sandboxes.local.LocalSandbox` objects.

    A released sandbox is reset (leftover processes killed, work dir emptied) and
    kept for the next :meth:`acquire`, up to ``max_idle`` of them; beyond that it is
    closed. Options are those of :class:`~sandboxes.local.LocalConfig`.
    """

    name = "local"

    def __init__(self, *, max_idle: int = 8, **options: Any) -> None:
        from sandboxes.local import LocalConfig

        self.config = LocalConfig(**options)  # validates the options now, not at the first acquire
        self.max_idle = max_idle
        self._idle: list[Sandbox] = []
        self._all: set[Sandbox] = set()
        self._closed = False

    async def _new(self) -> Sandbox:
        from sandboxes.local import LocalSandbox

        # constructing probes bwrap once per process (a few subprocess calls): off the event loop
        return await asyncio.to_thread(LocalSandbox, self.config)

    async def prewarm(self, n: int | None = None) -> None:
        for _ in range(max(0, (n or 1) - len(self._idle))):
            sandbox = await self._new()
            self._all.add(sandbox)
            self._idle.append(sandbox)

    async def acquire(self) -> Sandbox:
        if self._closed:
            raise RuntimeError("LocalBackend is shut down")
        if self._idle:
            return self._idle.pop()
        sandbox = await self._new()
        self._all.add(sandbox)
        return sandbox

    async def release(self, sandbox: Sandbox) -> None:
        if sandbox not in self._all:
            raise ValueError("release() got a sandbox that this backend did not hand out")
        if self._closed or len(self._idle) >= self.max_idle:
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


def _docker_module() -> Any | None:
    """The docker backend module, or None when it (or the docker SDK) cannot be imported."""
    try:
        from sandboxes import docker_backend
    except ImportError as exc:
        logger.debug("docker backend unavailable: %s", exc)
        return None
    return docker_backend


def docker_ready() -> bool:
    """Whether the docker backend can run here: module importable, daemon answering, image present."""
    module = _docker_module()
    if module is None:
        return False
    try:
        return bool(module.docker_available() and module.image_present())
    except Exception as exc:  # an engine that answers strangely counts as absent
        logger.debug("docker check failed: %s", exc)
        return False


def resolve_backend_name(name: str | None) -> str:
    """``"local"`` or ``"docker"`` for a requested name (``None``/``"auto"`` decided here)."""
    global _auto_warned
    if name is not None and name not in BACKEND_NAMES:
        raise ValueError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    if name in ("local", "docker"):
        return name
    if docker_ready():
        return "docker"
    if not _auto_warned:
        _auto_warned = True
        logger.warning(
            "sandbox backend 'auto': no Docker engine with the sandbox image here, using the weaker local "
            "backend. For docker: start an engine and build the image (see docs/docker.md), "
            "or pass --backend local to silence this."
        )
    return "local"


def get_backend(name: str | None = None, **options: Any) -> Backend:
    """A backend by name: ``"local"``, ``"docker"``, or ``"auto"``/``None`` (docker when ready, else local).

    ``options`` go to the backend's constructor (for local: ``max_idle`` and the
    fields of :class:`~sandboxes.local.LocalConfig`; for docker: those of
    ``DockerBackend``). An option the backend does not know is an error.
    """
    chosen = resolve_backend_name(name)
    if chosen == "local":
        try:
            return LocalBackend(**options)
        except TypeError as exc:
            raise ValueError(f"bad option for the local sandbox backend: {exc}") from None
    module = _docker_module()
    if module is None:
        raise RuntimeError(
            "the docker sandbox backend cannot be imported (is the `docker` Python package installed?); "
            "use --backend local"
        )
    try:
        return module.DockerBackend(**options)
    except TypeError as exc:
        raise ValueError(f"bad option for the docker sandbox backend: {exc}") from None
