"""The program side of the sandbox worker: what a forked program process does (standard library only).

Set-up after the fork (own session, OOM victim, low priority, default signals), running
code as ``python3 -c`` would, the stateful session loop, and the *spare*: a program
process forked ahead of its call so that the fork is off the critical path.
"""

import builtins
import json
import os
import signal
import socket
import sys

from sandboxes.worker_wire import LEN as _LEN
from sandboxes.worker_wire import read_frame


def _child_setup(workdir):
    """What every forked program process does first: own session, OOM victim, default signals."""
    os.setsid()
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # the program, never the worker, is what the OOM killer takes
    except OSError:
        pass
    try:
        # Inside the container's CPU share, the worker must win against a fork bomb to end it in time;
        # a program alone in its container runs at full speed whatever its niceness.
        os.nice(19)
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
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

    linecache.cache["<string>"] = (len(code), None, code.splitlines(True), "<string>")
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


def _decode_status(status):
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _fresh_namespace():
    return {"__name__": "__main__", "__builtins__": builtins, "__doc__": None}


def _session_loop(sock, workdir):
    """The stateful session: receive (code, stdio fds), run it in the kept namespace, report."""
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
        for target in (0, 1, 2):  # release the call's pipes so that the worker sees their end
            os.dup2(devnull, target)
        body = json.dumps({"exit_code": status}).encode()
        sock.sendall(_LEN.pack(len(body)) + body)


class _Spare:
    """A program process forked ahead of its call (so the fork is off the critical path).

    It is set up completely (own session, stdio on fresh pipes, work dir) and waits
    for its code on a control pipe; after running it, it releases its stdio and
    writes its exit status to a status pipe.
    """

    def __init__(self, workdir):
        in_r, self.in_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        ctl_r, self.ctl_w = os.pipe()
        self.st_r, st_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            status = 70
            try:
                for fd in (self.in_w, self.out_r, self.err_r, self.ctl_w, self.st_r):
                    os.close(fd)
                _child_setup(workdir)
                _bind_stdio(in_r, out_w, err_w)
                ctl = os.dup2(ctl_r, 3)
                st = os.dup2(st_w, 4)
                os.closerange(5, 1024)
                request = read_frame(ctl)
                if request is None:
                    os._exit(0)
                os.close(ctl)
                status = execute(request["code"], _fresh_namespace())
                _join_threads()
                devnull = os.open(os.devnull, os.O_RDWR)
                for target in (0, 1, 2):  # release the pipes so that the worker sees their end
                    os.dup2(devnull, target)
                os.write(st, _LEN.pack(status))
            finally:
                os._exit(status)
        for fd in (in_r, out_w, err_w, ctl_r, st_w):
            os.close(fd)

    def discard(self):
        for fd in (self.in_w, self.out_r, self.err_r, self.ctl_w, self.st_r):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
