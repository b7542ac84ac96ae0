"""Policy of the docker backend: what a sandbox container may do, and how big a pool may grow.

:class:`DockerConfig` holds the limits and choices; :func:`container_spec` turns them into the
arguments of ``containers.create``, so that the whole isolation of a container reads in one
place: no network (``network_mode=none``), a non-root user, a read-only root file system with
size-capped tmpfs work and temp dirs, memory (no swap), pids and cpu limits,
``no-new-privileges``, every capability dropped, no host mounts, and an environment of our own
(nothing of the host's). The pool bound (:func:`default_max_containers`) and the acquire
deadline (:func:`default_acquire_timeout`) come from configuration here too.

Nothing here talks to an engine.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sandboxes.owner import LABEL

WORKDIR = "/work"
#: Environment variable that bounds every docker pool of this process (containers, busy and idle together).
MAX_CONTAINERS_ENV = "CLEANER_SANDBOX_MAX_CONTAINERS"
#: Environment variable: seconds an ``acquire`` waits for a free container before it fails (default 300).
ACQUIRE_TIMEOUT_ENV = "CLEANER_SANDBOX_ACQUIRE_TIMEOUT"
DEFAULT_ACQUIRE_TIMEOUT = 300.0

#: The modules of the in-container worker, in load order (each imports only the standard library and the
#: ones before it); the container runs the ``main()`` of the last, :data:`WORKER_MAIN`.
WORKER_MODULES = tuple(f"sandboxes.docker.worker.{name}" for name in ("wire", "procs", "program", "main"))
WORKER_MAIN = WORKER_MODULES[-1]
#: The loader: the container holds no project code, so the worker's modules are made here under their own
#: names (with empty parent packages), then the worker's main runs.
_LOADER = """import sys, types
def package(name):
    if name not in sys.modules:
        sys.modules[name] = types.ModuleType(name)
        sys.modules[name].__path__ = []
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(package(parent), leaf, sys.modules[name])
    return sys.modules[name]
for name, source in SOURCES.items():
    parent, _, leaf = name.rpartition(".")
    module = types.ModuleType(name)
    module.__file__ = "<" + name + ">"
    sys.modules[name] = module
    setattr(package(parent), leaf, module)
    exec(compile(source, module.__file__, "exec"), module.__dict__)
del package, name, source, parent, leaf, module
sys.modules[MAIN].main()
"""


def worker_source() -> str:
    """The ``python3 -c`` program that starts the worker: a loader carrying the worker's modules.

    Passed at container start, so that the worker is never stale in the image.
    """
    root = Path(__file__).parents[2]  # the directory that holds the sandboxes package
    sources = {name: (root / (name.replace(".", "/") + ".py")).read_text() for name in WORKER_MODULES}
    return _LOADER.replace("MAIN", repr(WORKER_MAIN), 1).replace("SOURCES", repr(sources), 1)


WORKER_SOURCE = worker_source()


#: the CFS period over which a container's cpu quota (``DockerConfig.cpus``) is enforced, in microseconds
CPU_PERIOD_US = 10_000


@dataclass(frozen=True)
class DockerConfig:
    """How the containers of a :class:`~sandboxes.docker.pool.DockerBackend` are made and talked to."""

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
    #: seconds a call waits for its container to be (re)started; past it the call is sandbox_failed, not run
    ready_timeout: float = 10.0
    env: dict[str, str] = field(default_factory=dict)  #: added to the container's environment

    def __post_init__(self) -> None:
        if self.transport not in ("attach", "exec"):
            raise ValueError(f"DockerConfig.transport must be 'attach' or 'exec', not {self.transport!r}")
        for name in ("cpus", "pids", "max_output", "start_timeout", "grace", "ready_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"DockerConfig.{name} must be positive, not {getattr(self, name)!r}")
        if self.cpus * CPU_PERIOD_US < 1000:
            raise ValueError(f"DockerConfig.cpus must be at least 0.1 (the kernel's smallest quota), not {self.cpus!r}")


def worker_command(config: DockerConfig) -> list[str]:
    """The worker's command line: the loader and the worker's own configuration."""
    worker_config = {
        "preload": list(config.preload),
        "workdir": WORKDIR,
        "scratch": ["/tmp", "/dev/shm"],
        "stateful": config.stateful,
        "fresh_workdir": config.fresh_workdir,
        "max_output": config.max_output,
        "contained": True,
    }
    return ["python3", "-c", WORKER_SOURCE, json.dumps(worker_config)]


def container_spec(config: DockerConfig, image: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments of ``containers.create`` for one sandbox container: the isolation lives here."""
    env = {
        "HOME": WORKDIR,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MPLCONFIGDIR": "/tmp",
        # the same set order in every run, as in the local sandbox; addresses are not fixed here: the worker forks
        # each program from its own process, whose heap depends on the calls before (docs/sandboxes.md)
        "PYTHONHASHSEED": "0",
        **config.env,
    }
    uid = config.user.split(":")[0]
    return {
        "image": image,
        "command": worker_command(config) if config.transport == "attach" else ["sleep", "infinity"],
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
        # the quota per 10 ms, not Docker's default 100 ms: a call's work overlaps the previous call's clean-up,
        # so back-to-back calls use more than a core for moments, and a call throttled for the rest of a short
        # period stalls far less than for the rest of a long one
        "cpu_period": CPU_PERIOD_US,
        "cpu_quota": round(config.cpus * CPU_PERIOD_US),
        "security_opt": ["no-new-privileges"],
        "cap_drop": ["ALL"],
        "ipc_mode": "private",
        "init": config.transport == "exec",  # a reaper for the exec transport; the attach worker reaps itself
        "stdin_open": config.transport == "attach",
        "tty": False,
        "labels": {LABEL: "1", **(labels or {})},
        "detach": True,
    }


def _positive_env(name: str, parse: type, default: Any) -> Any:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = 0
    if value <= 0 or (parse is int and value < 1):
        kind = "a whole number >= 1" if parse is int else "a positive number of seconds"
        raise ValueError(f"{name}={raw!r}: must be {kind}")
    return value


def default_max_containers() -> int:
    """The pool bound when none is given: :data:`MAX_CONTAINERS_ENV`, else twice the cpus (at least 4)."""
    return int(_positive_env(MAX_CONTAINERS_ENV, int, max(4, 2 * (os.cpu_count() or 1))))


def default_acquire_timeout() -> float:
    """Seconds an ``acquire`` waits for a free container: :data:`ACQUIRE_TIMEOUT_ENV`, else 300."""
    return float(_positive_env(ACQUIRE_TIMEOUT_ENV, float, DEFAULT_ACQUIRE_TIMEOUT))
