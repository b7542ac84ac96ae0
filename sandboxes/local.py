"""The local sandbox: each program is a child process of this one, fenced by rlimits.

Weaker than the docker backend (same kernel, same file system view unless
bubblewrap is usable), but it needs nothing but Python and runs everywhere. What
it does for every call:

- runs the configured interpreter (default: this one, so numpy and sympy import
  when installed) as ``python -E -s -B -X utf8 -c CODE`` in the sandbox's own work
  directory, with a scrubbed environment (``PATH``, ``HOME`` = work dir, ``LANG``,
  ``TMPDIR`` and single-thread settings for BLAS; nothing of the host's);
- sets ``RLIMIT_CPU``, ``RLIMIT_AS``, ``RLIMIT_NPROC``, ``RLIMIT_FSIZE`` and
  ``RLIMIT_CORE=0`` in the child, starts it in a new session and kills its process
  group at the wall-clock timeout;
- when this process is root, runs the child as an unprivileged uid reserved for
  this sandbox alone (a lock file per uid in :data:`UID_LOCK_DIR`), so that
  ``RLIMIT_NPROC`` holds and every process left behind (background children,
  ``setsid`` escapes) is killed after each call by ``kill(-1, SIGKILL)`` as that uid;
- when ``bwrap`` (bubblewrap) runs here, wraps the child in it: no network, own
  pid namespace (all of it dies with the program), read-only binds of ``/usr`` and
  of the interpreter's prefix, the work dir at ``/sandbox``, ``--die-with-parent``.
  If bwrap is absent or cannot run (no namespaces), the failure is detected once,
  warned about once, and the plain child process is used.

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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from sandboxes.base import SANDBOX_ERROR, ExecResult, Sandbox
from sandboxes.errors import classify

logger = logging.getLogger(__name__)

#: Where the per-uid lock files live (root only); a held lock means "uid in use".
UID_LOCK_DIR = Path("/tmp/.cleaner-sandbox-uids")
#: Mount point of the work directory inside bubblewrap.
BWRAP_WORKDIR = "/sandbox"
#: Code longer than this (bytes) is run from a file instead of ``-c`` (Linux caps one argument at 128 KiB).
_MAX_ARG = 100_000
_PROGRAM_FILE = "_program.py"

Isolation = Literal["auto", "bwrap", "none"]


@dataclass(frozen=True)
class LocalConfig:
    """Limits and isolation choices of a :class:`LocalSandbox`."""

    python: str = sys.executable  #: interpreter that runs the programs
    memory_mb: int = 2048  #: RLIMIT_AS (address space, so generous: imports of numpy map a lot)
    cpu_seconds: float | None = None  #: RLIMIT_CPU; None: the call's timeout + 1 s
    max_processes: int = 64  #: RLIMIT_NPROC for the sandbox uid (tasks, threads included)
    max_file_mb: int = 64  #: RLIMIT_FSIZE: largest file the program may write
    max_output_bytes: int = 4 * 1024 * 1024  #: cap per stream; more is OutputLimitExceeded
    isolation: Isolation = "auto"  #: "auto": bwrap when it works here, else plain
    drop_privileges: bool | None = None  #: run as a reserved uid; None: when running as root
    uid_range: tuple[int, int] = (61000, 62000)  #: uids reserved for sandboxes (must have no passwd entry)
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


# --------------------------------------------------------------------------- probes


@dataclass(frozen=True)
class _Interpreter:
    path: str
    roots: tuple[str, ...]  #: directories the interpreter needs (prefix, stdlib, site-packages)


_interpreters: dict[str, _Interpreter] = {}
_bwrap_ok: dict[tuple[str, bool], bool] = {}
_plain_drop_ok: dict[str, bool] = {}


def _interpreter(python: str) -> _Interpreter:
    """Resolve ``python`` and ask it which directories it reads (once per interpreter)."""
    if python in _interpreters:
        return _interpreters[python]
    resolved = shutil.which(python) or python
    if not os.path.isfile(resolved) or not os.access(resolved, os.X_OK):
        raise ValueError(f"LocalConfig.python: {python!r} is not an executable file")
    probe = "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]))"
    out = subprocess.run([resolved, "-E", "-s", "-c", probe], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ValueError(f"LocalConfig.python: {python!r} does not run: {out.stderr.strip()[-500:]}")
    import json

    paths = [os.path.realpath(p) for p in json.loads(out.stdout) if p and os.path.isabs(p) and os.path.isdir(p)]
    paths.append(os.path.dirname(os.path.realpath(resolved)))
    roots: list[str] = []
    for p in sorted(set(paths), key=len):
        if not any(p == r or p.startswith(r + "/") for r in roots) and p not in ("/",):
            roots.append(p)
    _interpreters[python] = _Interpreter(resolved, tuple(roots))
    return _interpreters[python]


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _warn(message: str) -> None:
    logger.warning(message)


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


# --------------------------------------------------------------------------- the sandbox


class LocalSandbox(Sandbox):
    """A work directory plus the rules for running programs in it as child processes."""

    backend = "local"

    def __init__(self, config: LocalConfig | None = None, **options: Any) -> None:
        config = config or LocalConfig()
        self.config = replace(config, **options) if options else config
        self._interp = _interpreter(self.config.python)
        is_root = os.geteuid() == 0
        drop = self.config.drop_privileges if self.config.drop_privileges is not None else is_root
        if drop and not is_root:
            raise ValueError("LocalConfig.drop_privileges=True needs root (it switches to a reserved uid)")
        self._lease = _UidLease(self.config.uid_range) if drop else None
        self._base = Path(tempfile.mkdtemp(prefix="cleaner-sbx-")).resolve()
        os.chmod(self._base, 0o755)
        self.workdir = self._base / "work"
        self._tmpdir = self._base / "tmp"
        self._make_dirs()
        if self._lease is not None:
            kill_uid(self._lease.uid)  # leftovers of a crashed earlier owner of this uid
        self.isolation = self._choose_isolation()
        if self._lease is not None and self.isolation == "none" and not self._plain_drop_works():
            _warn(
                f"the sandbox uid cannot run {self._interp.path} (a parent directory is not readable by "
                "other users) and bwrap is unavailable: local sandbox programs run as root, without the "
                "process limit. Use the docker backend, install bubblewrap, or set LocalConfig.python."
            )
            self._lease.release()
            self._lease = None
        self._closed = False
        self._calls = 0
        _open_sandboxes.add(self)

    # ----------------------------------------------------------------- set-up

    @property
    def uid(self) -> int | None:
        """The uid programs run as, or None when they run as this process's user."""
        return self._lease.uid if self._lease else None

    def _make_dirs(self) -> None:
        """Create the work dir and /tmp, or heal them: a program may have deleted or chmod-ed them."""
        for d in (self.workdir, self._tmpdir):
            d.mkdir(mode=0o700, exist_ok=True)
            os.chmod(d, 0o700)
            if self._lease is not None:
                os.chown(d, self._lease.uid, self._lease.gid)

    def _choose_isolation(self) -> Literal["bwrap", "none"]:
        if self.config.isolation == "none":
            return "none"
        key = (self._interp.path, self._lease is not None)
        if key not in _bwrap_ok:
            _bwrap_ok[key] = self._probe_bwrap()
        if _bwrap_ok[key]:
            return "bwrap"
        if self.config.isolation == "bwrap":
            raise RuntimeError("LocalConfig.isolation='bwrap' but bwrap is missing or cannot run here (see warning)")
        return "none"

    def _probe_bwrap(self) -> bool:
        if bwrap_path() is None:
            _warn(
                "bubblewrap (bwrap) not found: the local sandbox runs programs without namespace isolation "
                "(network and file system visible). Install it with `apt-get install bubblewrap`, or use docker."
            )
            return False
        if self._lease is not None and shutil.which("setpriv") is None:
            _warn("setpriv (util-linux) not found: cannot drop privileges inside bwrap; bwrap not used")
            return False
        argv = self._wrap([self._interp.path, "-E", "-s", "-c", "import sys"], force_bwrap=True)
        try:
            out = subprocess.run(argv, capture_output=True, timeout=30, env=self._env("bwrap"))
        except (OSError, subprocess.SubprocessError) as exc:
            _warn(f"bwrap cannot run here ({exc}); the local sandbox falls back to plain child processes")
            return False
        if out.returncode != 0:
            _warn(
                "bwrap cannot run here ("
                + out.stderr.decode(errors="replace").strip()[-300:]
                + "); the local sandbox falls back to plain child processes"
            )
            return False
        return True

    def _plain_drop_works(self) -> bool:
        if self._interp.path not in _plain_drop_ok:
            try:
                out = subprocess.run(
                    [self._interp.path, "-E", "-s", "-c", "pass"],
                    capture_output=True,
                    timeout=30,
                    cwd=self.workdir,
                    env=self._env("none"),
                    **self._user_kwargs("none"),
                )
                _plain_drop_ok[self._interp.path] = out.returncode == 0
            except (OSError, subprocess.SubprocessError):
                _plain_drop_ok[self._interp.path] = False
        return _plain_drop_ok[self._interp.path]

    def _user_kwargs(self, isolation: str) -> dict[str, Any]:
        """Popen arguments that switch to the sandbox uid (plain mode only; inside bwrap setpriv does it)."""
        if self._lease is None or isolation == "bwrap":
            return {}
        return {"user": self._lease.uid, "group": self._lease.gid, "extra_groups": []}

    def _env(self, isolation: str) -> dict[str, str]:
        inside = isolation == "bwrap"
        home = BWRAP_WORKDIR if inside else str(self.workdir)
        env = {
            "PATH": f"{os.path.dirname(self._interp.path)}:/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "TMPDIR": "/tmp" if inside else str(self._tmpdir),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        env.update(self.config.extra_env)
        return env

    def _wrap(self, argv: list[str], force_bwrap: bool = False, chdir: str = BWRAP_WORKDIR) -> list[str]:
        """The full command line: ``argv`` alone, or inside bwrap (and setpriv when dropping root)."""
        if not force_bwrap and self.isolation != "bwrap":
            return argv
        bw = [
            bwrap_path() or "bwrap",
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
        bw += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--bind",
            str(self.workdir),
            BWRAP_WORKDIR,
            "--bind",
            str(self._tmpdir),
            "/tmp",
        ]
        made: set[str] = {"/", "/usr", "/etc", "/bin", "/lib", "/lib64", "/sbin", "/tmp", "/proc", "/dev"}
        for root in self._interp.roots:
            if root == "/usr" or root.startswith("/usr/"):
                continue
            for parent in reversed(PurePosixPath(root).parents):
                p = str(parent)
                if p not in made:
                    bw += ["--perms", "0755", "--dir", p]  # bwrap would copy a 0700 /root otherwise
                    made.add(p)
            bw += ["--ro-bind", root, root]
            made.add(root)
        bw += ["--chdir", chdir, "--"]
        if self._lease is not None:
            uid = str(self._lease.uid)
            bw += [
                shutil.which("setpriv") or "setpriv",
                "--reuid",
                uid,
                "--regid",
                uid,
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
            ]
        return bw + argv

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
        proc_env = self._env(self.isolation)
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
                **self._user_kwargs(self.isolation),
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
        await asyncio.wait({waiter, flooded}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        timed_out = not waiter.done() and not flood.is_set()
        output_exceeded = flood.is_set()
        if not waiter.done():
            self._kill_group(proc.pid)
            await asyncio.wait({waiter}, timeout=0.5)
        await asyncio.to_thread(self._kill_leftovers, proc.pid)  # background children, setsid escapes
        await asyncio.wait(set(readers), timeout=0.3)
        for task in (*readers, feeder, flooded):
            task.cancel()
        if waiter.done():
            try:  # let the transport see its pipes close, so nothing is left for the garbage collector
                await asyncio.wait_for(proc.wait(), 0.2)
            except (TimeoutError, ProcessLookupError):
                pass
        if not waiter.done():  # unkillable (should not happen): report a sandbox failure, do not hang
            waiter.cancel()
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
        return {"backend": "local", "isolation": self.isolation, "uid": self.uid}

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
