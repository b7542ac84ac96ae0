"""Process control of the docker backend: the engine, starting and removing sandbox containers.

Everything of the ``docker`` SDK is synchronous; the coroutines here call it in threads.
Containers started by this process are recorded in :data:`live_containers` and removed at
interpreter exit when a run forgot ``shutdown()``, and when the process is ended by SIGTERM
(a handler is installed with the first container, only where SIGTERM had its default action;
SIGINT ends an asyncio program through ``KeyboardInterrupt``, so the exit path removes them).

Every container says whose it is (:func:`owner_labels`: the owner's pid and its start time, the
host name, the boot id and the pid namespace), so that :func:`reap_orphans` removes those of a
dead process of this project on this host, and never anyone else's.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import Any

from sandboxes.docker.channel import Channel
from sandboxes.docker.policy import LABEL, WORKDIR, DockerConfig, container_spec, worker_command
from sandboxes.owner import OWNER_PID, orphaned, owner_labels

logger = logging.getLogger(__name__)

#: Threads for the engine's synchronous SDK calls, apart from asyncio's default pool (a few threads): a burst
#: of container starts and removals after failures (a chaos loop, a crashed host) does not queue behind it.
#: As many connections to the engine are kept open for them.
ENGINE_THREADS = 64
EXECUTOR = ThreadPoolExecutor(max_workers=ENGINE_THREADS, thread_name_prefix="cleaner-docker")


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in one of the engine's threads."""
    return await asyncio.get_running_loop().run_in_executor(EXECUTOR, functools.partial(fn, *args, **kwargs))


def client(timeout: int = 60) -> Any:
    """A client of the engine, safe to share between :data:`EXECUTOR`'s threads (:func:`_one_connection_pool`)."""
    import docker

    engine = docker.from_env(timeout=timeout, max_pool_size=ENGINE_THREADS)
    _one_connection_pool(engine)
    return engine


def _one_connection_pool(engine: Any) -> None:
    """Make the client keep one pool of connections to a unix socket engine, whatever the URL.

    docker's unix socket adapter keeps a connection pool per request URL, and each container has URLs of its
    own, in a cache of 25 that closes the pool it evicts. With more containers than that being created,
    started and removed by threads at once, a pool another thread still uses is closed under it: its answer
    is lost (``'NoneType' object has no attribute 'qsize'`` as the connection goes back), and a container
    the engine created is left behind, never known to the caller. Every connection of a unix socket goes to
    the same place, so one pool serves them all.
    """
    from docker.transport.unixconn import UnixHTTPAdapter

    for adapter in engine.api.adapters.values():
        if isinstance(adapter, UnixHTTPAdapter):
            get_connection = adapter.get_connection
            adapter.get_connection = lambda url, proxies=None, _get=get_connection: _get("http+docker://engine/")


def docker_available() -> bool:
    """Whether a Docker engine answers (within a few seconds)."""
    try:
        if not _local_socket_answers():
            return False
        engine = client(timeout=5)
        try:
            return bool(engine.ping())
        finally:
            engine.close()
    except Exception:  # noqa: BLE001 - any failure means "no usable engine"
        return False


def _local_socket_answers() -> bool:
    """False when the engine is a unix socket (the default) that nobody listens on; True otherwise.

    docker's client asks the engine for its version while it is being made, and when that fails it leaves its
    socket open for the collector; a machine without an engine would leak one on every check.
    """
    from docker.utils import parse_host  # the client's own reading of DOCKER_HOST and its default

    host = parse_host(os.environ.get("DOCKER_HOST"))
    if not host.startswith("http+unix://"):
        return True  # tcp or ssh: the client's own check
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5)
        try:
            probe.connect(host.removeprefix("http+unix://"))
        except OSError:
            return False
    return True


def image_present(image: str | None = None) -> bool:
    """Whether an engine answers and holds the sandbox image (default: the current recipe's tag)."""
    if not docker_available():
        return False
    from sandboxes.image import image_exists

    try:
        return image_exists(image)
    except Exception:  # noqa: BLE001
        return False


def default_image() -> str:
    from sandboxes.image import image_tag

    return image_tag()


def remove_leftovers() -> int:
    """Remove every container this backend ever started on this engine (crashed runs leave them)."""
    engine = client()
    removed = 0
    for container in engine.containers.list(all=True, filters={"label": LABEL}):
        try:
            container.remove(force=True)
            removed += 1
        except Exception:  # noqa: BLE001 - already gone
            pass
    return removed


