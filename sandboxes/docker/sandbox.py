"""One docker sandbox: a long-lived, locked-down container with a warm interpreter, one call at a time.

A :class:`DockerSandbox` owns one container started from the sandbox image
(:mod:`sandboxes.image`) with the warm interpreter (:mod:`sandboxes.docker.worker`) as its
only process (policy: :mod:`sandboxes.docker.policy`; starting and removing it:
:mod:`sandboxes.docker.engine`; the frames: :mod:`sandboxes.docker.channel`).

Health: when the worker stops answering (the container died, was killed from
outside, or the program broke it), the call returns ``sandbox_failed=True`` with
the container's state in ``stderr``, and the sandbox starts a replacement
container at once; its next call runs there. A program's own failures (crash,
timeout, flood, out of memory, a work dir it left unwritable) are ordinary results,
never sandbox failures. So is a worker killed by its program, which only the exec
transport allows (there the worker is not the container's PID 1, and the program
runs as its uid): the container still runs, the call is the program's ``Killed``,
and the container is replaced for the next call. Every sandbox failure names the
container it concerns in ``extra["container"]``.
"""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any

from sandboxes.base import KILLED, SANDBOX_ERROR, ExecResult, Sandbox
from sandboxes.docker import engine
from sandboxes.docker.policy import DockerConfig
from sandboxes.errors import classify


