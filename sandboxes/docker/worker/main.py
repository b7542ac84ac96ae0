"""The warm interpreter that runs inside a sandbox container (standard library only).

Started once per container (``python3 -c <loader> <config json>``: the loader of
:func:`sandboxes.docker.policy.worker_command` carries this module and its three
parts, :mod:`sandboxes.docker.worker.wire` (framing), :mod:`sandboxes.docker.worker.procs` (killing and
reaping) and :mod:`sandboxes.docker.worker.program` (the forked program side)), it imports
numpy and sympy once and then answers requests on its stdin with responses on
its stdout, each a frame of a 4-byte big-endian length and a UTF-8 JSON object.
Why: a fresh ``python3`` pays for importing numpy on every call; a ``fork`` of a warm one
does not, and a forked child still starts from a clean namespace.

Requests (``op``):

- ``ping``: answer ``{"ok": true, ...}`` (readiness and health).
- ``run``: run ``code`` with ``timeout``, ``stdin`` and ``files`` (base64), answer the
  outcome: ``exit_code`` (negative: killed by that signal), ``stdout``/``stderr``
  (base64, each capped at ``max_output`` bytes while it is produced), ``timed_out``,
  ``output_exceeded``, ``oom_killed``, ``state_lost``, ``duration``.
- ``reset``: kill every process but the worker, remove every IPC object, empty the
  work and temp dirs, forget the stateful session.

Modes: stateless (default) forks a child per call, so every call sees a fresh
namespace. Stateful keeps one forked *session* process whose namespace survives
from call to call, as in a notebook; each call's stdin/stdout/stderr are handed
to it as file descriptors over a Unix socket. A timeout kills the session (its
state is lost, and the answer says so).

After every call the whole process tree of the call is killed: every process in
the container except the worker (and the stateful session) is sent SIGKILL, which
also catches children that left the process group with ``setsid`` and processes whose
main thread has exited while another runs; then (stateless mode) every System V and
POSIX IPC object of the container is removed; with no session
to keep, the worker, as PID 1, does it in one ``kill(-1)`` that a fork bomb cannot
outrun. As PID 1 of the container the worker ignores signals it has no handler for, so the program
cannot kill it with ``kill(1, SIGKILL)``; it also reaps orphaned zombies.
"""

import base64
import gc
import json
import os
import select
import selectors
import signal
import socket
import sys
import time

from sandboxes.docker.worker import procs
from sandboxes.docker.worker.procs import (
    REAPED,
    empty_dir,
    kill_all,
    kill_others,
    oom_kills,
    other_pids,
    remove_ipc,
)
from sandboxes.docker.worker.program import (
    _child_setup,
    _decode_status,
    _session_loop,
    _Spare,
    collapse_heap,
    fork,
    limit_program_memory,
    set_dumpable,
)
from sandboxes.docker.worker.wire import LEN as _LEN
from sandboxes.docker.worker.wire import read_frame, write_frame

_DEFAULTS = {
    "preload": ["numpy", "sympy"],
    "workdir": "/work",
    "scratch": ["/tmp"],
    "stateful": False,
    "max_output": 4 * 1024 * 1024,
    "fresh_workdir": False,
    "spares": 2,  #: program processes kept forked ahead (stateless mode)
    "hugepages": True,  #: back the preloaded heap with huge pages (cheaper forks and exits)
    "exit_wait": 10.0,  #: seconds a killed call's processes get to finish exiting before the next call
}


