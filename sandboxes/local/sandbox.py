"""The local sandbox: each program is a child process of this one, fenced by rlimits and bubblewrap.

Weaker than the docker backend (same kernel), but it needs nothing but what
``pip`` installs. What it does for every call:

- runs the configured interpreter (default: this one, so numpy and sympy import
  when installed) as ``python -s -B -X utf8 -c CODE`` in the sandbox's own work
  directory, with a scrubbed environment (``PATH``, ``HOME`` = work dir, ``LANG``,
  ``TMPDIR``, single-thread settings for BLAS and a fixed ``PYTHONHASHSEED``; nothing
  of the host's, so no ``-E``), its address space not randomized: the same program
  prints the same text in every run (:mod:`sandboxes.local.policy`);
- inside bubblewrap (see :mod:`sandboxes.local.isolation` for the policy): no network,
  own pid namespace (all of it dies with the program), a new root with read-only
  binds of the system and of the interpreter's prefix, the work dir at
  ``/sandbox``, ``--die-with-parent``. No working bwrap is an error naming the
  fixes, unless the user opted in to unisolated runs by name;
- sets ``RLIMIT_CPU``, ``RLIMIT_AS``, ``RLIMIT_NPROC``, ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``,
  ``RLIMIT_MSGQUEUE=0`` and ``RLIMIT_CORE=0`` in the child, refuses the system calls that would keep
  memory outside its address space (:mod:`sandboxes.local.seccomp`), starts it in a new session and kills its process
  group at the wall-clock timeout, and in a ``finally`` when the call is cancelled
  (a sample's time limit), so a cancelled call leaves nothing running;
- when this process is root, runs the program as an unprivileged uid reserved for
  this sandbox alone (a lock file per uid in :data:`UID_LOCK_DIR`), so that
  ``RLIMIT_NPROC`` holds and every process left behind (background children,
  ``setsid`` escapes) is killed after each call by ``kill(-1, SIGKILL)`` as that uid
  (under bwrap, a program that ended by itself needs no sweep once its pid namespace
  is seen to have ended: :class:`~sandboxes.local.procs.NamespaceWatch`).
  Model code never runs as root: where that uid cannot run the interpreter, the
  sandbox refuses to start.

Policy (limits, isolation, environment) lives in :mod:`sandboxes.local.policy` and
:mod:`sandboxes.local.isolation`, process control (spawn, watch, kill, uid reservation) in
:mod:`sandboxes.local.procs`; this module is the sandbox: its directories, files in and
out, and the structured result.

Each sandbox's directory holds its owner's labels (:mod:`sandboxes.owner`); a SIGKILLed process runs no
clean-up, so a new :class:`~sandboxes.local.pool.LocalBackend` removes the directories of dead owners
(:func:`reap_orphan_dirs`), never anyone else's.

Every :class:`~sandboxes.base.ExecResult` says in ``extra`` which backend and
isolation ran (``{"backend": "local", "isolation": "bwrap", "bwrap": PATH, ...}``).

Output is read while it is produced, with a byte cap per stream: a program that
passes the cap is killed and its result is ``OutputLimitExceeded`` (not ok) with
the output up to the cap, because a flood is nearly always a runaway loop and
running it to the timeout would only waste the budget.
"""

from __future__ import annotations

import asyncio
import atexit
import errno
import json
import logging
import math
import os
import shutil
import subprocess
import tempfile
import time
import weakref
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

from sandboxes.base import SANDBOX_ERROR, ExecResult, Sandbox
from sandboxes.errors import classify
from sandboxes.local import seccomp
from sandboxes.local.isolation import BWRAP_WORKDIR, bwrap_argv, find_bwrap, interpreter
from sandboxes.local.policy import LocalConfig, choose_isolation, prlimit_argv, scrubbed_env, set_rlimits
from sandboxes.local.procs import NamespaceWatch, _text, run_fenced
from sandboxes.local.uids import UID_LOCK_DIR, UidLease, kill_uid, pids_of_uid
from sandboxes.owner import orphaned, owner_labels

__all__ = [
    "UID_LOCK_DIR",
    "LocalConfig",
    "LocalSandbox",
    "choose_isolation",
    "find_bwrap",
    "kill_uid",
]

logger = logging.getLogger(__name__)

#: The prefix of every sandbox's directory (in the system's temporary directory) and its owner's labels there.
DIR_PREFIX = "cleaner-sbx-"
OWNER_FILE = "owner.json"
#: Code longer than this (bytes) is run from a file instead of ``-c`` (Linux caps one argument at 128 KiB).
_MAX_ARG = 100_000
_PROGRAM_FILE = "_program.py"