class DockerSandbox(Sandbox):
    """One container with a warm interpreter; runs one call at a time.

    A sandbox whose container failed replaces it by itself (in the background,
    right after the failure) and counts the replacement in :attr:`replacements`.
    """

    backend = "docker"

    def __init__(self, config: DockerConfig | None = None, *, client: Any = None, **options: Any) -> None:
        self.config = replace(config or DockerConfig(), **options)
        self._client = client
        self._image = self.config.image
        self._current: engine.Container | None = None
        self.dropped: list[str] = []  #: short ids of the containers dropped as broken, oldest first
        self._replacing: asyncio.Task[engine.Container] | None = None
        self._removals: set[asyncio.Future[None]] = set()  #: removals of dropped containers still under way
        self._lock = asyncio.Lock()
        self._closed = False
        self.replacements = 0
        self.calls = 0
        self.cold_start: float | None = None

    # lifecycle -------------------------------------------------------------

    async def start(self) -> DockerSandbox:
        """Start the container now (acquire does; a bare sandbox also starts on its first call)."""
        await self._ensure()
        return self

    @property
    def container_id(self) -> str | None:
        return self._current.container.id if self._current else None

    @property
    def healthy(self) -> bool:
        return self._current is not None and self._replacing is None and not self._closed

    async def _ensure(self) -> engine.Container:
        if self._closed:
            raise RuntimeError("DockerSandbox is closed")
        if self._replacing is not None:  # kept in _replacing while awaited, so that close() removes it too
            self._current = await self._replacing
            self._replacing = None
        if self._current is None:
            self._current = await self._new_container()
        return self._current

    async def _new_container(self) -> engine.Container:
        if self._client is None:
            self._client = await engine.in_thread(engine.client)
        if self._image is None:
            from sandboxes.image import image_tag

            self._image = image_tag()
        current = await engine.start_container(self._client, self.config, self._image)
        self.cold_start = current.cold_start
        return current

    async def _ready(self) -> engine.Container:
        """The container for a call, waiting at most ``ready_timeout`` for one being (re)started.

        Raises :class:`_NotReady` past it (the start goes on in the background, for a later call).
        """
        if self._closed:
            raise RuntimeError("DockerSandbox is closed")
        if self._replacing is None:
            if self._current is not None:
                return self._current
            self._replacing = asyncio.ensure_future(self._new_container())
        task = self._replacing
        done, _ = await asyncio.wait({task}, timeout=self.config.ready_timeout)
        if not done:
            raise _NotReady
        self._replacing = None
        self._current = task.result()
        return self._current

    def _fail(self) -> None:
        """Drop the broken container and start its replacement in the background."""
        broken, self._current = self._current, None
        if broken is not None:
            self.dropped.append(broken.short_id)
            broken.channel.close()
            removal = asyncio.get_running_loop().run_in_executor(engine.EXECUTOR, engine.remove, broken.container)
            self._removals.add(removal)  # close() waits for it: the pool closes the engine client after close()
            removal.add_done_callback(self._removals.discard)
        if not self._closed:
            self.replacements += 1
            self._replacing = asyncio.ensure_future(self._new_container())

    async def reset(self) -> None:
        """Kill every process the programs left, empty the work and temp dirs, forget session state."""
        async with self._lock:
            if self._closed:
                return
            try:
                current = await self._ensure()
                answer = await asyncio.wait_for(current.channel.request({"op": "reset"}), 10 + self.config.grace)
                if not answer.get("ok"):
                    raise RuntimeError(str(answer))
            except Exception:  # noqa: BLE001 - whatever broke, the container is not trusted again
                self._fail()

    async def ping(self) -> bool:
        """Whether the worker answers now (False also starts a replacement)."""
        async with self._lock:
            try:
                current = await self._ensure()
                return bool((await asyncio.wait_for(current.channel.request({"op": "ping"}), 5)).get("ok"))
            except Exception:  # noqa: BLE001
                self._fail()
                return False

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        containers = []
        if self._replacing is not None:
            try:
                containers.append(await self._replacing)
            except Exception:  # noqa: BLE001 - a failed replacement left nothing behind
                pass
            self._replacing = None
        if self._current is not None:
            containers.append(self._current)
            self._current = None
        for current in containers:
            current.channel.close()
            await engine.in_thread(engine.remove, current.container)
        await asyncio.gather(*self._removals, return_exceptions=True)

    # running ---------------------------------------------------------------

    async def run_python(
        self,
        code: str,
        *,
        timeout: float = 10.0,
        stdin: str | bytes = b"",
        files: dict[str, str | bytes] | None = None,
    ) -> ExecResult:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        request = {
            "op": "run",
            "code": code,
            "timeout": timeout,
            "max_output": self.config.max_output,
            "stdin": base64.b64encode(stdin.encode() if isinstance(stdin, str) else stdin).decode(),
            "files": {
                _check_name(n): base64.b64encode(c.encode() if isinstance(c, str) else c).decode()
                for n, c in (files or {}).items()
            },
        }
        async with self._lock:
            start = time.monotonic()
            self.calls += 1
            try:
                current = await self._ready()
            except _NotReady:
                return self._failed(
                    f"the sandbox container is being replaced and was not ready within {self.config.ready_timeout:g} s "
                    "(the engine is slow or the machine overloaded); the program did not run",
                    start,
                    self._last_dropped,
                )
            except Exception as exc:  # noqa: BLE001 - no container could be started
                self._current = None
                return self._failed(
                    f"no sandbox container could be started: {type(exc).__name__}: {exc}",
                    start,
                    self._last_dropped,
                )
            try:
                # a worker still waiting for the last call's processes to exit takes this one after them, and one
                # whose clean parent a program killed takes it after a new one's imports (as long as a start)
                wait = timeout + self.config.grace + 1 + (self.config.exit_wait if current.exiting else 0)
                wait += self.config.start_timeout if current.parent_lost else 0
                answer = await asyncio.wait_for(current.channel.request(request), wait)
            except asyncio.CancelledError:  # the caller gave up mid-call: the stream is out of step, start afresh
                self._fail()
                raise
            except (TimeoutError, OSError, EOFError, asyncio.IncompleteReadError, ValueError) as exc:
                lost = not isinstance(exc, asyncio.TimeoutError)
                why = "connection lost" if lost else "did not answer in time"
                try:
                    status, state = await asyncio.wait_for(engine.in_thread(engine.describe, current.container), 3)
                except TimeoutError:
                    status, state = None, "state unknown: the engine did not answer within 3 s"
                log = current.channel.log.decode("utf-8", "replace").strip()[-500:]
                self._fail()
                if lost and status == "running" and self.config.transport == "exec":
                    return self._worker_killed(start, current)
                detail = f"the sandbox container {current.short_id} failed ({why}; {state})"
                return self._failed(detail + (f"\nworker log: {log}" if log else ""), start, current.short_id)
            if "error" in answer:
                self._fail()
                return self._failed(f"the sandbox worker failed: {answer['error']}", start, current.short_id)
            current.exiting = bool(answer.get("exiting"))
            current.parent_lost = bool(answer.get("parent_lost"))
        return self._result(answer, start, current)

    @property
    def _last_dropped(self) -> str | None:
        """The container dropped last (the one a call waiting for its replacement concerns), if any."""
        return self.dropped[-1] if self.dropped else None

    @staticmethod
    def _extra(container: str | None, **more: Any) -> dict[str, Any]:
        """A result's ``extra``: where it ran (the backend, its isolation, the container) and ``more``."""
        return {"backend": "docker", "isolation": "container", "container": container, **more}

    def _worker_killed(self, start: float, current: engine.Container) -> ExecResult:
        """The exec transport's worker ended while its container runs: only the program (same uid) can do that."""
        return ExecResult(
            ok=False,
            stderr=(
                "sandbox: the program killed the sandbox's worker process (the process that runs it); its output "
                "is lost and the sandbox starts afresh for the next call (files and processes gone)\n"
            ),
            exit_code=None,
            error_kind=KILLED,
            duration=time.monotonic() - start,
            extra=self._extra(current.short_id, worker_killed=True),
        )

    def _failed(self, message: str, start: float, container: str | None) -> ExecResult:
        return ExecResult(
            ok=False,
            stderr=message,
            exit_code=None,
            error_kind=SANDBOX_ERROR,
            duration=time.monotonic() - start,
            sandbox_failed=True,
            extra=self._extra(container, replacements=self.replacements),
        )

    def _result(self, answer: dict[str, Any], start: float, current: engine.Container) -> ExecResult:
        stdout = base64.b64decode(answer["stdout"]).decode("utf-8", "replace")
        stderr = base64.b64decode(answer["stderr"]).decode("utf-8", "replace")
        timed_out, exceeded = bool(answer["timed_out"]), bool(answer["output_exceeded"])
        exit_code = answer["exit_code"]
        kind = answer.get("error_kind") or classify(  # the worker names it when the program could not start
            exit_code, stderr, timed_out=timed_out, output_exceeded=exceeded, oom_killed=bool(answer.get("oom_killed"))
        )
        extra = self._extra(current.short_id, worker_duration=answer.get("duration"))
        if exceeded:
            extra["truncated_at_bytes"] = self.config.max_output
        if self.config.stateful:
            extra["state_lost"] = bool(answer.get("state_lost"))
        return ExecResult(
            ok=kind is None,
            stdout=stdout,
            stderr=stderr,
            exit_code=exit_code,
            error_kind=kind,
            duration=time.monotonic() - start,
            extra=extra,
        )


class _NotReady(Exception):
    """No container became ready for a call within ``ready_timeout``."""


def _check_name(name: str) -> str:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts:
        raise ValueError(f"file name {name!r} must be a relative path inside the sandbox work dir")
    return name
