"""The clean parent: the process every program process is forked from (standard library only).

The worker reads each request and writes each answer, so its heap holds freed copies of them; a program forked
from it would find earlier calls' code and output in its own memory, across rollouts too. The clean parent never
holds one: the worker starts it as a fresh interpreter (a fork that calls ``exec`` at once, so nothing of the
worker's memory comes with it), it imports the preloaded modules once, and from then on it only forks. The worker
hands it the new process's pipe ends (``SCM_RIGHTS``), never a request: the program process reads its code itself
from its control pipe, and its output goes to the worker. It forks with ``clone(CLONE_PARENT)``, so the program
process is the worker's child, not its own, and its exit status is the kernel's, read by the worker (``waitpid``),
as before.

A program runs as the clean parent's uid and can signal it: it ignores every signal it can, it is not dumpable,
the worker continues it (``SIGCONT``) before each request and starts a new one when it is gone (the next program
process waits for its imports, which do not count against that call's timeout). The worker's sweeps keep it alive.
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

from sandboxes.docker.worker.program import (
    ROLES,
    SPARE_OOM_SCORE,
    _oom_score,
    collapse_heap,
    fork,
    limit_program_memory,
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
    """The clean parent's life: import the preloaded modules, say so, then fork one program process per request."""
    # behind the programs, before the worker, in the OOM killer's choice, as the spares it forks (who inherit it: a
    # process that is not dumpable cannot write its own ``/proc`` files)
    _oom_score(SPARE_OOM_SCORE)
    set_dumpable(False)
    sock = socket.socket(fileno=PARENT_FD)
    shield_signals()
    limit_program_memory(config.get("program_memory"))
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
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, _MESSAGE, 8)
        except OSError:
            os._exit(0)
        if not message:
            os._exit(0)  # the worker is gone
        try:
            request = json.loads(message)
            reply = {"pid": _fork_sibling(sock, ROLES[request["role"]], fds, request["workdir"])}
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
    """The clean parent could not be started, or did not answer."""


class CleanParent:
    """The worker's side: start the clean parent, ask it for program processes, start a new one when it is gone.

    ``command`` starts an interpreter that runs this package's ``main()`` with a configuration as its last
    argument (the worker's own command line without that argument); ``config`` is the worker's configuration.
    """

    def __init__(self, command, config):
        self.command = list(command)
        self.config = dict(config, role="parent")
        self.pid = self.sock = self.pidfd = self.hello = None
        self.starts = 0
        self.waited = 0.0  #: seconds spent waiting for a new clean parent's imports, summed

    def start(self):
        """Start a new clean parent (the old one, if any, is killed); its imports go on while the worker works."""
        self.stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, *self.command[1:], json.dumps(self.config)]
        try:
            pid = fork()
        except BaseException:
            ours.close()
            theirs.close()
            raise
        if pid == 0:
            try:
                # ``sys.path`` starts with the current dir: from the read-only root, nothing a program wrote in the
                # work dir can be imported by the new interpreter
                os.chdir("/")
                if theirs.fileno() == PARENT_FD:
                    os.set_inheritable(PARENT_FD, True)
                else:
                    os.dup2(theirs.fileno(), PARENT_FD)
                os.execv(sys.executable, argv)
            finally:
                os._exit(127)
        theirs.close()
        self.pid, self.sock, self.pidfd = pid, ours, os.pidfd_open(pid)
        self.starts += 1

    def stop(self):
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except OSError:
                pass
            os.close(self.pidfd)
        if self.sock is not None:
            self.sock.close()
        self.pid = self.sock = self.pidfd = self.hello = None

    def alive(self):
        """Whether the clean parent runs (it may still be importing); a pid it no longer holds is never kept."""
        if self.pidfd is None:
            return False
        ready, _, _ = select.select([self.sock, self.pidfd], [], [], 0)
        if self.pidfd in ready:
            return False
        return not ready or self.hello is None  # a socket ready after the hello: its end

    def lost(self):
        """Whether the next program process may wait for a new clean parent: none is ready, or the one there has a
        SIGKILL on its way (a program sent it one; its exit may still be under way)."""
        if self.hello is None or not self.alive():
            return True
        try:
            with open(f"/proc/{self.pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            return True
        pending = int(fields.get("ShdPnd", "0"), 16) | int(fields.get("SigPnd", "0"), 16)
        return fields.get("State", "").split()[:1] in (["Z"], ["X"]) or bool(pending & (1 << (signal.SIGKILL - 1)))

    def ready(self, wait=START_WAIT, req_fd=None):
        """Wait up to ``wait`` seconds for the clean parent to have imported its modules (starting one if none
        runs); False when a request came on ``req_fd`` first or time ran out. Raises :class:`ParentGone` when it
        exited while starting."""
        if not self.alive():
            self.start()
        began = time.monotonic()
        try:
            while self.hello is None:
                remaining = began + wait - time.monotonic()
                if remaining <= 0:
                    return False
                watch = [self.sock] if req_fd is None else [self.sock, req_fd]
                ready, _, _ = select.select(watch, [], [], remaining)
                if self.sock in ready:
                    message = self.sock.recv(_MESSAGE)
                    if not message:
                        self.stop()
                        raise ParentGone("the clean parent exited while importing its modules")
                    self.hello = json.loads(message)
                elif ready:
                    return False
            return True
        finally:
            self.waited += time.monotonic() - began

    def spawn(self, role, fds, workdir):
        """Have the clean parent fork a program process of ``role`` (:data:`sandboxes.docker.worker.program.ROLES`)
        that holds ``fds``; its pid, a child of the worker. A clean parent that does not answer is replaced once."""
        for _ in range(2):
            if not self.ready():
                raise ParentGone(f"the clean parent did not import its modules within {START_WAIT:.0f} s")
            reply = self._ask({"role": role, "workdir": workdir}, fds)
            if reply is not None:
                if "pid" not in reply:
                    raise OSError(f"the clean parent could not fork: {reply.get('error')}")
                return reply["pid"]
            self.start()
        raise ParentGone("the clean parent did not answer")

    def _ask(self, request, fds):
        """Send one request with ``fds``; its answer, or None when the clean parent is gone or does not answer."""
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGCONT)  # a program may have stopped it
            socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
        except OSError:
            return None
        deadline = time.monotonic() + REPLY_WAIT
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.sock], [], [], 0.5)
            if ready:
                try:
                    message = self.sock.recv(_MESSAGE)
                except OSError:
                    return None
                return json.loads(message) if message else None
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGCONT)
            except OSError:
                return None
        return None