class LocalSandbox(Sandbox):
    """A work directory plus the rules for running programs in it as child processes.

    Raises:
        IsolationUnavailable: at construction, when programs could not be isolated (see
            :func:`choose_isolation`); nothing then runs.
    """

    backend = "local"

    def __init__(self, config: LocalConfig | None = None, **options: Any) -> None:
        config = config or LocalConfig()
        self.config = replace(config, **options) if options else config
        self._closed = True  # until fully set up: nothing for __del__ to clean
        self._interp = interpreter(self.config.python)
        self.choice = choose_isolation(self.config)
        self.isolation = self.choice.isolation
        self._lease = UidLease(self.config.uid_range) if os.geteuid() == 0 else None
        self._base = Path(tempfile.mkdtemp(prefix=DIR_PREFIX)).resolve()
        os.chmod(self._base, 0o755)
        (self._base / OWNER_FILE).write_text(json.dumps(owner_labels()))
        self.workdir = self._base / "work"
        self._tmpdir = self._base / "tmp"
        self._shmdir = self._base / "shm"  #: ``/dev/shm`` under bwrap
        self._make_dirs()
        if self._lease is not None:
            kill_uid(self._lease.uid)  # leftovers of a crashed earlier owner of this uid
        self._closed = False
        #: runs since the last sweep of the uid whose pid namespace was not seen to end (they may have left something)
        self._unproven_runs = 0
        _open_sandboxes.add(self)

    # ----------------------------------------------------------------- set-up

    @property
    def uid(self) -> int | None:
        """The uid programs run as, or None when they run as this process's (non-root) user."""
        return self._lease.uid if self._lease else None

    def _dirs(self) -> tuple[Path, ...]:
        """The directories a program writes to: the work dir, /tmp and, under bwrap, /dev/shm."""
        return (self.workdir, self._tmpdir, self._shmdir) if self.isolation == "bwrap" else (self.workdir, self._tmpdir)

    def _make_dirs(self) -> None:
        """Create the work dir and /tmp, or heal them: a program may have deleted or chmod-ed them."""
        for d in self._dirs():
            d.mkdir(mode=0o700, exist_ok=True)
            os.chmod(d, 0o700)
            if self._lease is not None:
                os.chown(d, self._lease.uid, self._lease.gid)

    def _user_kwargs(self) -> dict[str, Any]:
        """Popen arguments that switch to the sandbox uid (plain mode only; inside bwrap the drop is in argv)."""
        if self._lease is None or self.isolation == "bwrap":
            return {}
        return {"user": self._lease.uid, "group": self._lease.gid, "extra_groups": []}

    def _env(self) -> dict[str, str]:
        return scrubbed_env(
            self._interp.path,
            inside_bwrap=self.isolation == "bwrap",
            workdir=str(self.workdir),
            tmpdir=str(self._tmpdir),
            extra=self.config.extra_env,
        )

    def _wrap(self, argv: list[str], chdir: str, namespace: NamespaceWatch, filter_fd: int | None) -> list[str]:
        """``argv`` inside bwrap, dropping to the sandbox uid, its status reported to ``namespace``, its system
        calls filtered by what bwrap reads from ``filter_fd``."""
        assert self.choice.bwrap is not None
        bw = bwrap_argv(
            self.choice.bwrap,
            self._interp,
            self.workdir,
            self._tmpdir,
            chdir,
            self.uid,
            namespace.argv(),
            report_fd=namespace.report_w,
            seccomp_fd=filter_fd,
            shm_dir=self._shmdir,
        )
        return bw + argv

    # ----------------------------------------------------------------- files

    def _resolve(self, path: str) -> Path:
        """A path inside the work dir; absolute paths under /sandbox map into it. Escapes are refused."""
        p = PurePosixPath(path)
        if p.is_absolute():
            if p.parts[:2] == ("/", BWRAP_WORKDIR.strip("/")):
                p = PurePosixPath(*p.parts[2:]) if len(p.parts) > 2 else PurePosixPath(".")
            elif str(p).startswith(str(self.workdir)):
                p = PurePosixPath(os.path.relpath(str(p), str(self.workdir)))
            else:
                raise ValueError(f"path {path!r} is outside the sandbox work directory")
        if ".." in p.parts:
            raise ValueError(f"path {path!r} must not contain '..'")
        target = (self.workdir / p).resolve()
        if target != self.workdir.resolve() and self.workdir.resolve() not in target.parents:
            raise ValueError(f"path {path!r} leads outside the sandbox work directory")
        return target

    async def write_file(self, path: str, contents: str | bytes) -> None:
        """Write ``contents`` to ``path`` (relative to the work dir), creating parent dirs."""
        target = self._resolve(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(contents.encode() if isinstance(contents, str) else contents)
        if self._lease is not None:
            d = target
            while d != self.workdir and self.workdir in d.parents:
                os.chown(d, self._lease.uid, self._lease.gid)
                d = d.parent

    async def read_file(self, path: str) -> bytes:
        """The bytes of ``path`` (relative to the work dir)."""
        target = self._resolve(path)
        if target.is_symlink() or not target.is_file():
            raise FileNotFoundError(f"no file {path!r} in the sandbox work directory")
        return target.read_bytes()

    # ----------------------------------------------------------------- running

    async def run_python(
        self,
        code: str,
        *,
        timeout: float = 10.0,
        stdin: str | bytes = b"",
        files: dict[str, str | bytes] | None = None,
    ) -> ExecResult:
        for name, content in (files or {}).items():
            await self.write_file(name, content)
        if len(code.encode()) <= _MAX_ARG:
            argv = [self._interp.path, "-s", "-B", "-X", "utf8", "-c", code]
        else:
            await self.write_file(_PROGRAM_FILE, code)
            argv = [self._interp.path, "-s", "-B", "-X", "utf8", _PROGRAM_FILE]
        return await self.exec_command(argv, stdin=stdin, timeout=timeout)

    async def exec_command(
        self,
        argv: Sequence[str],
        *,
        stdin: str | bytes = b"",
        timeout: float = 10.0,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run any command in the sandbox under the same limits (``python``/``python3`` mean the interpreter).

        Never raises for what the command does; a failure to start it (no such
        program) is a result with ``error_kind='SandboxError'`` and ``exit_code=127``.
        """
        if self._closed:
            raise RuntimeError("LocalSandbox is closed")
        if not argv:
            raise ValueError("exec_command needs a non-empty argv")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        argv = list(argv)
        if argv[0] in ("python", "python3"):
            argv[0] = self._interp.path
        workdir = self._resolve(cwd) if cwd else self.workdir
        rel = workdir.relative_to(self.workdir.resolve()).as_posix()
        chdir = BWRAP_WORKDIR if rel == "." else f"{BWRAP_WORKDIR}/{rel}"
        data = stdin.encode() if isinstance(stdin, str) else stdin
        cpu = int(math.ceil(self.config.cpu_seconds or timeout + 1))
        nproc = self.config.max_processes
        if self._lease is None and os.geteuid() != 0:
            nproc += len(pids_of_uid(os.getuid()))  # RLIMIT_NPROC counts all of the user's processes
        proc_env = self._env()
        proc_env.update(env or {})
        self._unproven_runs += 1
        namespace = NamespaceWatch() if self.isolation == "bwrap" else None
        filter_fd = seccomp.filter_fd() if namespace is not None else None
        try:
            full = self._wrap(argv, chdir, namespace, filter_fd) if namespace is not None else argv
            fds = () if filter_fd is None else (filter_fd,)
            return await self._run(full, data, timeout, cpu, nproc, proc_env, workdir, namespace, fds)
        finally:
            if namespace is not None:
                namespace.close()
            if filter_fd is not None:
                os.close(filter_fd)

    async def _run(
        self,
        argv: list[str],
        data: bytes,
        timeout: float,
        cpu: int,
        nproc: int,
        env: dict[str, str],
        cwd: Path,
        namespace: NamespaceWatch | None,
        pass_fds: tuple[int, ...],
    ) -> ExecResult:
        start = time.monotonic()
        self._make_dirs()
        cap = self.config.max_output_bytes
        # In bwrap (argv[0], probed to exist) the limits are set by prlimit in front of it, so that Python can vfork:
        # a preexec_fn makes it copy this whole process to start each program (sandboxes.local.policy.prlimit_argv)
        limits = prlimit_argv(self.config, cpu, nproc) if self.isolation == "bwrap" else None
        try:
            if limits is not None and not os.access(argv[0], os.X_OK):  # what the exec would have raised
                raise FileNotFoundError(errno.ENOENT, "no such executable", argv[0])
            outcome = await run_fenced(
                [*limits, *argv] if limits else argv,
                data,
                timeout,
                cwd=cwd,
                env=env,
                preexec=None
                if limits
                else lambda: set_rlimits(self.config, cpu, nproc, filter_syscalls=namespace is None),
                cap=cap,
                uid=self.uid,
                user_kwargs=self._user_kwargs(),
                namespace=namespace,
                pass_fds=pass_fds,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            return ExecResult(
                ok=False,
                stderr=f"cannot run {argv[0]!r}: {exc}",
                exit_code=127,
                error_kind=SANDBOX_ERROR,
                duration=time.monotonic() - start,
                extra=self._extra(),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return ExecResult(
                ok=False,
                stderr=f"the local sandbox could not start the program: {exc}",
                exit_code=None,
                error_kind=SANDBOX_ERROR,
                duration=time.monotonic() - start,
                sandbox_failed=True,
                extra=self._extra(),
            )

        if outcome.namespace_ended:
            self._unproven_runs -= 1
        out, err, exited = outcome.out, outcome.err, outcome.exited
        timed_out, output_exceeded = outcome.timed_out, outcome.output_exceeded
        if not exited:  # unkillable (should not happen): report a sandbox failure, do not hang
            return ExecResult(
                ok=False,
                stdout=_text(out),
                stderr=_text(err),
                exit_code=None,
                error_kind=SANDBOX_ERROR,
                duration=time.monotonic() - start,
                sandbox_failed=True,
                extra=self._extra(),
            )
        code = outcome.returncode
        if self.isolation == "bwrap" and code is not None and code < 0 and not (timed_out or output_exceeded):
            # bwrap reports the program's signal death as 128 + N; bwrap itself ended by a signal was killed
            # from outside (the program cannot reach it: another pid namespace, and as root another uid):
            # a failure of the sandbox, not of the program.
            return ExecResult(
                ok=False,
                stdout=_text(out),
                stderr=f"the local sandbox's bwrap process was killed by signal {-code} (from outside the "
                "sandbox); the program did not finish",
                exit_code=None,
                error_kind=SANDBOX_ERROR,
                duration=time.monotonic() - start,
                sandbox_failed=True,
                extra=self._extra(),
            )
        if namespace is not None and code is not None:
            # bwrap's own status reads a death by signal N as 128 + N; the program's exact one is reported apart.
            # Without it the program killed what reports it, and bwrap's status says how that ended.
            reported = namespace.exit_status()
            code = reported if reported is not None else (-(code - 128) if 128 < code < 160 else code)
        stdout, stderr = _text(out), _text(err)
        kind = classify(
            None if (timed_out or output_exceeded) else code,
            stderr,
            timed_out=timed_out,
            output_exceeded=output_exceeded,
        )
        extra = self._extra()
        if output_exceeded:
            extra["truncated_at_bytes"] = cap
        return ExecResult(
            ok=kind is None,
            stdout=stdout,
            stderr=stderr,
            exit_code=None if (timed_out or output_exceeded) else code,
            error_kind=kind,
            duration=time.monotonic() - start,
            extra=extra,
        )

    def _extra(self) -> dict[str, Any]:
        """What every result records of where it ran: backend, isolation (and which bwrap), uid."""
        return {"backend": "local", **self.choice.to_dict(), "uid": self.uid}

    # ----------------------------------------------------------------- lifecycle

    async def reset(self) -> None:
        """Kill anything left, empty the work dir and /tmp (between rollouts).

        The sandbox uid is swept (a ``/proc`` scan, in a thread) unless every run since the last sweep was seen
        to end whole: its pid namespace ended, so the kernel had killed all it started (``Outcome.namespace_ended``).
        Directories with anything in them are emptied in a thread too.
        """
        await self._sweep()
        if not all(_is_empty_dir(d) for d in self._dirs()):
            await asyncio.to_thread(self._empty_dirs)
        self._make_dirs()

    def _empty_dirs(self) -> None:
        for d in self._dirs():
            shutil.rmtree(d, ignore_errors=True)

    async def _sweep(self) -> None:
        """Kill every process of the sandbox uid, unless no run since the last sweep can have left one."""
        if self._lease is not None and self._unproven_runs:
            await asyncio.to_thread(kill_uid, self._lease.uid)
        self._unproven_runs = 0

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._sweep()
        await asyncio.to_thread(shutil.rmtree, self._base, ignore_errors=True)
        if self._lease is not None:
            self._lease.release()

    def _discard(self) -> None:
        """Synchronous last-resort cleanup (garbage collection, interpreter exit)."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        if self._lease is not None:
            kill_uid(self._lease.uid)
        shutil.rmtree(self._base, ignore_errors=True)
        if self._lease is not None:
            self._lease.release()

    def __del__(self) -> None:  # never leave a temp dir, a process or a held uid behind
        self._discard()


_open_sandboxes: weakref.WeakSet[LocalSandbox] = weakref.WeakSet()


def _is_empty_dir(path: Path) -> bool:
    """Whether ``path`` is a directory with nothing in it (False when it cannot be listed)."""
    try:
        with os.scandir(path) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def reap_orphan_dirs(root: Path | None = None) -> list[Path]:
    """Remove the sandbox directories in ``root`` (the system's temporary directory) that a dead process of this
    project left (SIGKILL runs no clean-up); the paths removed. A directory without owner labels is left alone."""
    reaped = []
    for base in Path(root or tempfile.gettempdir()).glob(f"{DIR_PREFIX}*"):
        try:
            labels = json.loads((base / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not provably ours: an older run's, or no sandbox's
        if isinstance(labels, dict) and orphaned(labels):
            shutil.rmtree(base, ignore_errors=True)
            reaped.append(base)
    if reaped:
        logger.warning("removed %d local sandbox directories left by dead processes", len(reaped))
    return reaped


@atexit.register
def _close_all() -> None:
    for sandbox in list(_open_sandboxes):
        sandbox._discard()
