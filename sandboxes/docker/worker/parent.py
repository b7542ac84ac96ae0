"""The clean parents: the processes every program process is forked from (standard library only).

The worker reads each request and writes each answer, so its heap holds freed copies of them; a program forked
from it would find earlier calls' code and output in its own memory, across rollouts too. A clean parent never
holds one. The worker starts a *bare* clean parent as a fresh interpreter (a fork that calls ``exec`` at once, so
nothing of the worker's memory comes with it), which imports nothing more; its first fork is the *warm* clean
parent, which imports the preloaded modules and then serves in its place. From then on a clean parent only forks.
The worker hands it the new process's pipe ends (``SCM_RIGHTS``), never a request: the program process reads its
code itself from its control pipe, and its output goes to the worker. It forks with ``clone(CLONE_PARENT)``, so
the program process is the worker's child, not its own, and its exit status is the kernel's, read by the worker
(``waitpid``).

A program runs as the clean parents' uid and can signal them: they ignore every signal they can, they are not
dumpable, the worker continues them (``SIGCONT``) before each request, and its sweeps keep them alive. When a
program has killed them, the worker starts a new bare one before the next program process (an interpreter's
start, not counted against that call's timeout); the imports of the warm one, which the worker stops while a call
runs, never hold up a call.
"""

import ctypes
import gc
import json
import os
import select
import signal
import socket
import sys
import time

from sandboxes.docker.worker.procs import dying
from sandboxes.docker.worker.program import (
    ROLES,
    SPARE_OOM_SCORE,
    _oom_score,
    collapse_heap,
    fork,
    limit_program_memory,
    refuse_kill_all,
    set_dumpable,
    shield_signals,
)

#: The descriptor of the clean parent's end of its socket to the worker.
PARENT_FD = 3
#: Seconds the worker waits for a new clean parent's imports, and for the answer to one request.
START_WAIT = 600.0
REPLY_WAIT = 30.0
#: The largest message on the socket (a request names a role and the work dir; an answer a pid or an error).
_MESSAGE = 1 << 16


def serve(config):
    """The bare clean parent's life, in a fresh interpreter: guard itself, say so, then fork one process per request.

    It imports nothing more: it answers the first request within an interpreter's start. Its first request is for
    the warm clean parent (:func:`_warm`), which it forks and which then replaces it.
    """
    # First, before anything a program could reach: behind the programs, before the worker, in the OOM killer's
    # choice (inherited by what it forks; a process that is not dumpable cannot write its own ``/proc`` files),
    # then not dumpable, so no program can trace it or open its descriptors.
    _oom_score(SPARE_OOM_SCORE)
    set_dumpable(False)
    refuse_kill_all()  # no program forked from here ends the clean parents and the spares with one kill(-1)
    sock = socket.socket(fileno=PARENT_FD)
    shield_signals()
    limit_program_memory(config.get("program_memory"))
    sock.send(json.dumps({"pid": os.getpid(), "preloaded": [], "hugepages_mb": 0}).encode())
    _fork_forever(sock, config)


def _warm(config, fds, workdir):
    """The warm clean parent's life, forked by the bare one (so never dumpable, and never holding a request): import
    the preloaded modules (the worker stops it while a call runs, so a program forked meanwhile from the bare one is
    not slowed by them), say so, then fork one process per request."""
    (fd,) = fds
    sock = socket.socket(fileno=fd)
    preloaded = []
    for name in config.get("preload", ()):
        try:
            __import__(name)
            preloaded.append(name)
        except Exception:  # noqa: BLE001 - a missing optional module is reported by ping
            pass
    gc.freeze()  # the preloaded objects stay out of the collector's way (fewer copy-on-write faults after fork)
    hugepages = collapse_heap() if config.get("hugepages", True) else 0
    sock.send(json.dumps({"pid": os.getpid(), "preloaded": preloaded, "hugepages_mb": hugepages}).encode())
    _fork_forever(sock, config)


def _fork_forever(sock, config):
    """Answer each request (a role, a work dir and the new process's descriptors) with the pid of a process forked
    for it; exit when the worker is gone."""
    roles = dict(ROLES, parent=lambda fds, workdir: _warm(config, fds, workdir))
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, _MESSAGE, 8)
        except OSError:
            os._exit(0)
        if not message:
            os._exit(0)  # the worker is gone
        try:
            request = json.loads(message)
            reply = {"pid": _fork_sibling(sock, roles[request["role"]], fds, request["workdir"])}
        except Exception as exc:  # noqa: BLE001 - the worker is told, and the clean parent lives on
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            for fd in fds:
                os.close(fd)
        try:
            sock.send(json.dumps(reply).encode())
        except OSError:
            os._exit(0)


#: ``clone`` by machine (its first argument is the flags on each; the others stay 0, as ``fork`` passes them).
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}
_CLONE_PARENT = 0x00008000


