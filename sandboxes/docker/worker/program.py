"""The program side of the sandbox worker: what a forked program process does (standard library only).

Set-up after the fork (own session, OOM victim, low priority, default signals), running
code as ``python3 -c`` would, the stateful session loop, and the *spare*: a program
process forked ahead of its call so that the fork is off the critical path.
"""

import builtins
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

try:  # standard library, but an interpreter may be built without it
    import ctypes

    _libc = ctypes.CDLL(None, use_errno=True)
    _prctl = _libc.prctl
except (ImportError, OSError, AttributeError):
    _libc = _prctl = None

from sandboxes.docker.worker.procs import dying
from sandboxes.docker.worker.wire import LEN as _LEN
from sandboxes.docker.worker.wire import read_frame

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25


def fork(attempts=50, clone=os.fork):
    """``os.fork`` (or ``clone``, which forks the same way), retried while the container's pid or memory limit
    refuses it for a moment.

    Killed processes count against the pid limit until they are reaped (the worker's SIGCHLD handler
    reaps them meanwhile), and a program the OOM killer just ended may still be releasing its memory:
    the worker waits (up to about two seconds in all) rather than die of a limit its program ran into.
    """
    for attempt in range(attempts):
        try:
            return clone()
        except OSError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.002 * (attempt + 1))
    raise AssertionError("unreachable")


def set_dumpable(flag):
    """``prctl(PR_SET_DUMPABLE)``: a process that is not dumpable cannot be traced, nor its ``/proc/PID/fd``
    opened, by the programs (which run as the same uid). True when it took effect."""
    return _prctl is not None and _prctl(PR_SET_DUMPABLE, int(flag), 0, 0, 0) == 0


def set_subreaper():
    """``prctl(PR_SET_CHILD_SUBREAPER)``: the orphans among this process's descendants become its children (as they
    would of PID 1). True when it took effect."""
    return _prctl is not None and _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def collapse_heap():
    """Back the anonymous memory this process holds now with huge pages (``MADV_COLLAPSE``, Linux >= 6.1).

    A fork then copies one page-table entry per 2 MiB instead of 512, and a program's exit
    unmaps as few; pages the worker writes later are split back by the kernel, the rest (the
    preloaded modules, frozen) stay huge. Returns the MiB collapsed (0 where unsupported).
    """
    if _libc is None:
        return 0
    madvise = _libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    huge, done = 2 << 20, 0
    try:
        with open("/proc/self/maps") as f:
            maps = f.read().splitlines()
    except OSError:
        return 0
    for line in maps:
        parts = line.split()
        if parts[1] != "rw-p" or (len(parts) > 5 and parts[5] != "[heap]"):
            continue  # anonymous (or brk heap) private memory only
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        start, end = (lo + huge - 1) // huge * huge, hi // huge * huge
        if end > start and madvise(start, end - start, MADV_HUGEPAGE) == 0:
            if madvise(start, end - start, MADV_COLLAPSE) == 0:
                done += (end - start) >> 20
    return done


#: (audit arch, ``kill``'s number, the smallest number of another ABI or None) by machine
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 62, 0x40000000), "aarch64": (0xC00000B7, 129, None)}
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


def refuse_kill_all():
    """From now on, in this process and all it forks, ``kill(-1, sig)`` fails with ``ESRCH`` (as where there is no
    other process to signal) instead of signalling every process of the uid, and system calls of another ABI (which
    number ``kill`` otherwise) fail with ``ENOSYS``: a seccomp filter. True when it took effect.

    The clean parents install it, so no program can end them and the spares with one call; a program can still
    signal its own processes by pid or process group, and the worker's sweeps end them all after the call.
    """
    machine = _SECCOMP_ARCH.get(os.uname().machine)
    if _prctl is None or machine is None:
        return False
    arch, kill, other_abi = machine
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, errno_of = 0x7FFF0000, 0x00050000
    program = [
        (ld, 0, 0, 4),  # the call's audit arch
        (jeq, 0, 7, arch),
        (ld, 0, 0, 0),  # its number
        (jge, 5, 0, 0xFFFFFFFF if other_abi is None else other_abi),
        (jeq, 0, 3, kill),
        (ld, 0, 0, 16),  # the low half of its first argument, the pid
        (jeq, 0, 1, 0xFFFFFFFF),
        (ret, 0, 0, errno_of | 3),  # ESRCH
        (ret, 0, 0, allow),
        (ret, 0, 0, errno_of | 38),  # ENOSYS
    ]
    code = b"".join(struct.pack("=HBBI", *insn) for insn in program)
    buffer = ctypes.create_string_buffer(code)

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Fprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0


