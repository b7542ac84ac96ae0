"""Policy of the docker backend: what a sandbox container may do, and how big a pool may grow.

:class:`DockerConfig` holds the limits and choices; :func:`container_spec` turns them into the
arguments of ``containers.create``, so that the whole isolation of a container reads in one
place: no network (``network_mode=none``), a non-root user, a read-only root file system with
size- and inode-capped tmpfs work, temp and shared-memory dirs, memory (no swap), pids and cpu limits,
``no-new-privileges``, every capability dropped, no host mounts, and an environment of our own
(nothing of the host's). :func:`memory_budget` splits the memory limit between what outlives a program (the
tmpfs files and their inodes, System V IPC objects, the worker) and what the program may take; a configuration
whose split does not hold is refused, so a program that exhausts memory is what the OOM killer ends, never its
container. The pool bound (:func:`default_max_containers`) and the acquire
deadline (:func:`default_acquire_timeout`) come from configuration here too.

Nothing here talks to an engine.
"""

from __future__ import annotations

import json
import os
import re
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
WORKER_MODULES = tuple(
    f"sandboxes.docker.worker.{name}" for name in ("wire", "procs", "program", "parent", "call", "main")
)
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


#: bytes per unit of the sizes Docker and tmpfs accept ("512m", "64k", "1g", or a number of bytes)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
#: The most kernel memory one tmpfs inode (a file, directory or hard link, with its dentry and the extended
#: attributes tmpfs charges against the inode count) holds; it stays charged to the container until the file
#: is removed, and the tmpfs ``size`` does not bound it (an empty file or directory takes no block).
INODE_BYTES = 4 << 10
#: IPC bounds of the container's own IPC namespace. Its objects outlive the program that made them (the worker
#: removes them after each call) and are charged to the container, so each kind is bounded here and counted in
#: the budget. System V: shared memory segments, message queues, and semaphores (the kernel's default, 32000 per
#: set in 32000 sets at 64 bytes each, let 200 sets take 400 MB).
IPC_SHM_BYTES = 16 << 20
IPC_MSG_QUEUES = 16
IPC_MSG_QUEUE_BYTES = 16 << 10
IPC_SEM_SETS = 32
IPC_SEMS = 1024  #: semaphores in all sets together (also the most in one set)
#: kernel memory counted per semaphore (its ``struct sem`` is one cache line; with room for the set's header)
IPC_SEM_BYTES = 256
#: POSIX message queues: how many, and messages of what size each may hold
MQ_QUEUES = 16
MQ_MESSAGES = 10
MQ_MESSAGE_BYTES = 8 << 10
#: What all IPC objects may hold at once, counted in the budget (a POSIX queue's messages with their headers).
IPC_BYTES = (
    IPC_SHM_BYTES
    + IPC_MSG_QUEUES * IPC_MSG_QUEUE_BYTES
    + IPC_SEMS * IPC_SEM_BYTES
    + MQ_QUEUES * MQ_MESSAGES * (MQ_MESSAGE_BYTES + 256)
)
#: What the worker process, its clean parent and its spare program processes may hold at once: measured near
#: 65 MiB when idle (an interpreter, and one with numpy and sympy; a few MiB more while a bare clean parent serves
#: and the warm one imports), plus a call's output (two streams up to
#: ``max_output``, each held as bytes, base64 and JSON on its way out) and the request's own stdin and files.
WORKER_BYTES = 104 << 20
#: The least memory a program must always get; a configuration leaving less is refused.
MIN_PROGRAM_BYTES = 64 << 20


