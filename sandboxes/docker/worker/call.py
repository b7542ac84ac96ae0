"""One running call of the docker worker, watched to its end (standard library only).

:func:`supervise` feeds the program's stdin, collects its output up to the cap, and waits for its exit or its
deadline; on a timeout, a flood or anything left behind it has the worker end every process of the call before
the answer goes out.
"""

import base64
import os
import selectors
import time

from sandboxes.docker.worker.procs import REAPED
from sandboxes.docker.worker.program import _decode_status


class Call:
    """The descriptors of one running call: stdin to feed, output to read, where the status comes."""

    def __init__(self, pid, in_w, out_r, err_r, status_fd, pidfd=None):
        self.pid, self.in_w, self.out_r, self.err_r, self.status_fd = pid, in_w, out_r, err_r, status_fd
        self.pidfd = pidfd  #: the program process's pidfd, readable once it has exited


def supervise(worker, call, stdin_data, timeout, cap, start):
    """Feed stdin, collect capped output, and wait for the call's end or its deadline.

    The usual end is the exit of the program process (a spare, or the stateful session, which a fork of it carries on
    after the call), its status as the kernel reports it (``waitpid``); then, when the pipes are at their end
    (nothing left behind holds them), the answer goes out at once and the process
    tree is cleaned up after it (``Worker.after_response``). Otherwise (timeout,
    flood, a crash, something left behind holding the pipes) every process is
    killed before answering.
    """
    pid, in_w, out_r, err_r = call.pid, call.in_w, call.out_r, call.err_r
    sel = selectors.DefaultSelector()
    bufs = {out_r: bytearray(), err_r: bytearray()}
    owned = {in_w, out_r, err_r}  # descriptors this call must close
    if call.status_fd is not None:
        owned.add(call.status_fd)
        sel.register(call.status_fd, selectors.EVENT_READ)
    sel.register(out_r, selectors.EVENT_READ)
    sel.register(err_r, selectors.EVENT_READ)
    pending = memoryview(stdin_data)
    if pending:
        os.set_blocking(in_w, False)
        sel.register(in_w, selectors.EVENT_WRITE)
    else:
        os.close(in_w)
        owned.discard(in_w)
        in_w = -1  # its number may be reused below
    watch = call.pidfd
    if watch is not None:
        owned.add(watch)
        sel.register(watch, selectors.EVENT_READ)
    deadline = start + timeout
    timed_out = exceeded = done = reaped = session_died = status_seen = exited = False
    started = call.status_fd is None  #: a spare says "S" when it has its code, before the code runs
    exit_code = None
    while not done:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        poll = remaining if watch is not None else min(remaining, 0.005)
        for key, _ in sel.select(poll):
            fd = key.fd
            if fd == in_w:
                try:
                    pending = pending[os.write(in_w, pending[:65536]) :]
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:  # the program closed its stdin
                    pending = memoryview(b"")
                if not pending:
                    sel.unregister(in_w)
                    os.close(in_w)
                    owned.discard(in_w)
                    in_w = -1
            elif fd in bufs:
                chunk = os.read(fd, 65536)
                if not chunk:
                    sel.unregister(fd)
                    continue
                bufs[fd] += chunk
                if len(bufs[fd]) > cap:
                    del bufs[fd][cap:]
                    exceeded = done = True
            elif fd == call.status_fd:
                try:
                    started = os.read(fd, 1) == b"S"
                except OSError:
                    pass
                sel.unregister(fd)  # its only message; the status is the process's exit
                if started:
                    continue
                exited = done = True  # the spare died before its code came
            elif fd == watch:
                exited = done = True
        if pid is not None and watch is None and not done:
            try:
                wpid, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped by the SIGCHLD handler
                wpid, status = pid, REAPED.pop(pid, 0)
            if wpid == pid:
                exit_code, reaped, done, status_seen = _decode_status(status), True, True, started
    for fd in (call.status_fd, watch):
        if fd is not None and fd in sel.get_map():
            sel.unregister(fd)
    if pid is not None and exited and not reaped:
        exit_code, reaped = wait_exit(pid), True
        status_seen = started
    at_end = exiting = False
    if not (timed_out or exceeded):
        exceeded, at_end = drain(sel, bufs, cap, wait=0.0)
    if not (status_seen and at_end and not exceeded):
        # The slow path: kill the whole tree now, then collect what is left in the pipes.
        if pid == worker.session_pid:  # the session, or the fork that carries it on, ends with the call's tree
            worker.stop_session()
            session_died = True
        _, exiting = worker.end_others(wait=False)  # all signalled at once: nothing of the call runs again
        if pid is not None and not reaped and not (exiting and (timed_out or exceeded)):
            code = wait_exit(pid)
            if not status_seen:
                exit_code = code
        # What was written before the kill is in the pipes now; only processes still running could add to it.
        more, _ = drain(sel, bufs, cap, wait=0.0 if exiting else 0.5)
        exceeded = exceeded or more
    elif pid is not None and not reaped:
        worker.finished = pid
    if timed_out or exceeded:
        exit_code = None
    sel.close()
    for fd in owned:
        os.close(fd)
    return {
        "exit_code": exit_code,
        "timed_out": timed_out,
        "output_exceeded": exceeded,
        "session_died": session_died,
        "started": started,
        "exiting": exiting,
        "stdout": base64.b64encode(bytes(bufs[out_r])).decode(),
        "stderr": base64.b64encode(bytes(bufs[err_r])).decode(),
    }


def wait_exit(pid):
    """Reap the program process; its exit status, negative for a signal."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        if pid not in REAPED:
            return None
        status = REAPED.pop(pid)
    return _decode_status(status)


def drain(sel, bufs, cap, wait):
    """Read what the output pipes still hold, until their end or ``wait`` seconds.

    Returns (passed the cap, both pipes at their end).
    """
    exceeded = False
    deadline = time.monotonic() + wait
    while True:
        if not any(k.fd in bufs for k in sel.get_map().values()):
            return exceeded, True
        progressed = False
        for key, _ in sel.select(max(0.0, deadline - time.monotonic())):
            try:
                chunk = os.read(key.fd, 65536)
            except OSError:
                chunk = b""
            progressed = True
            if not chunk:
                sel.unregister(key.fd)
                continue
            room = cap - len(bufs[key.fd])
            if len(chunk) > room:
                exceeded = True
            bufs[key.fd] += chunk[: max(room, 0)]
        if not progressed and time.monotonic() >= deadline:
            return exceeded, False