def _clone_sibling():
    """``os.fork``, but the child is the caller's parent's child (``clone(CLONE_PARENT)``): Python's own set-up
    around a fork (``PyOS_BeforeFork`` and after) around the system call. Only in a process of one thread."""
    number = _SYS_CLONE.get(os.uname().machine)
    if number is None:
        raise OSError(f"the clean parent cannot fork on {os.uname().machine} (no clone number known)")
    api = ctypes.PyDLL(None, use_errno=True)  # calls with the GIL held, as ``os.fork`` does
    api.syscall.restype = ctypes.c_long
    args = [ctypes.c_long(value) for value in (number, _CLONE_PARENT | signal.SIGCHLD, 0, 0, 0, 0)]
    api.PyOS_BeforeFork()
    pid = api.syscall(*args)
    errno = ctypes.get_errno()
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(errno, os.strerror(errno))
    return pid


def _fork_sibling(sock, run, fds, workdir):
    """Fork a process that runs ``run(fds, workdir)`` as a child of the worker; return its pid."""
    pid = fork(clone=_clone_sibling)
    if pid == 0:
        try:
            sock.close()
            run(fds, workdir)  # never returns
        finally:
            os._exit(70)
    return pid


class ParentGone(OSError):
    """No clean parent could be started, or none answered."""


class _Process:
    """One clean parent as the worker holds it: its pid, its socket, its pidfd, and its hello once it is ready."""

    def __init__(self, pid, sock):
        self.pid, self.sock, self.hello = pid, sock, None
        try:  # the process itself, not its pid, which another may take once it is gone
            self.pidfd = os.pidfd_open(pid)
        except OSError:
            self.pidfd = None

    def gone(self):
        """Whether it has exited or closed its socket (its pid is then never kept)."""
        if self.pidfd is None:
            return True
        ready, _, _ = select.select([self.sock, self.pidfd], [], [], 0)
        if self.pidfd in ready:
            return True
        if self.sock in ready:  # a hello still unread, or the end
            try:
                return not self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                return False
            except OSError:
                return True
        return False

    def hear(self, deadline=None, req_fd=None):
        """Wait until ``deadline`` (None: not at all) for its hello: ``"ready"``, ``"gone"``, or ``"waiting"`` (the
        time ran out, or a request came on ``req_fd`` first)."""
        while self.hello is None:
            if self.pidfd is None:
                return "gone"
            remaining = 0.0 if deadline is None else max(0.0, deadline - time.monotonic())
            watch = [self.sock, self.pidfd] + ([] if req_fd is None else [req_fd])
            ready, _, _ = select.select(watch, [], [], remaining)
            if self.sock in ready:
                try:
                    message = self.sock.recv(_MESSAGE)
                except OSError:
                    message = b""
                if not message:
                    return "gone"
                self.hello = json.loads(message)
            elif self.pidfd in ready:
                return "gone"
            elif ready or not remaining:
                return "waiting"
        return "ready"

    def stop(self):
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except OSError:
                pass
            os.close(self.pidfd)
            self.pidfd = None
        self.sock.close()


