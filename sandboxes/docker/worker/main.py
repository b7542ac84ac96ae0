"""The process that answers requests inside a sandbox container (standard library only).

Started once per container (``python3 -c <loader> <config json>``: the loader of
:func:`sandboxes.docker.policy.worker_command` carries this module and its parts,
:mod:`sandboxes.docker.worker.wire` (framing), :mod:`sandboxes.docker.worker.procs` (killing and
reaping), :mod:`sandboxes.docker.worker.program` (the forked program side),
:mod:`sandboxes.docker.worker.parent` (the clean parents the programs are forked from) and
:mod:`sandboxes.docker.worker.call` (one running call, watched to its end)), it answers
requests on its stdin with responses on its stdout, each a frame of a 4-byte big-endian length and a
UTF-8 JSON object. The programs are forked from the clean parent, a second interpreter that imported
numpy and sympy once and never holds a request or an answer. Why: a fresh ``python3`` pays for
importing numpy on every call; a ``fork`` of a warm one does not, and a forked child still starts
from a clean namespace, and, forked from the clean parent, from memory that holds nothing of another call.

Requests (``op``):

- ``ping``: answer ``{"ok": true, ...}`` (readiness and health).
- ``run``: run ``code`` with ``timeout``, ``stdin`` and ``files`` (base64), answer the
  outcome: ``exit_code`` (negative: killed by that signal), ``stdout``/``stderr``
  (base64, each capped at ``max_output`` bytes while it is produced), ``timed_out``,
  ``output_exceeded``, ``oom_killed``, ``state_lost``, ``duration``, ``exiting`` (processes of
  the call may still be exiting) and ``parent_lost`` (the next call waits for a new clean parent to start).
- ``reset``: kill every process but the worker's own, remove every IPC object, empty the
  work and temp dirs, forget the stateful session.

Modes: stateless (default) forks a child per call, so every call sees a fresh
namespace. Stateful keeps one forked *session* whose namespace survives
from call to call, as in a notebook; each call's stdin/stdout/stderr are handed
to it as file descriptors over a Unix socket, on which nothing comes back. The session process ends each call
with the call's exit status (read from the kernel, as a spare's) after forking its successor, which the worker
adopts (it is the subreaper of its programs) and hands the next call. A timeout kills the session, as do a call
that leaves a process holding its output and one that ends its process itself (``os._exit``, a signal): its state
is lost, and the answer says so.

After every call the whole process tree of the call is killed: every process in
the container except the worker's own (its clean parent, spares and stateful session) is
sent SIGKILL, which also catches children that left the process group with ``setsid`` and
processes whose main thread has exited while another runs; then (stateless mode) every
System V and POSIX IPC object of the container is removed. The worker, as PID 1, first stops
every other process with one ``kill(-1, SIGSTOP)`` that a fork bomb cannot outrun, kills all
but its own, and continues those. As PID 1 of the container the worker ignores signals it has
no handler for, so the program cannot kill it with ``kill(1, SIGKILL)``; it also reaps orphaned
zombies.
"""

import base64
import json
import os
import select
import signal
import socket
import sys
import time

from sandboxes.docker.worker import procs
from sandboxes.docker.worker.call import Call, supervise, wait_exit
from sandboxes.docker.worker.parent import CleanParent, ParentGone, serve
from sandboxes.docker.worker.procs import (
    empty_dir,
    kill_others,
    oom_kills,
    other_pids,
    parent_and_start,
    remove_ipc,
    stop_and_kill,
)
from sandboxes.docker.worker.program import (
    _Spare,
    set_dumpable,
    set_subreaper,
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


def _own_command():
    """How this module's ``main()`` is started where the worker is made without it (a developer, a test): from the
    directory that holds the ``sandboxes`` package."""
    root = os.path.abspath(__file__).rsplit(os.sep, 4)[0]
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {root!r}); import {__name__} as m; m.main()"]


