"""The docker pool: a bounded warm pool of :class:`~sandboxes.docker.sandbox.DockerSandbox` containers."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, replace
from typing import Any

from sandboxes.base import Backend, Sandbox, SandboxError
from sandboxes.docker import engine
from sandboxes.docker.policy import (
    ACQUIRE_TIMEOUT_ENV,
    MAX_CONTAINERS_ENV,
    DockerConfig,
    default_acquire_timeout,
    default_max_containers,
)
from sandboxes.docker.sandbox import DockerSandbox


class PoolExhausted(SandboxError, TimeoutError):
    """No container of a bounded pool became free within the acquire deadline."""


class DockerBackend(Backend):
    """A bounded warm pool of :class:`DockerSandbox` containers, one per concurrent rollout.

    ``pool_size`` containers are started by :meth:`prewarm` (called by the first
    :meth:`acquire`); more are started on demand, up to ``max_containers`` in all
    (busy and idle together; default :func:`default_max_containers`); further
    acquires wait for a release, for at most ``acquire_timeout`` seconds (default
    :func:`~sandboxes.docker.policy.default_acquire_timeout`), then raise :class:`PoolExhausted`
    naming the bound and how to raise it. :meth:`release` resets a sandbox and keeps it idle
    (or replaces it when it is broken); idle containers beyond ``max_idle`` and those
    idle for more than ``idle_ttl`` seconds are removed (checked at every acquire and
    release, and by :meth:`trim`). :meth:`shutdown` removes every container.
    """

    name = "docker"

    def __init__(
        self,
        config: DockerConfig | None = None,
        *,
        pool_size: int = 0,
        max_containers: int | None = None,
        max_idle: int | None = None,
        idle_ttl: float = 300.0,
        acquire_timeout: float | None = None,
        **options: Any,
    ) -> None:
        self.config = replace(config or DockerConfig(), **options)
        max_containers = default_max_containers() if max_containers is None else max_containers
        if max_containers < 1:
            raise ValueError(f"max_containers must be >= 1, not {max_containers!r}")
        if not 0 <= pool_size <= max_containers:
            raise ValueError(f"pool_size must be between 0 and max_containers ({max_containers}), not {pool_size!r}")
        if max_idle is not None and max_idle < 0:
            raise ValueError(f"max_idle must be >= 0, not {max_idle!r}")
        if idle_ttl <= 0:
            raise ValueError(f"idle_ttl must be positive seconds, not {idle_ttl!r}")
        acquire_timeout = default_acquire_timeout() if acquire_timeout is None else acquire_timeout
        if acquire_timeout <= 0:
            raise ValueError(f"acquire_timeout must be positive seconds, not {acquire_timeout!r}")
        self.acquire_timeout = acquire_timeout
        self.reaped: list[str] = []  #: containers of dead processes removed when this backend met the engine
        self.pool_size = pool_size
        self.max_containers = max_containers
        self.max_idle = max_containers if max_idle is None else min(max_idle, max_containers)
        self.idle_ttl = idle_ttl
        self._client: Any = None
        self._idle: list[tuple[float, DockerSandbox]] = []  #: (idle since, sandbox), oldest first
        self._busy: set[DockerSandbox] = set()
        self._slots = asyncio.Semaphore(max_containers)
        self._warmed = False
        self._closed = False

    async def _get_client(self) -> Any:
        if self._client is None:
            try:
                self._client = await asyncio.to_thread(engine.client)
                await asyncio.to_thread(self._client.ping)
                self.reaped = await asyncio.to_thread(engine.reap_orphans, self._client)
            except Exception as exc:
                self._client = None
                raise RuntimeError(
                    f"the docker backend needs a running Docker engine ({type(exc).__name__}: {exc}); start one "
                    "(sandboxes/ci_docker.sh) or use the local backend"
                ) from exc
            if self.config.image is None:
                from sandboxes.image import image_tag

                self.config = replace(self.config, image=image_tag())
            from sandboxes.image import build_command, image_exists

            if not await asyncio.to_thread(image_exists, self.config.image):
                raise RuntimeError(
                    f"the sandbox image {self.config.image} is not present: build it with "
                    f"`{build_command(self.config.image)}`"
                )
        return self._client

    async def _new_sandbox(self) -> DockerSandbox:
        sandbox = DockerSandbox(self.config, client=await self._get_client())
        return await sandbox.start()

    @property
    def containers(self) -> int:
        """Sandboxes (containers) this pool holds now, busy and idle."""
        return len(self._busy) + len(self._idle)

    async def prewarm(self, n: int | None = None) -> None:
        """Start ``n`` (default ``pool_size``) idle containers concurrently, within ``max_containers``."""
        self._warmed = True
        n = self.pool_size if n is None else n
        n = min(n, self.max_containers - self.containers, self.max_idle - len(self._idle))
        if n > 0:
            await self._get_client()
            made = await asyncio.gather(*(self._new_sandbox() for _ in range(n)), return_exceptions=True)
            now = time.monotonic()
            # the ones that started are kept (not left running outside the pool when another failed)
            self._idle.extend((now, sandbox) for sandbox in made if isinstance(sandbox, DockerSandbox))
            failed = [exc for exc in made if isinstance(exc, BaseException)]
            if failed:
                raise failed[0]

    async def trim(self) -> int:
        """Remove idle containers beyond ``max_idle`` or idle for longer than ``idle_ttl``; returns how many."""
        cutoff = time.monotonic() - self.idle_ttl
        fresh = [(t, s) for t, s in self._idle if t >= cutoff]
        gone = [s for t, s in self._idle if t < cutoff]
        excess = len(fresh) - self.max_idle
        if excess > 0:  # the longest idle go first
            gone += [s for _, s in fresh[:excess]]
            fresh = fresh[excess:]
        self._idle = fresh
        await asyncio.gather(*(s.close() for s in gone), return_exceptions=True)
        return len(gone)

    async def acquire(self) -> DockerSandbox:
        if self._closed:
            raise RuntimeError("DockerBackend is shut down")
        if not self._warmed:
            await self.prewarm()
        await self.trim()
        try:
            await asyncio.wait_for(self._slots.acquire(), self.acquire_timeout)
        except TimeoutError:
            raise PoolExhausted(
                f"no docker sandbox became free within {self.acquire_timeout:g} s: the pool is bounded at "
                f"{self.max_containers} containers and all are in use ({len(self._busy)} busy). Release sandboxes "
                f"you are done with, or raise the bound (max_containers=N, or {MAX_CONTAINERS_ENV}=N; each "
                f"container may use up to {self.config.memory} of memory), or wait longer (acquire_timeout=S, "
                f"or {ACQUIRE_TIMEOUT_ENV}=S)"
            ) from None
        try:
            sandbox = self._idle.pop()[1] if self._idle else await self._new_sandbox()
        except BaseException:
            self._slots.release()
            raise
        self._busy.add(sandbox)
        return sandbox

    async def release(self, sandbox: Sandbox) -> None:
        if not isinstance(sandbox, DockerSandbox) or sandbox not in self._busy:
            raise ValueError("release() takes a sandbox acquired from this backend and not yet released")
        self._busy.discard(sandbox)
        try:
            if self._closed or self.max_idle == 0:
                await sandbox.close()
                return
            await sandbox.reset()  # a broken one starts its replacement here
            self._idle.append((time.monotonic(), sandbox))
            await self.trim()
        finally:
            self._slots.release()

    async def shutdown(self) -> None:
        self._closed = True
        sandboxes = [*(s for _, s in self._idle), *self._busy]
        self._idle.clear()
        self._busy.clear()
        await asyncio.gather(*(s.close() for s in sandboxes), return_exceptions=True)
        if self._client is not None:
            self._client.close()
            self._client = None

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "docker",
            "isolation": "container",
            "network": "none",
            "image": self.config.image or engine.default_image(),
            "max_containers": self.max_containers,
        }

    def stats(self) -> dict[str, Any]:
        return {
            "idle": len(self._idle),
            "busy": len(self._busy),
            "max_containers": self.max_containers,
            "max_idle": self.max_idle,
            "acquire_timeout": self.acquire_timeout,
            "config": asdict(self.config),
        }