def size_bytes(size: str | int, what: str) -> int:
    """Bytes of a size as Docker and tmpfs write it (``512m``, ``64k``, ``1g``, or a number of bytes)."""
    match = re.fullmatch(r"\s*(\d+)\s*([bkmg]?)\s*", str(size).lower())
    if not match:
        raise ValueError(f"DockerConfig.{what} must be a size such as '512m', '64k' or '1g', not {size!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


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
    workdir_inodes: int = 8192  #: files, directories and links the work dir may hold
    tmp_size: str = "16m"  #: tmpfs size of /tmp
    tmp_inodes: int = 2048  #: files, directories and links /tmp may hold
    shm_size: str = "16m"  #: tmpfs size of /dev/shm (POSIX shared memory, multiprocessing's semaphores)
    shm_inodes: int = 1024  #: files /dev/shm may hold
    stateful: bool = False  #: keep variables across calls (as in a notebook) instead of a fresh namespace
    fresh_workdir: bool = False  #: empty /work before every call (default: files last until the sandbox is reset)
    transport: Literal["attach", "exec"] = "attach"  #: attach socket of the container, or one long-lived exec
    max_output: int = 4 * 1024 * 1024  #: bytes per stream; a program writing more is stopped
    preload: tuple[str, ...] = ("numpy", "sympy")  #: modules imported once by the warm interpreter
    user: str = "1000:1000"
    start_timeout: float = 60.0  #: seconds for a container to start and answer its first ping
    #: seconds past a call's timeout before the sandbox itself is declared dead (room for a loaded host: a worker
    #: ending a fork bomb among many busy containers needs more than a second)
    grace: float = 3.0
    #: seconds the worker gives the processes of a killed call to finish exiting before it takes the next call
    #: (a fork bomb's teardown on a starved container); the next call's wait for its answer is that much longer
    exit_wait: float = 10.0
    #: seconds a call waits for its container to be (re)started; past it the call is sandbox_failed, not run
    ready_timeout: float = 10.0
    env: dict[str, str] = field(default_factory=dict)  #: added to the container's environment

    def __post_init__(self) -> None:
        if self.transport not in ("attach", "exec"):
            raise ValueError(f"DockerConfig.transport must be 'attach' or 'exec', not {self.transport!r}")
        for name in (
            "cpus",
            "pids",
            "max_output",
            "start_timeout",
            "grace",
            "exit_wait",
            "ready_timeout",
            "workdir_inodes",
            "tmp_inodes",
            "shm_inodes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"DockerConfig.{name} must be positive, not {getattr(self, name)!r}")
        if self.cpus * CPU_PERIOD_US < 1000:
            raise ValueError(f"DockerConfig.cpus must be at least 0.1 (the kernel's smallest quota), not {self.cpus!r}")
        budget = memory_budget(self)
        if budget["program"] < MIN_PROGRAM_BYTES:
            kept = [f"{name} {value >> 20} MiB" for name, value in budget.items() if name not in ("memory", "program")]
            parts = ", ".join(kept)
            raise ValueError(
                f"DockerConfig.memory={self.memory!r} leaves a program {budget['program'] >> 20} MiB "
                f"(at least {MIN_PROGRAM_BYTES >> 20} MiB needed) after what outlives it ({parts}): "
                "raise memory or lower the tmpfs sizes and inode counts"
            )


def memory_budget(config: DockerConfig) -> dict[str, int]:
    """How a container's memory limit is split, in bytes: what outlives a program, and the rest, the program's.

    ``files`` (the three tmpfs sizes), ``inodes`` (their inode counts times :data:`INODE_BYTES`), ``ipc``
    (System V segments and queues) stay charged to the container after a program dies, and ``worker``
    (:data:`WORKER_BYTES` plus room for two capped output streams) is the worker's own; ``program`` is what is
    left. While their sum stays under ``memory``, the container reaches its limit only while a program holds
    more than ``program``, and the OOM killer then ends the program (its ``oom_score_adj`` is the highest),
    which frees what it held: the container lives on.
    """
    files = sum(
        size_bytes(size, name)
        for size, name in (
            (config.workdir_size, "workdir_size"),
            (config.tmp_size, "tmp_size"),
            (config.shm_size, "shm_size"),
        )
    )
    inodes = (config.workdir_inodes + config.tmp_inodes + config.shm_inodes) * INODE_BYTES
    ipc = IPC_BYTES
    worker = WORKER_BYTES + 2 * config.max_output
    memory = size_bytes(config.memory, "memory")
    return {
        "memory": memory,
        "files": files,
        "inodes": inodes,
        "ipc": ipc,
        "worker": worker,
        "program": memory - files - inodes - ipc - worker,
    }


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
        "program_memory": memory_budget(config)["program"],
        "exit_wait": config.exit_wait,
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
        # the same set order in every run, as in the local sandbox; addresses are not fixed here: each program is
        # forked from the worker's clean parent, whose addresses were randomized at its start (docs/sandboxes.md)
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
        # each tmpfs bounded in bytes and in inodes (an inode's kernel memory is not in its size): see memory_budget
        "tmpfs": {
            WORKDIR: f"rw,nosuid,nodev,size={config.workdir_size},nr_inodes={config.workdir_inodes},"
            f"mode=0700,uid={uid},gid={uid}",
            "/tmp": f"rw,nosuid,nodev,noexec,size={config.tmp_size},nr_inodes={config.tmp_inodes},mode=1777",
            "/dev/shm": f"rw,nosuid,nodev,noexec,size={config.shm_size},nr_inodes={config.shm_inodes},mode=1777",
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
        # an IPC namespace of its own without Docker's /dev/shm (ours above is inode-capped), its objects bounded
        # (they outlive the program that made them)
        "ipc_mode": "none",
        "sysctls": {
            "kernel.shmmax": str(IPC_SHM_BYTES),
            "kernel.shmall": str(IPC_SHM_BYTES // 4096),
            "kernel.msgmni": str(IPC_MSG_QUEUES),
            "kernel.msgmnb": str(IPC_MSG_QUEUE_BYTES),
            # SEMMSL SEMMNS SEMOPM SEMMNI
            "kernel.sem": f"{IPC_SEMS} {IPC_SEMS} 32 {IPC_SEM_SETS}",
            "fs.mqueue.queues_max": str(MQ_QUEUES),
            "fs.mqueue.msg_max": str(MQ_MESSAGES),
            "fs.mqueue.msgsize_max": str(MQ_MESSAGE_BYTES),
        },
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
