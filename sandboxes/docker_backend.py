"""The Docker backend: one long-lived, locked-down container per concurrent rollout.

Each :class:`DockerSandbox` owns one container started from the sandbox image
(:mod:`sandboxes.image`) with the warm interpreter (:mod:`sandboxes.worker`) as its
only process. The host talks to it over the container's attach socket (or, as an
option, the stdin of one long-lived ``docker exec``): a request is a small JSON
frame, and a trivial call costs a fork in the container instead of a new
interpreter. :class:`DockerBackend` keeps a warm pool of such sandboxes, hands one
out per rollout (:meth:`~DockerBackend.acquire`), resets it when it comes back
(:meth:`~DockerBackend.release`) and removes them all on :meth:`~DockerBackend.shutdown`.

Isolation by default: no network (``network_mode=none``), a non-root user, a
read-only root file system with size-capped tmpfs work and temp dirs, memory
(no swap), pids and cpu limits, ``no-new-privileges``, every capability dropped,
no host mounts, and an environment of our own (nothing of the host's).

Health: when the worker stops answering (the container died, was killed from
outside, or the program broke it), the call returns ``sandbox_failed=True`` with
the container's state in ``stderr``, and the sandbox starts a replacement
container at once; its next call runs there. A program's own failures (crash,
timeout, flood, out of memory) are ordinary results, never sandbox failures.

Everything of the ``docker`` SDK is synchronous; it is called in threads, except
the attach socket, which is read with asyncio directly.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import json
import logging
import os
import socket
import struct
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from sandboxes.backends import Backend
from sandboxes.base import SANDBOX_ERROR, ExecResult, Sandbox
from sandboxes.errors import classify

logger = logging.getLogger(__name__)

WORKER_SOURCE = Path(__file__).with_name("worker.py").read_text()
#: Label on every container this backend starts (``docker ps --filter label=...`` finds leftovers).
LABEL = "cleaner.sandbox"
WORKDIR = "/work"
_LEN = struct.Struct(">I")
_DOCKER_FRAME = struct.Struct(">BxxxI")


@dataclass(frozen=True)
class DockerConfig:
    """How the containers of a :class:`DockerBackend` are made and talked to."""

    image: str | None = None  #: image tag; default: the tag of the current recipe (sandboxes.image)
    memory: str = "512m"  #: memory limit, swap included (no swap)
    cpus: float = 1.0  #: cpu quota in cores
    pids: int = 64  #: process limit (fork bombs stop here)
    workdir_size: str = "64m"  #: tmpfs size of the work dir
    tmp_size: str = "16m"  #: tmpfs size of /tmp
    stateful: bool = False  #: keep variables across calls (as in a notebook) instead of a fresh namespace
    fresh_workdir: bool = False  #: empty /work before every call (default: files last until the sandbox is reset)
    transport: Literal["attach", "exec"] = "attach"  #: attach socket of the container, or one long-lived exec
    max_output: int = 4 * 1024 * 1024  #: bytes per stream; a program writing more is stopped
    preload: tuple[str, ...] = ("numpy", "sympy")  #: modules imported once by the warm interpreter
    user: str = "1000:1000"
    start_timeout: float = 60.0  #: seconds for a container to start and answer its first ping
    grace: float = 1.0  #: seconds past a call's timeout before the sandbox itself is declared dead
    env: dict[str, str] = field(default_factory=dict)  #: added to the container's environment

    def __post_init__(self) -> None:
        if self.transport not in ("attach", "exec"):
            raise ValueError(f"DockerConfig.transport must be 'attach' or 'exec', not {self.transport!r}")
        for name in ("cpus", "pids", "max_output", "start_timeout", "grace"):
            if getattr(self, name) <= 0:
                raise ValueError(f"DockerConfig.{name} must be positive, not {getattr(self, name)!r}")


# ------------------------------------------------------------------ engine helpers


def _client(timeout: int = 60) -> Any:
    import docker

    return docker.from_env(timeout=timeout)


def docker_available() -> bool:
    """Whether a Docker engine answers (within a few seconds)."""
    try:
        client = _client(timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - any failure means "no usable engine"
        return False


def image_present(image: str | None = None) -> bool:
    """Whether an engine answers and holds the sandbox image (default: the current recipe's tag)."""
    if not docker_available():
        return False
    from sandboxes.image import image_exists

    try:
        return image_exists(image)
    except Exception:  # noqa: BLE001
        return False


def remove_leftovers() -> int:
    """Remove every container this backend ever started on this engine (crashed runs leave them)."""
    client = _client()
    removed = 0
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        try:
            container.remove(force=True)
            removed += 1
        except Exception:  # noqa: BLE001 - already gone
            pass
    return removed


def _container_spec(config: DockerConfig, image: str) -> dict[str, Any]:
    """Keyword arguments of ``containers.create`` for one sandbox container: the isolation lives here."""
    worker_config = {
        "preload": list(config.preload),
        "workdir": WORKDIR,
        "scratch": ["/tmp", "/dev/shm"],
        "stateful": config.stateful,
        "fresh_workdir": config.fresh_workdir,
        "max_output": config.max_output,
        "contained": True,
    }
    worker_cmd = ["python3", "-c", WORKER_SOURCE, json.dumps(worker_config)]
    env = {
        "HOME": WORKDIR,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MPLCONFIGDIR": "/tmp",
        **config.env,
    }
    uid = config.user.split(":")[0]
    return {
        "image": image,
        "command": worker_cmd if config.transport == "attach" else ["sleep", "infinity"],
        "user": config.user,
        "environment": env,
        "working_dir": WORKDIR,
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {
            WORKDIR: f"rw,nosuid,nodev,size={config.workdir_size},mode=0700,uid={uid},gid={uid}",
            "/tmp": f"rw,nosuid,nodev,noexec,size={config.tmp_size},mode=1777",
        },
        "mem_limit": config.memory,
        "memswap_limit": config.memory,
        "pids_limit": config.pids,
        "nano_cpus": int(config.cpus * 1e9),
        "security_opt": ["no-new-privileges"],
        "cap_drop": ["ALL"],
        "ipc_mode": "private",
        "init": config.transport == "exec",  # a reaper for the exec transport; the attach worker reaps itself
        "stdin_open": config.transport == "attach",
        "tty": False,
        "labels": {LABEL: "1"},
        "detach": True,
        "_worker_cmd": worker_cmd,
    }


# ------------------------------------------------------------------ one container


class _Channel:
    """Request/response framing over a hijacked docker stream (stdout frames demultiplexed)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._stdout = bytearray()
        self._next_id = 0
        self.log = bytearray()  #: the worker's own stderr (tail), for diagnosing a failure

    async def _need(self, n: int) -> None:
        while len(self._stdout) < n:
            head = await self.reader.readexactly(_DOCKER_FRAME.size)
            kind, size = _DOCKER_FRAME.unpack(head)
            payload = await self.reader.readexactly(size)
            if kind == 2:
                self.log += payload
                del self.log[:-4000]
            else:
                self._stdout += payload

    async def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Send one request and read its answer (a mismatched answer means the stream is out of step)."""
        self._next_id += 1
        obj = {**obj, "id": self._next_id}
        body = json.dumps(obj).encode()
        self.writer.write(_LEN.pack(len(body)) + body)
        await self.writer.drain()
        await self._need(4)
        size = _LEN.unpack(self._stdout[:4])[0]
        await self._need(4 + size)
        frame = bytes(self._stdout[4 : 4 + size])
        del self._stdout[: 4 + size]
        answer = json.loads(frame)
        if answer.get("id") != obj["id"]:
            raise ValueError(f"the worker answered request {answer.get('id')} to request {obj['id']}")
        return answer

    def close(self) -> None:
        self.writer.close()


class _Container:
    """A started sandbox container with its open channel to the worker."""

    def __init__(self, container: Any, channel: _Channel, started: float) -> None:
        self.container = container
        self.channel = channel
        self.cold_start = started

    @property
    def short_id(self) -> str:
        return str(self.container.id)[:12]


async def _start_container(client: Any, config: DockerConfig, image: str) -> _Container:
    """Create and start a container, open its channel and wait for the worker's first answer."""
    start = time.monotonic()
    spec = _container_spec(config, image)
    worker_cmd = spec.pop("_worker_cmd")
    container = await asyncio.to_thread(client.containers.create, **spec)
    try:
        await asyncio.to_thread(container.start)
        if config.transport == "attach":
            raw = await asyncio.to_thread(
                client.api.attach_socket, container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
        else:
            exec_id = (
                await asyncio.to_thread(
                    client.api.exec_create, container.id, worker_cmd, stdin=True, user=config.user, workdir=WORKDIR
                )
            )["Id"]
            raw = await asyncio.to_thread(client.api.exec_start, exec_id, socket=True)
        sock = getattr(raw, "_sock", raw)
        if not isinstance(sock, socket.socket):
            raise RuntimeError(
                f"the docker transport gave a {type(sock).__name__}, not a socket (TLS or ssh hosts "
                "are not supported by the docker sandbox; use the local unix socket)"
            )
        reader, writer = await asyncio.open_connection(sock=sock)
        channel = _Channel(reader, writer)
        answer = await asyncio.wait_for(channel.request({"op": "ping"}), config.start_timeout)
        if not answer.get("ok"):
            raise RuntimeError(f"the sandbox worker did not start: {answer}")
        missing = set(config.preload) - set(answer.get("preloaded", []))
        if missing:
            logger.warning("the sandbox image lacks %s (the worker could not import it)", ", ".join(sorted(missing)))
        return _Container(container, channel, time.monotonic() - start)
    except BaseException:
        await asyncio.to_thread(_remove, container)
        raise


def _remove(container: Any) -> None:
    try:
        container.remove(force=True)
    except Exception:  # noqa: BLE001 - already gone
        pass


def _describe(container: Any) -> str:
    """What the engine says about a container that stopped answering."""
    try:
        container.reload()
        state = container.attrs.get("State", {})
        parts = [f"status={state.get('Status')}"]
        if state.get("Status") != "running":
            parts.append(f"exit code={state.get('ExitCode')}")
        if state.get("OOMKilled"):
            parts.append("OOMKilled")
        if state.get("Error"):
            parts.append(f"error={state['Error']}")
        return ", ".join(parts)
    except Exception as exc:  # noqa: BLE001 - the container may be gone altogether
        return f"container unavailable ({type(exc).__name__}: {exc})"


# ------------------------------------------------------------------ the sandbox


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
        self._current: _Container | None = None
        self._replacing: asyncio.Task[_Container] | None = None
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

    async def _ensure(self) -> _Container:
        if self._closed:
            raise RuntimeError("DockerSandbox is closed")
        if self._replacing is not None:
            task, self._replacing = self._replacing, None
            self._current = await task
        if self._current is None:
            self._current = await self._new_container()
        return self._current

    async def _new_container(self) -> _Container:
        if self._client is None:
            self._client = await asyncio.to_thread(_client)
        if self._image is None:
            from sandboxes.image import image_tag

            self._image = image_tag()
        current = await _start_container(self._client, self.config, self._image)
        self.cold_start = current.cold_start
        _live_containers[current.container.id] = current.container
        return current

    def _fail(self) -> None:
        """Drop the broken container and start its replacement in the background."""
        broken, self._current = self._current, None
        if broken is not None:
            broken.channel.close()
            _live_containers.pop(broken.container.id, None)
            asyncio.get_running_loop().run_in_executor(None, _remove, broken.container)
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
            _live_containers.pop(current.container.id, None)
            await asyncio.to_thread(_remove, current.container)

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
                current = await self._ensure()
            except Exception as exc:  # noqa: BLE001 - no container could be started
                self._current = None
                return self._failed(f"no sandbox container could be started: {type(exc).__name__}: {exc}", start)
            try:
                answer = await asyncio.wait_for(current.channel.request(request), timeout + self.config.grace + 1)
            except asyncio.CancelledError:  # the caller gave up mid-call: the stream is out of step, start afresh
                self._fail()
                raise
            except (TimeoutError, OSError, EOFError, asyncio.IncompleteReadError, ValueError) as exc:
                why = "did not answer in time" if isinstance(exc, asyncio.TimeoutError) else "connection lost"
                state = await asyncio.to_thread(_describe, current.container)
                log = current.channel.log.decode("utf-8", "replace").strip()[-500:]
                self._fail()
                detail = f"the sandbox container {current.short_id} failed ({why}; {state})"
                return self._failed(detail + (f"\nworker log: {log}" if log else ""), start)
            if "error" in answer:
                self._fail()
                return self._failed(f"the sandbox worker failed: {answer['error']}", start)
        return self._result(answer, start, current)

    def _failed(self, message: str, start: float) -> ExecResult:
        return ExecResult(
            ok=False,
            stderr=message,
            exit_code=None,
            error_kind=SANDBOX_ERROR,
            duration=time.monotonic() - start,
            sandbox_failed=True,
            extra={"backend": "docker", "isolation": "container", "replacements": self.replacements},
        )

    def _result(self, answer: dict[str, Any], start: float, current: _Container) -> ExecResult:
        stdout = base64.b64decode(answer["stdout"]).decode("utf-8", "replace")
        stderr = base64.b64decode(answer["stderr"]).decode("utf-8", "replace")
        timed_out, exceeded = bool(answer["timed_out"]), bool(answer["output_exceeded"])
        exit_code = answer["exit_code"]
        kind = classify(
            exit_code, stderr, timed_out=timed_out, output_exceeded=exceeded, oom_killed=bool(answer.get("oom_killed"))
        )
        extra: dict[str, Any] = {
            "backend": "docker",
            "isolation": "container",
            "container": current.short_id,
            "worker_duration": answer.get("duration"),
        }
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


def _check_name(name: str) -> str:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts:
        raise ValueError(f"file name {name!r} must be a relative path inside the sandbox work dir")
    return name


# ------------------------------------------------------------------ the pool


#: Environment variable that bounds every docker pool of this process (containers, busy and idle together).
MAX_CONTAINERS_ENV = "CLEANER_SANDBOX_MAX_CONTAINERS"


def default_max_containers() -> int:
    """The pool bound when none is given: :data:`MAX_CONTAINERS_ENV`, else twice the cpus (at least 4)."""
    raw = os.environ.get(MAX_CONTAINERS_ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"{MAX_CONTAINERS_ENV}={raw!r}: must be a whole number >= 1")
        return value
    return max(4, 2 * (os.cpu_count() or 1))


def _default_image() -> str:
    from sandboxes.image import image_tag

    return image_tag()


class DockerBackend(Backend):
    """A bounded warm pool of :class:`DockerSandbox` containers, one per concurrent rollout.

    ``pool_size`` containers are started by :meth:`prewarm` (called by the first
    :meth:`acquire`); more are started on demand, up to ``max_containers`` in all
    (busy and idle together; default :func:`default_max_containers`); further
    acquires wait for a release. :meth:`release` resets a sandbox and keeps it idle
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
                self._client = await asyncio.to_thread(_client)
                await asyncio.to_thread(self._client.ping)
            except Exception as exc:
                self._client = None
                raise RuntimeError(
                    f"the docker backend needs a running Docker engine ({type(exc).__name__}: {exc}); start one "
                    "(sandboxes/ci_docker.sh) or use the local backend"
                ) from exc
            if self.config.image is None:
                from sandboxes.image import image_tag

                self.config = replace(self.config, image=image_tag())
            from sandboxes.image import image_exists

            if not await asyncio.to_thread(image_exists, self.config.image):
                raise RuntimeError(
                    f"the sandbox image {self.config.image} is not present: build it with "
                    "`python -m sandboxes.image build`"
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
            made = await asyncio.gather(*(self._new_sandbox() for _ in range(n)))
            now = time.monotonic()
            self._idle.extend((now, sandbox) for sandbox in made)

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
        await self._slots.acquire()
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
            "image": self.config.image or _default_image(),
            "max_containers": self.max_containers,
        }

    def stats(self) -> dict[str, Any]:
        return {
            "idle": len(self._idle),
            "busy": len(self._busy),
            "max_containers": self.max_containers,
            "max_idle": self.max_idle,
            "config": asdict(self.config),
        }


#: Containers started by this process and not yet removed: removed at exit if a run forgot shutdown().
_live_containers: dict[str, Any] = {}


@atexit.register
def _remove_live_containers() -> None:
    for container in list(_live_containers.values()):
        _remove(container)
