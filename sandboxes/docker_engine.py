"""Process control of the docker backend: the engine, starting and removing sandbox containers.

Everything of the ``docker`` SDK is synchronous; the coroutines here call it in threads.
Containers started by this process are recorded in :data:`live_containers` and removed at
interpreter exit when a run forgot ``shutdown()``.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import time
from typing import Any

from sandboxes.docker_channel import Channel
from sandboxes.docker_policy import LABEL, WORKDIR, DockerConfig, container_spec, worker_command

logger = logging.getLogger(__name__)


def client(timeout: int = 60) -> Any:
    import docker

    return docker.from_env(timeout=timeout)


def docker_available() -> bool:
    """Whether a Docker engine answers (within a few seconds)."""
    try:
        engine = client(timeout=5)
        try:
            return bool(engine.ping())
        finally:
            engine.close()
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

    @property
    def short_id(self) -> str:
        return str(self.container.id)[:12]


async def start_container(
    engine: Any, config: DockerConfig, image: str, labels: dict[str, str] | None = None
) -> Container:
    """Create and start a container, open its channel and wait for the worker's first answer."""
    start = time.monotonic()
    spec = container_spec(config, image, labels)
    container = await asyncio.to_thread(engine.containers.create, **spec)
    live_containers[container.id] = container
    try:
        await asyncio.to_thread(container.start)
        if config.transport == "attach":
            raw = await asyncio.to_thread(
                engine.api.attach_socket, container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
        else:
            exec_id = (
                await asyncio.to_thread(
                    engine.api.exec_create,
                    container.id,
                    worker_command(config),
                    stdin=True,
                    user=config.user,
                    workdir=WORKDIR,
                )
            )["Id"]
            raw = await asyncio.to_thread(engine.api.exec_start, exec_id, socket=True)
        channel = await Channel.open(raw)
        answer = await asyncio.wait_for(channel.request({"op": "ping"}), config.start_timeout)
        if not answer.get("ok"):
            raise RuntimeError(f"the sandbox worker did not start: {answer}")
        missing = set(config.preload) - set(answer.get("preloaded", []))
        if missing:
            logger.warning("the sandbox image lacks %s (the worker could not import it)", ", ".join(sorted(missing)))
        return Container(container, channel, time.monotonic() - start)
    except BaseException:
        await asyncio.to_thread(remove, container)
        raise


def remove(container: Any) -> None:
    """Remove a container (forced; nothing if it is gone already) and forget it."""
    live_containers.pop(container.id, None)
    try:
        container.remove(force=True)
    except Exception:  # noqa: BLE001 - already gone
        pass


def describe(container: Any) -> str:
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


#: Containers started by this process and not yet removed: removed at exit if a run forgot shutdown().
live_containers: dict[str, Any] = {}


@atexit.register
def remove_live_containers() -> None:
    for container in list(live_containers.values()):
        remove(container)