#: ``oom_score_adj`` of a program process: the first the OOM killer takes (raising it needs no privilege)
PROGRAM_OOM_SCORE = 1000
#: ``oom_score_adj`` of a spare waiting for its code and of the clean parent, which it inherits from: after the
#: programs, before the worker (which keeps its own)
SPARE_OOM_SCORE = 500


def _oom_score(value):
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError:
        pass


#: Bytes of data (heap and anonymous mappings) a program process may hold: its share of the container's memory
#: (sandboxes.docker.policy.memory_budget), set once by the worker; None: no limit of its own.
_program_memory = None


def limit_program_memory(nbytes):
    """Give every program process from now on at most ``nbytes`` of data (``RLIMIT_DATA``)."""
    global _program_memory
    _program_memory = nbytes


def _become_program():
    """What a forked process does right before it runs model code: traceable again, the OOM killer's victim,
    its memory bounded."""
    set_dumpable(True)  # the worker is not dumpable (see worker.main); the program's own /proc/self works
    _oom_score(PROGRAM_OOM_SCORE)  # the program, never the worker, is what the OOM killer takes
    if _program_memory:
        # An allocation past its share fails at once (MemoryError) instead of driving the whole container into
        # reclaim, where every process of it crawls until the OOM killer acts.
        resource.setrlimit(resource.RLIMIT_DATA, (_program_memory, _program_memory))


def _fresh_random_state():
    """Give the preloaded modules' random generators new seeds from the OS, as a fresh interpreter has.

    Otherwise every program forked from the worker draws the same numbers: an unseeded ``numpy.random.rand()``
    gives the same value in every call, where a fresh interpreter gives a new one. Python's own ``random``
    reseeds itself in a forked child.
    """
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        # a 32-bit seed goes straight to the generator; without one numpy draws through SeedSequence, which in a
        # forked process touches many times the pages
        numpy_random.seed(int.from_bytes(os.urandom(4), "little"))
    sympy_random = sys.modules.get("sympy.core.random")
    if sympy_random is not None:
        sympy_random.seed()


#: The signal dispositions a program starts with (as a fresh interpreter has them), kept by :func:`shield_signals`.
_program_signals = {}


def shield_signals():
    """Ignore every signal that can be ignored and would end or stop this process (the clean parent, which a program
    of the same uid can signal); keep the dispositions a program gets back (:func:`_child_setup`)."""
    for signum in signal.valid_signals():
        if signum in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD, signal.SIGCONT, signal.SIGWINCH, signal.SIGURG):
            continue
        try:
            handler = signal.getsignal(signum)
            _program_signals[signum] = signal.SIG_DFL if handler is None else handler
            signal.signal(signum, signal.SIG_IGN)
        except (OSError, ValueError, TypeError):
            _program_signals.pop(signum, None)


def _child_setup(workdir, program=True):
    """What every forked program process does first: own session, OOM victim, default signals.

    A spare (``program=False``) stays not dumpable, and behind the programs in the OOM killer's choice (its clean
    parent's score, :data:`SPARE_OOM_SCORE`), until its code comes.
    """
    os.setsid()
    if program:
        _become_program()
    try:
        # Inside the container's CPU share, the worker must win against a fork bomb to end it in time: a program
        # runs, and its teardown exits, at idle priority, which the worker preempts as soon as it wakes (and which
        # an unprivileged program cannot leave). A program alone in its container runs at full speed all the same
        # (the policy orders tasks within the container, not between containers).
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        pass
    _fresh_random_state()
    for signum, handler in _program_signals.items():  # what the clean parent ignores, the program gets back
        signal.signal(signum, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        os.chdir(workdir)
    except OSError:
        os.chdir("/tmp")
    if workdir not in sys.path:
        sys.path.insert(0, workdir)


def _bind_stdio(stdin_fd, stdout_fd, stderr_fd):
    import io

    for fd, target in ((stdin_fd, 0), (stdout_fd, 1), (stderr_fd, 2)):
        if fd != target:
            os.dup2(fd, target)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "rb", closefd=False), encoding="utf-8", errors="replace")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "wb", closefd=False), encoding="utf-8", errors="backslashreplace")
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "wb", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: B036 - the program may have broken its own streams
            pass