class Worker:
    def __init__(self, config, command=None):
        """``command``: how to start an interpreter that runs this module's ``main()`` (the worker's own command
        line without its configuration), for the clean parent."""
        self.config = dict(_DEFAULTS, **config)
        self.workdir = self.config["workdir"]
        self.session_pid = None
        self.session_sock = None
        self.spares = []  #: program processes forked ahead, oldest first
        self.finished = None  #: the last program process, done but maybe still exiting
        self.exiting = None  #: that process once killed after its answer: the next run waits for its exit
        #: processes that were there before the worker (an init, the exec transport's idle process)
        self.infrastructure = set(other_pids({os.getpid(), os.getppid(), 1})) if procs.CONTAINED else set()
        #: the processes the programs are forked from, which never hold a request or an answer
        self.parent = CleanParent(command or _own_command(), self.config, sweep=lambda: self.end_others(wait=False))
        try:
            self.parent.ready(warm=True)
        except ParentGone:
            pass  # ping says so; a call starts a new one

    def keep(self):
        keep = {os.getpid(), os.getppid(), 1} | self.infrastructure
        if self.session_pid is not None:
            keep.add(self.session_pid)
        keep.update(self.parent.pids())
        keep.update(spare.pid for spare in self.spares if spare.alive())
        return keep

    def ping(self, request):
        hello = self.parent.hello or {}
        return {
            "ok": True,
            "pid": os.getpid(),
            "preloaded": hello.get("preloaded", []),
            "python": sys.version.split()[0],
            "spares": len(self.spares),
            "hugepages_mb": hello.get("hugepages_mb", 0),
            "parent_starts": self.parent.starts,
        }

    def end_others(self, finished=None, wait=True):
        """End every process but the worker and what it keeps (its clean parent, spares and session).

        ``finished`` is the last program process, which reported its end and is only exiting: it gets one
        SIGKILL and is not waited for. As the container's PID 1, anything else still there (a program's
        children, a fork bomb) ends by :func:`stop_and_kill`, and without ``wait`` their exits are not waited
        for. Returns how many processes were ended, and whether they may still be exiting.
        """
        once = () if finished is None else (finished,)
        if not procs.INIT:
            return kill_others(self.keep(), once=once), False
        for pid in once:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        left = other_pids(self.keep() | set(once))
        if left:
            stop_and_kill(self.keep(), float(self.config["exit_wait"]) if wait else 0.0)
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
        self.parent.hold_warming(False)
        finished, self.finished = self.finished, None
        self.end_others(finished)
        if finished is not None:
            self.exiting = finished
        if self.config["stateful"]:
            return  # the session's IPC objects are part of its state, until the reset
        remove_ipc()
        # spares forked from a bare clean parent give way to forks of the warm one once it is ready
        self.parent.refresh()
        self.spares = [
            spare for spare in self.spares if (spare.warm or not self.parent.warm) and spare.usable() or spare.discard()
        ]
        while len(self.spares) < max(1, int(self.config["spares"])):
            if self.spares and req_fd is not None and _waiting(req_fd):
                return
            try:
                # a clean parent that a program ended is started again here, unless a request comes first
                if not self.parent.ready(req_fd=req_fd):
                    return
                self.spares.append(_Spare(self.parent, self.workdir))
            except OSError:  # a limit refuses the fork even after retries: the next call forks on demand
                return

    def _await_finished(self):
        """Wait until the last program process has exited, so that no program sees its predecessor.

        It was killed after the answer and is normally reaped by now; under load its exit, at idle priority,
        can still be running when the next call comes.
        """
        pid, self.exiting = self.exiting, None
        if pid is not None and pid not in {spare.pid for spare in self.spares} | set(self.parent.pids()):  # reused
            wait_exit(pid)

    def _take_spare(self):
        """The oldest spare still waiting for its code, else one forked now."""
        while self.spares:
            spare = self.spares.pop(0)
            if spare.usable():
                return spare
            spare.discard()
        return _Spare(self.parent, self.workdir)

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
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.shutdown(socket.SHUT_RD)  # nothing a session sends is read
        try:
            pid, _ = self.parent.spawn("session", [theirs.fileno()], self.workdir)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.session_pid, self.session_sock = pid, ours

    def _next_session(self, ended):
        """After a stateful call that ended its session process ``ended`` (reaped by then): take the process that
        carries the session on, forked by ``ended`` just before it exited and adopted by the worker. Whether there
        is one.

        It is the newest of the worker's children that are not its own: the program's children, adopted too when
        the session ended, are older, and are ended after the call as always. None (the program ended its process by
        ``os._exit`` or a signal) loses the state."""
        if self.session_pid != ended:
            return False  # the session was stopped (a timeout, a flood)
        if self.finished == ended:
            self.finished = None
        self.session_pid = None
        me = os.getpid()
        heirs = []
        for pid in other_pids(self.keep()):
            stat = parent_and_start(pid)
            if stat is not None and stat[0] == me:
                heirs.append((stat[1], pid))
        if heirs:
            self.session_pid = max(heirs)[1]
            return True
        self.stop_session()
        return False

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
        self.parent.hold_warming(True)  # until the answer is out (after_response)
        waited = self.parent.waited  # a clean parent started for this call: its start is not the call's time
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
            try:  # the session's end says the call's status
                pidfd = os.pidfd_open(self.session_pid)
            except OSError:
                pidfd = None
            call = Call(self.session_pid, in_w, out_r, err_r, None, pidfd)
        else:
            for attempt in range(3):
                spare = self._take_spare()
                call = Call(spare.pid, spare.in_w, spare.out_r, spare.err_r, spare.st_r, spare.pidfd)
                try:
                    write_frame(spare.ctl_w, {"code": code})
                except OSError:
                    pass  # the spare died; its exit status tells
                os.close(spare.ctl_w)
                outcome = supervise(self, call, stdin_data, timeout, cap, start + self.parent.waited - waited)
                if outcome.pop("started") or outcome["timed_out"] or attempt == 2:
                    break
                # The spare died before the code ran (a signal an earlier program sent it was still in flight
                # when it was handed the call): nothing of the call ran, so it runs in another spare.
        if self.config["stateful"]:
            outcome = supervise(self, call, stdin_data, timeout, cap, start + self.parent.waited - waited)
            outcome.pop("started")
            if not self._next_session(call.pid):
                state_lost = True
        outcome["state_lost"] = state_lost or outcome.pop("session_died", False)
        oom_after = oom_kills()
        outcome["oom_killed"] = oom_before is not None and oom_after is not None and oom_after > oom_before
        outcome["duration"] = time.monotonic() - start
        # a program killed the clean parent: the next call waits for a new one to start, and its host for that
        outcome["parent_lost"] = self.parent.lost()
        return outcome


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


def main():
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    if config.get("role") == "parent":
        serve(config)
        return
    procs.CONTAINED = bool(config.get("contained"))
    procs.INIT = procs.CONTAINED and os.getpid() == 1
    if config.get("stateful") and not procs.INIT:
        set_subreaper()  # the session's successor is adopted by the worker when the session ends
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
    # the clean parent runs this same command line, with its own configuration in place of the last argument
    command = sys.orig_argv[: len(sys.orig_argv) - len(sys.argv) + 1]
    worker = Worker(config, command)
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
    worker.parent.stop()


if __name__ == "__main__":
    main()