class Container:
    """A started sandbox container with its open channel to the worker."""

    def __init__(self, container: Any, channel: Channel, started: float) -> None:
        self.container = container
        self.channel = channel
        self.cold_start = started
        #: the worker's last answer came before its call's processes had exited (it waits for them first)
        self.exiting = False
        #: the last answer said that a program killed the worker's clean parent (the next call waits for a new one)
        self.parent_lost = False

    @property
    def short_id(self) -> str:
        return str(self.container.id)[:12]


async def start_container(
    engine: Any, config: DockerConfig, image: str, labels: dict[str, str] | None = None
) -> Container:
    """Create and start a container, open its channel and wait for the worker's first answer."""
    start = time.monotonic()
    spec = container_spec(config, image, {**owner_labels(), **(labels or {})})
    _install_sigterm_handler()
    container = await in_thread(engine.containers.create, **spec)
    live_containers[container.id] = container
    try:
        await in_thread(container.start)
        if config.transport == "attach":
            raw = await in_thread(
                engine.api.attach_socket, container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
        else:
            exec_id = (
                await in_thread(
                    engine.api.exec_create,
                    container.id,
                    worker_command(config),
                    stdin=True,
                    user=config.user,
                    workdir=WORKDIR,
                )
            )["Id"]
            raw = await in_thread(engine.api.exec_start, exec_id, socket=True)
        channel = await Channel.open(raw)
        answer = await asyncio.wait_for(channel.request({"op": "ping"}), config.start_timeout)
        if not answer.get("ok"):
            raise RuntimeError(f"the sandbox worker did not start: {answer}")
        missing = set(config.preload) - set(answer.get("preloaded", []))
        if missing:
            logger.warning("the sandbox image lacks %s (the worker could not import it)", ", ".join(sorted(missing)))
        return Container(container, channel, time.monotonic() - start)
    except BaseException:
        await in_thread(remove, container)
        raise


def remove(container: Any) -> None:
    """Remove a container (forced; nothing if it is gone already) and forget it."""
    live_containers.pop(container.id, None)
    try:
        container.remove(force=True)
    except Exception:  # noqa: BLE001 - already gone
        pass


def describe(container: Any) -> tuple[str | None, str]:
    """What the engine says about a container that stopped answering: its status (None when the engine
    cannot tell) and a description for the failure's message."""
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
        return state.get("Status"), ", ".join(parts)
    except Exception as exc:  # noqa: BLE001 - the container may be gone altogether
        return None, f"container unavailable ({type(exc).__name__}: {exc})"


#: Containers started by this process and not yet removed: removed at exit if a run forgot shutdown().
live_containers: dict[str, Any] = {}


@atexit.register
def remove_live_containers(wait: float = 30.0) -> None:
    """Remove every container of this process still alive, in parallel and through a client of its own
    (this also runs from a signal handler, which may have interrupted a call holding the usual client)."""
    ids = list(live_containers)
    if not ids:
        return
    try:
        api = client(timeout=int(wait)).api
    except Exception:  # noqa: BLE001 - no engine: nothing to remove
        return

    def remove_id(cid: str) -> None:
        try:
            api.remove_container(cid, force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        live_containers.pop(cid, None)

    try:
        pool = ThreadPoolExecutor(min(8, len(ids)))
        futures = [pool.submit(remove_id, cid) for cid in ids]
    except RuntimeError:  # at interpreter exit no new thread may start: one after the other
        for cid in ids:
            remove_id(cid)
        return
    wait_for(futures, timeout=wait)
    pool.shutdown(wait=False)


_sigterm_installed = False


def _install_sigterm_handler() -> None:
    """On SIGTERM remove this process's containers, then die of SIGTERM as before (only where it was default)."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    _sigterm_installed = True
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return  # someone else handles it (and decides about exiting); atexit still removes at exit

    def on_sigterm(signum: int, frame: Any) -> None:
        try:
            remove_live_containers()
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread of the main interpreter
        pass


# ------------------------------------------------------------------ whose containers


def reap_orphans(engine: Any) -> list[str]:
    """Remove the sandbox containers that a dead process of this project left on this host; their short ids."""
    reaped = []
    for container in engine.containers.list(all=True, filters={"label": OWNER_PID}):
        if orphaned(container.labels or {}):
            try:
                container.remove(force=True)
                reaped.append(str(container.id)[:12])
            except Exception:  # noqa: BLE001 - gone already, or another backend reaped it first
                pass
    if reaped:
        logger.warning("removed %d sandbox container(s) left by dead processes: %s", len(reaped), ", ".join(reaped))
    return reaped