class CleanParent:
    """The worker's side: start the clean parents, ask them for program processes, replace one that is gone.

    Two kinds: a *bare* clean parent is a fresh interpreter that imports nothing more, so it serves within an
    interpreter's start; its first fork is the *warm* clean parent, which imports the preloaded modules meanwhile
    and, once ready, serves instead of it (the bare one is ended). A program can kill them (same uid): the next
    program process then waits only for a new bare one, and forks from it import what they need themselves until a
    warm one is ready.

    ``command`` starts an interpreter that runs this package's ``main()`` with a configuration as its last
    argument (the worker's own command line without that argument); ``config`` is the worker's configuration;
    ``sweep`` ends every process but the worker's kept ones, before a fresh interpreter starts.
    """

    def __init__(self, command, config, sweep=lambda: None):
        self.command = list(command)
        self.config = dict(config, role="parent")
        self.sweep = sweep
        self.serving = None  #: the clean parent that forks program processes now
        self.warming = None  #: a warm clean parent still importing its modules
        self.warm = False  #: whether the serving one is warm
        self.held = False  #: whether a call runs (a warm clean parent still importing is stopped meanwhile)
        self.starts = 0  #: fresh interpreters started
        self.waited = 0.0  #: seconds spent waiting for a new clean parent, summed

    @property
    def hello(self):
        return None if self.serving is None else self.serving.hello

    def pids(self):
        """The clean parents' pids, to keep when the worker ends other processes."""
        return [proc.pid for proc in (self.serving, self.warming) if proc is not None and not proc.gone()]

    def refresh(self):
        """Forget a clean parent that is gone; let a warm one that has become ready serve."""
        if self.warming is not None:
            heard = self.warming.hear()
            if heard == "ready":
                if self.serving is not None:
                    self.serving.stop()
                try:  # it may have been stopped while a call ran; it serves now
                    signal.pidfd_send_signal(self.warming.pidfd, signal.SIGCONT)
                except (OSError, TypeError):
                    pass
                self.serving, self.warming, self.warm = self.warming, None, True
            elif heard == "gone":
                self.warming.stop()
                self.warming = None
        if self.serving is not None and self.serving.gone():
            self.serving.stop()
            self.serving, self.warm = None, False

    def _start(self):
        """Start a bare clean parent: a fresh interpreter (``exec``, so nothing of the worker's memory comes with
        it), from ``/`` and without the user site, so that it imports nothing a program wrote.

        A process is dumpable from its ``exec`` until it makes itself not dumpable, first thing: every process but
        the worker's kept ones (none of which runs a program) is ended before, and no program gets its code before
        this one's hello, which it sends after.
        """
        self.sweep()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-s", *self.command[1:], json.dumps(self.config)]
        try:
            pid = fork()
        except BaseException:
            ours.close()
            theirs.close()
            raise
        if pid == 0:
            try:
                os.chdir("/")  # ``sys.path`` starts with the current dir: the read-only root
                if theirs.fileno() == PARENT_FD:
                    os.set_inheritable(PARENT_FD, True)
                else:
                    os.dup2(theirs.fileno(), PARENT_FD)
                os.execv(sys.executable, argv)
            finally:
                os._exit(127)
        theirs.close()
        self.serving, self.warm = _Process(pid, ours), False
        self.starts += 1

    def _warm_up(self):
        """Have the serving (bare) clean parent fork the warm one."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            reply = self._ask({"role": "parent", "workdir": "/"}, [theirs.fileno()])
        finally:
            theirs.close()
        if reply is None or "pid" not in reply:
            ours.close()
            return
        self.warming = _Process(reply["pid"], ours)
        self.hold_warming(self.held)

    def hold_warming(self, held):
        """Stop (``held``) or continue a warm clean parent still importing, and one forked from now on: while a call
        runs its program, forked from the bare one, gets the container's cpu."""
        self.held = held
        if self.warming is not None and self.warming.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.warming.pidfd, signal.SIGSTOP if held else signal.SIGCONT)
            except OSError:
                pass

    def stop(self):
        for proc in (self.serving, self.warming):
            if proc is not None:
                proc.stop()
        self.serving = self.warming = None
        self.warm = False

    def lost(self):
        """Whether the next program process may wait for a new clean parent: none serves, or the one that does is
        on its way out (a program sent it a SIGKILL)."""
        return self.serving is None or self.serving.hello is None or self.serving.gone() or dying(self.serving.pid)

    def ready(self, wait=START_WAIT, req_fd=None, warm=False):
        """Make sure a clean parent serves (starting a bare one if none does) and a warm one serves or is on its way;
        with ``warm``, wait for the warm one. Waits up to ``wait`` seconds; False when a request came on ``req_fd``
        first or the time ran out. Raises :class:`ParentGone` when clean parents keep exiting while they start."""
        began = time.monotonic()
        deadline = began + wait
        try:
            for _ in range(3):
                self.refresh()
                if self.serving is not None and dying(self.serving.pid):  # a fork it would never answer
                    self.serving.stop()
                    self.serving, self.warm = None, False
                if self.serving is None:
                    self._start()
                heard = self.serving.hear(deadline, req_fd)
                if heard == "gone":
                    self.serving.stop()
                    self.serving = None
                    continue
                if heard == "waiting":
                    return False
                if self.warming is None and not self.warm:
                    self._warm_up()
                if warm and not self.warm:
                    heard = "gone" if self.warming is None else self.warming.hear(deadline, req_fd)
                    if heard == "waiting":
                        return False
                    self.refresh()
                    if not self.warm:
                        continue
                return True
            raise ParentGone("the clean parent exited while it started, three times")
        finally:
            self.waited += time.monotonic() - began

    def spawn(self, role, fds, workdir):
        """Have the serving clean parent fork a program process of ``role``
        (:data:`sandboxes.docker.worker.program.ROLES`) that holds ``fds``: its pid (a child of the worker), and
        whether it was forked from a warm clean parent. A clean parent that does not answer is replaced."""
        for _ in range(3):
            if not self.ready():
                raise ParentGone(f"no clean parent started within {START_WAIT:.0f} s")
            warm, asked = self.warm, time.monotonic()
            reply = self._ask({"role": role, "workdir": workdir}, fds)
            if reply is not None:
                if "pid" not in reply:
                    raise OSError(f"the clean parent could not fork: {reply.get('error')}")
                return reply["pid"], warm
            self.waited += time.monotonic() - asked  # a clean parent that died meanwhile: not the call's time
            self.serving.stop()
            self.serving, self.warm = None, False
        raise ParentGone("the clean parent did not answer")

    def _ask(self, request, fds):
        """Send one request with ``fds`` to the serving clean parent; its answer, or None when it is gone or does
        not answer."""
        proc = self.serving
        try:
            signal.pidfd_send_signal(proc.pidfd, signal.SIGCONT)  # a program may have stopped it
            socket.send_fds(proc.sock, [json.dumps(request).encode()], fds)
        except (OSError, TypeError):
            return None
        deadline = time.monotonic() + REPLY_WAIT
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.sock], [], [], 0.5)
            if ready:
                try:
                    message = proc.sock.recv(_MESSAGE)
                except OSError:
                    return None
                return json.loads(message) if message else None
            try:
                signal.pidfd_send_signal(proc.pidfd, signal.SIGCONT)
            except (OSError, TypeError):
                return None
        return None