class Worker:
    def __init__(self, config):
        self.config = dict(_DEFAULTS, **config)
        self.workdir = self.config["workdir"]
        self.session_pid = None
        self.session_sock = None
        self.spares = []  #: program processes forked ahead, oldest first
        self.finished = None  #: the last program process, done but maybe still exiting
        self.exiting = None  #: that process once killed after its answer: the next run waits for its exit
        #: processes that were there before the worker (an init, the exec transport's idle process)
        self.infrastructure = set(other_pids({os.getpid(), os.getppid(), 1})) if procs.CONTAINED else set()
        self.preloaded = []
        for name in self.config["preload"]:
            try:
                __import__(name)
                self.preloaded.append(name)
            except Exception:  # noqa: BLE001 - a missing optional module is reported by ping
                pass
        gc.freeze()  # the preloaded objects stay out of the collector's way (fewer copy-on-write faults after fork)
        self.hugepages_mb = collapse_heap() if self.config["hugepages"] else 0

    def keep(self):
        keep = {os.getpid(), os.getppid(), 1} | self.infrastructure
        if self.session_pid is not None:
            keep.add(self.session_pid)
        keep.update(spare.pid for spare in self.spares)
        return keep

    def ping(self, request):
        return {
            "ok": True,
            "pid": os.getpid(),
            "preloaded": self.preloaded,
            "python": sys.version.split()[0],
            "spares": len(self.spares),
            "hugepages_mb": self.hugepages_mb,
        }

    def end_others(self, finished=None, wait=True):
        """End every process but the worker and what it keeps (its spares, its session).

        ``finished`` is the last program process, which reported its end and is only exiting: it gets one
        SIGKILL and is not waited for. As the container's PID 1 with no session to keep, anything else still
        there (a program's children, a fork bomb) ends with one :func:`kill_all`; the spares go with it and
        are forked again, and without ``wait`` their exits are not waited for. Returns how many processes were
        ended, and whether they may still be exiting.
        """
        once = () if finished is None else (finished,)
        if not (procs.INIT and self.session_pid is None):
            return kill_others(self.keep(), once=once), False
        for pid in once:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        left = other_pids(self.keep() | set(once))
        if left:
            spares, self.spares = self.spares, []
            for spare in spares:
                spare.close()
            kill_all(float(self.config["exit_wait"]) if wait else 0.0)
        return len(left), bool(left) and not wait

    def reset(self, request):
        self.stop_session()
        self.drop_spares()
        killed, _ = self.end_others()
        remove_ipc()
        empty_dir(self.workdir)
        for path in self.config["scratch"]:
            empty_dir(path)
        return {"ok": True, "killed": killed}

    def after_response(self, req_fd=None):
        """Work done once the answer is out, so that it overlaps the host's turn.

        First every process of the call is killed (nothing of it runs during the next
        call). Then the spares are refilled, one fork at a time, but only while no
        request is waiting on ``req_fd``: a request that came back at once is served by
        a spare forked earlier, and the refill waits until the worker is idle again.
        """
        finished, self.finished = self.finished, None
        self.end_others(finished)
        if finished is not None:
            self.exiting = finished
        if self.config["stateful"]:
            return  # the session's IPC objects are part of its state, until the reset
        remove_ipc()
        self.spares = [spare for spare in self.spares if spare.usable() or spare.discard()]
        while len(self.spares) < max(1, int(self.config["spares"])):
            if self.spares and req_fd is not None and _waiting(req_fd):
                return
            try:
                self.spares.append(_Spare(self.workdir))
            except OSError:  # a limit refuses the fork even after retries: the next call forks on demand
                return

    def _await_finished(self):
        """Wait until the last program process has exited, so that no program sees its predecessor.

        It was killed after the answer and is normally reaped by now; under load its exit, at idle priority,
        can still be running when the next call comes.
        """
        pid, self.exiting = self.exiting, None
        if pid is not None and pid not in {spare.pid for spare in self.spares}:  # a pid reused by a spare
            self._wait(pid)

    def _take_spare(self):
        """The oldest spare still waiting for its code, else one forked now."""
        while self.spares:
            spare = self.spares.pop(0)
            if spare.usable():
                return spare
            spare.discard()
        return _Spare(self.workdir)

    # ---- the stateful session

    def stop_session(self):
        if self.session_pid is not None:
            try:
                os.kill(self.session_pid, signal.SIGKILL)
                os.waitpid(self.session_pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.session_pid = None
        if self.session_sock is not None:
            self.session_sock.close()
            self.session_sock = None

    def start_session(self):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = fork()
        if pid == 0:  # the session process
            try:
                parent.close()
                keep = child.fileno()
                os.closerange(3, keep)
                os.closerange(keep + 1, 1024)
                _child_setup(self.workdir)
                _session_loop(child, self.workdir)
            finally:
                os._exit(70)
        child.close()
        self.session_pid, self.session_sock = pid, parent

    def drop_spares(self):
        spares, self.spares = self.spares, []
        for spare in spares:
            spare.discard()

    # ---- one call

    def _prepare(self, request):
        """Make the work dir usable and write the request's files.

        Returns an error text for a request the worker refuses, or the call's own failed outcome when a
        file cannot be written because of what an earlier program did to the work dir (filled it, took
        away its permissions, put a directory where a file goes): that is the program's doing, not the
        sandbox's. Otherwise None.
        """
        os.makedirs(self.workdir, exist_ok=True)
        if self.config["fresh_workdir"]:
            empty_dir(self.workdir)
        try:
            os.chmod(self.workdir, 0o700)
        except OSError:
            pass
        for name, data in (request.get("files") or {}).items():
            path = os.path.normpath(os.path.join(self.workdir, name))
            if os.path.isabs(name) or not path.startswith(self.workdir + os.sep):
                return f"file name {name!r} leaves the work dir"
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(base64.b64decode(data))
            except OSError as exc:
                why = f"{type(exc).__name__}: {exc.strerror or exc}"
                return _not_run(
                    type(exc).__name__,
                    f"sandbox: the call's file {name!r} could not be written to the work dir ({why}); "
                    "an earlier program of this sandbox left the work dir so; the program did not run\n",
                )
        return None

    def run(self, request):
        start = time.monotonic()
        problem = self._prepare(request)
        if isinstance(problem, dict):
            problem["duration"] = time.monotonic() - start
            return problem
        if problem:
            return {"error": problem}
        timeout = float(request.get("timeout", 10.0))
        cap = int(request.get("max_output", self.config["max_output"]))
        stdin_data = base64.b64decode(request.get("stdin", ""))
        code = request["code"]
        self._await_finished()
        oom_before = oom_kills()
        state_lost = False
        if self.config["stateful"]:
            if self.session_pid is None:
                self.start_session()
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            payload = code.encode("utf-8", "surrogatepass")
            try:
                socket.send_fds(self.session_sock, [_LEN.pack(len(payload))], [in_r, out_w, err_w])
                self.session_sock.sendall(payload)
            except OSError:
                state_lost = True
            for fd in (in_r, out_w, err_w):
                os.close(fd)
            call = _Call(None, in_w, out_r, err_r, self.session_sock.fileno())
        else:
            for attempt in range(3):
                spare = self._take_spare()
                call = _Call(spare.pid, spare.in_w, spare.out_r, spare.err_r, spare.st_r)
                try:
                    write_frame(spare.ctl_w, {"code": code})
                except OSError:
                    pass  # the spare died; its exit status tells
                os.close(spare.ctl_w)
                outcome = self._supervise(call, stdin_data, timeout, cap, start)
                if outcome.pop("started") or outcome["timed_out"] or attempt == 2:
                    break
                # The spare died before the code ran (a signal an earlier program sent it was still in flight
                # when it was handed the call): nothing of the call ran, so it runs in another spare.
        if self.config["stateful"]:
            outcome = self._supervise(call, stdin_data, timeout, cap, start)
            outcome.pop("started")
        outcome["state_lost"] = state_lost or outcome.pop("session_died", False)
        oom_after = oom_kills()
        outcome["oom_killed"] = oom_before is not None and oom_after is not None and oom_after > oom_before
        outcome["duration"] = time.monotonic() - start
        return outcome

    def _supervise(self, call, stdin_data, timeout, cap, start):
        """Feed stdin, collect capped output, and wait for the call's end or its deadline.

        The usual end is the exit of the program process, its status as the kernel reports it (``waitpid``; a
        stateful session's status comes in a frame on its socket); then, when the pipes are at their end
        (nothing left behind holds them), the answer goes out at once and the process
        tree is cleaned up after it (:meth:`after_response`). Otherwise (timeout,
        flood, a crash, something left behind holding the pipes) every process is
        killed before answering.
        """
        pid, in_w, out_r, err_r = call.pid, call.in_w, call.out_r, call.err_r
        sel = selectors.DefaultSelector()
        bufs = {out_r: bytearray(), err_r: bytearray()}
        owned = {in_w, out_r, err_r}  # descriptors this call must close
        if pid is not None:
            owned.add(call.status_fd)
        sel.register(out_r, selectors.EVENT_READ)
        sel.register(err_r, selectors.EVENT_READ)
        sel.register(call.status_fd, selectors.EVENT_READ)
        pending = memoryview(stdin_data)
        if pending:
            os.set_blocking(in_w, False)
            sel.register(in_w, selectors.EVENT_WRITE)
        else:
            os.close(in_w)
            owned.discard(in_w)
            in_w = -1  # its number may be reused below
        watch = None
        if pid is not None and hasattr(os, "pidfd_open"):
            try:
                watch = os.pidfd_open(pid)
                owned.add(watch)
                sel.register(watch, selectors.EVENT_READ)
            except OSError:
                watch = None
        deadline = start + timeout
        timed_out = exceeded = done = reaped = session_died = status_seen = exited = False
        started = pid is None  #: a spare says "S" when it has its code, before the code runs
        exit_code = None
        while not done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            poll = remaining if (watch is not None or pid is None) else min(remaining, 0.005)
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
                    if pid is None:
                        frame = read_frame(fd)
                        session_died = frame is None
                        exit_code = None if frame is None else frame["exit_code"]
                        status_seen = frame is not None
                    else:
                        try:
                            started = os.read(fd, 1) == b"S"
                        except OSError:
                            pass
                        sel.unregister(fd)  # its only message; the status is the process's exit
                        if started:
                            continue
                        exited = True  # the spare died before its code came
                    done = True
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
            exit_code, reaped = self._wait(pid), True
            status_seen = started
        at_end = exiting = False
        if not (timed_out or exceeded):
            exceeded, at_end = self._drain(sel, bufs, cap, wait=0.0)
        if not (status_seen and at_end and not exceeded):
            # The slow path: kill the whole tree now, then collect what is left in the pipes.
            if pid is None:
                self.stop_session()
                session_died = session_died or timed_out or exceeded
            _, exiting = self.end_others(wait=False)  # all signalled at once: nothing of the call runs again
            if pid is not None and not reaped and not (exiting and (timed_out or exceeded)):
                code = self._wait(pid)
                if not status_seen:
                    exit_code = code
            # What was written before the kill is in the pipes now; only processes still running could add to it.
            more, _ = self._drain(sel, bufs, cap, wait=0.0 if exiting else 0.5)
            exceeded = exceeded or more
        elif pid is not None and not reaped:
            self.finished = pid
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

    def _wait(self, pid):
        """Reap the program process; its exit status, negative for a signal."""
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            if pid not in REAPED:
                return None
            status = REAPED.pop(pid)
        return _decode_status(status)

    def _drain(self, sel, bufs, cap, wait):
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


def _not_run(kind, message):
    """The outcome of a call whose program could not start for a reason of its sandbox's programs (``kind``)."""
    return {
        "exit_code": None,
        "error_kind": kind,
        "timed_out": False,
        "output_exceeded": False,
        "oom_killed": False,
        "state_lost": False,
        "stdout": "",
        "stderr": base64.b64encode(message.encode()).decode(),
    }


def _waiting(fd):
    """Whether a request is already waiting on ``fd``."""
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


class _Call:
    """The descriptors of one running call: stdin to feed, output to read, where the status comes."""

    def __init__(self, pid, in_w, out_r, err_r, status_fd):
        self.pid, self.in_w, self.out_r, self.err_r, self.status_fd = pid, in_w, out_r, err_r, status_fd


def main():
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    procs.CONTAINED = bool(config.get("contained"))
    procs.INIT = procs.CONTAINED and os.getpid() == 1
    limit_program_memory(config.get("program_memory"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the program may be interrupted
    # Finished programs exit at idle priority, after the answer: reap them as they end (the next run waits for
    # the last one, Worker._await_finished).
    signal.signal(signal.SIGCHLD, lambda signum, frame: procs.reap())
    # Not dumpable (inherited by every fork until a program process makes itself dumpable again): the
    # programs, which run as the same uid, can neither trace the worker and the spares nor open their
    # descriptors through /proc.
    set_dumpable(False)
    # Requests come on fd 0 and answers go to fd 1; move them out of the way of the programs' stdio.
    req_fd = os.dup(0)
    resp_fd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    os.set_inheritable(req_fd, False)
    os.set_inheritable(resp_fd, False)
    worker = Worker(config)
    handlers = {"ping": worker.ping, "run": worker.run, "reset": worker.reset}
    while True:
        request = read_frame(req_fd)
        if request is None:
            break
        handler = handlers.get(request.get("op"))
        try:
            response = handler(request) if handler else {"error": f"unknown op {request.get('op')!r}"}
        except Exception as exc:  # noqa: BLE001 - the worker answers every request, even after a bug
            response = {"error": f"worker error: {type(exc).__name__}: {exc}"}
        response["id"] = request.get("id")
        write_frame(resp_fd, response)
        try:
            worker.after_response(req_fd)
        except Exception:  # noqa: BLE001 - a refill that failed is made up by the next call; the worker lives on
            pass
    worker.stop_session()
    worker.drop_spares()
    worker.end_others()


if __name__ == "__main__":
    main()