def execute(code, namespace):
    """Run ``code`` in ``namespace`` as ``python3 -c`` would; return its exit status."""
    import linecache
    import traceback

    lines = [line + "\n" for line in code.replace("\r\n", "\n").replace("\r", "\n").split("\n")]  # as Python splits
    linecache.cache["<string>"] = (len(code), None, lines, "<string>")
    status = 0
    try:
        exec(compile(code, "<string>", "exec"), namespace)
    except SystemExit as exc:
        if exc.code is None:
            status = 0
        elif isinstance(exc.code, int):
            status = exc.code & 0xFF
        else:
            print(exc.code, file=sys.stderr)
            status = 1
    except BaseException as exc:  # noqa: B036 - report every exception like the interpreter would
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # drop this frame
        try:
            traceback.print_exception(type(exc), exc, tb)
        except BaseException:  # noqa: B036
            os.write(2, f"{type(exc).__name__}\n".encode())
        status = 1
    _flush()
    return status


def _join_threads():
    """Wait for the program's non-daemon threads, as the interpreter does at the end of ``python -c``."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:  # noqa: B036 - the program may have broken threading itself
            pass
        _flush()


def _revive_threading():
    """In the session's next process: undo what :func:`_join_threads` (the end of the call before) did to
    ``threading`` and ``concurrent.futures``, so that the next call starts threads and executors as a fresh
    interpreter does (CPython's internals; where they differ, left as they are)."""
    threading = sys.modules.get("threading")
    if threading is None:
        return
    try:
        main = threading.main_thread()
        if getattr(main, "_is_stopped", False) and getattr(main, "_tstate_lock", False) is None:
            lock = threading._set_sentinel()
            lock.acquire()
            main._tstate_lock, main._is_stopped = lock, False
        if getattr(threading, "_SHUTTING_DOWN", False):
            threading._SHUTTING_DOWN = False
        futures = sys.modules.get("concurrent.futures.thread")
        if getattr(futures, "_shutdown", False):
            futures._shutdown = False
    except Exception:  # noqa: BLE001 - the program may have broken threading itself
        pass


def _decode_status(status):
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _fresh_namespace():
    return {"__name__": "__main__", "__builtins__": builtins, "__doc__": None}


def _session_loop(sock, workdir):
    """The stateful session: receive (code, stdio fds), run it in the kept namespace, and end with its status.

    Nothing goes back to the worker on ``sock``: its sending side is shut down before any code runs, and no program
    can open it again. Each call ends this process with the call's exit status, which the worker reads from the
    kernel (``waitpid``); just before, a fork carries the namespace on to the next call (the worker, the subreaper of
    the session's processes, adopts it). Threads the program started end with the call: non-daemon ones are waited
    for, as ``python -c`` does.
    """
    sock.shutdown(socket.SHUT_WR)
    namespace = _fresh_namespace()
    devnull = os.open(os.devnull, os.O_RDWR)
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 4, 3)
        except OSError:
            os._exit(0)
        if len(msg) < 4 or len(fds) != 3:
            os._exit(0)
        rest = b""
        size = _LEN.unpack(msg)[0]
        while len(rest) < size:
            chunk = sock.recv(size - len(rest))
            if not chunk:
                os._exit(0)
            rest += chunk
        _bind_stdio(*fds)
        for fd in fds:
            os.close(fd)
        status = execute(rest.decode("utf-8", "replace"), namespace)
        _join_threads()  # as at the end of ``python -c``: exit hooks (an open executor shuts down), threads joined
        for target in (0, 1, 2):  # release the call's pipes so that the worker sees their end
            os.dup2(devnull, target)
        try:
            if fork() != 0:
                os._exit(status)
        except OSError:  # no successor: the state is lost, and the worker says so
            os._exit(status)
        _revive_threading()


def run_spare(fds, workdir):
    """A spare's life in its own process (forked by the clean parent, :mod:`sandboxes.docker.worker.parent`): wait
    for the code on the control pipe, say on the status pipe that it came, close that pipe, run the code, exit with
    its status. ``fds`` are the ends the worker handed over: stdin, stdout, stderr, control, status."""
    status = 70
    try:
        in_r, out_w, err_w, ctl_r, st_w = fds
        _child_setup(workdir, program=False)
        _bind_stdio(in_r, out_w, err_w)
        ctl = os.dup2(ctl_r, 3)
        st = os.dup2(st_w, 4)
        os.closerange(5, 1024)
        request = read_frame(ctl)
        if request is None:
            os._exit(0)
        os.close(ctl)
        os.write(st, b"S")  # the code came: from here on a death is the program's
        os.close(st)  # nothing the program holds reports a status: the worker reads it from its exit
        _become_program()
        status = execute(request["code"], _fresh_namespace())
        _join_threads()
    finally:
        os._exit(status)


def run_session(fds, workdir):
    """The stateful session's life in its own process: ``fds`` is its end of the worker's socket."""
    try:
        (keep,) = fds
        os.closerange(3, keep)
        os.closerange(keep + 1, 1024)
        _child_setup(workdir)
        _session_loop(socket.socket(fileno=keep), workdir)
    finally:
        os._exit(70)


#: What each kind of program process runs once forked, by the name the worker asks for.
ROLES = {"spare": run_spare, "session": run_session}


class _Spare:
    """A program process forked ahead of its call (so the fork is off the critical path).

    The clean parent forks it (:meth:`sandboxes.docker.worker.parent.CleanParent.spawn`), and it becomes the
    worker's child. It is set up completely (own session, stdio on fresh pipes, work dir) and waits
    for its code on a control pipe; it says on a status pipe that the code came, closes
    that pipe, and runs the code (:func:`run_spare`): its exit status is what the kernel reports of its exit
    (``waitpid``), which no program can write. Until its code comes it is not dumpable
    (inherited from the clean parent), so a program running meanwhile cannot open its pipes
    through ``/proc`` nor trace it; it can kill or stop it, which the worker checks
    before it hands the spare a call (:meth:`usable`).
    """

    def __init__(self, parent, workdir):
        in_r, self.in_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        ctl_r, self.ctl_w = os.pipe()
        self.st_r, st_w = os.pipe()
        try:
            #: forked from a warm clean parent (one forked from a bare one imports what it needs itself)
            self.pid, self.warm = parent.spawn("spare", [in_r, out_w, err_w, ctl_r, st_w], workdir)
        except BaseException:
            for fd in (self.in_w, self.out_r, self.err_r, self.ctl_w, self.st_r):
                os.close(fd)
            raise
        finally:
            for fd in (in_r, out_w, err_w, ctl_r, st_w):
                os.close(fd)
        try:  # the process itself, not its pid, which another may take once it is gone
            self.pidfd = os.pidfd_open(self.pid)
        except OSError:
            self.pidfd = None

    def alive(self):
        """Whether the spare's process has not exited."""
        return self.pidfd is not None and not select.select([self.pidfd], [], [], 0)[0]

    def usable(self):
        """Whether the spare is still waiting for its code (a program may have killed or stopped it; one on its way
        out would die under its call)."""
        if not self.alive() or dying(self.pid):
            return False
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGCONT)  # undo a SIGSTOP a program may have sent it
        except OSError:
            return False
        return True

    def discard(self):
        """Close the worker's ends of the spare's pipes, and end its process."""
        for fd in (self.in_w, self.out_r, self.err_r, self.ctl_w, self.st_r):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (OSError, ChildProcessError):
                pass
            os.close(self.pidfd)
            self.pidfd = None
