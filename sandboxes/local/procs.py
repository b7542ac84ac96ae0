"""Process control of the local sandbox: spawn a program under limits, watch it, kill it.

Mechanism only: which limits and isolation apply is decided by :mod:`sandboxes.local.policy`
and :mod:`sandboxes.local.isolation`; :func:`run_fenced` starts a command in a new session, feeds its
stdin, reads its output while produced (capped), and at its end, its timeout, a flood or a
cancellation kills its process group and everything it left (as the sandbox uid when there is
one: ``kill(-1, SIGKILL)`` sent as that uid, :mod:`sandboxes.local.uids`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandboxes.local.uids import kill_uid, pids_of_session

# --------------------------------------------------------------------------- probe runs


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


# --------------------------------------------------------------------------- one fenced run


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` (at once; :func:`kill_leftovers` sweeps the rest)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_leftovers(pid: int, uid: int | None) -> None:
    """SIGKILL whatever the call started: every process of the sandbox uid, else its group and session."""
    if uid is not None:
        kill_uid(uid)
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for _ in range(20):  # a fork bomb may fork between rounds
        others = pids_of_session(pid)
        if not others:
            break
        for other in others:
            try:
                os.kill(other, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class NamespaceWatch:
    """Sees the end of one bwrap run's pid namespace, from what bwrap writes to its ``--json-status-fd``.

    Once the sandbox is set up, bwrap writes the host pid of the namespace's init (``child-pid``). That init
    ends only after the kernel has killed every other process of its namespace, so its pidfd becoming
    readable, or the init being reaped already, proves that nothing the program started is left, without
    scanning ``/proc`` (the cost that made calls late under load). bwrap's own exit proves nothing: it exits
    as soon as the program has, while its init may still be killing the rest.
    """

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        #: the pipe the program's exit status comes on, exactly (``isolation._REPORT_SHIM``)
        self.report_r, self.report_w = os.pipe()
        os.set_blocking(self.report_r, False)
        self._text = b""
        self._pidfd: int | None = None
        self._known: asyncio.Future[None] | None = None  #: done once the init's pid is known (or never will be)
        self._init_gone = False  #: the init had been reaped before its pidfd was opened

    def argv(self) -> list[str]:
        """bwrap's option that writes its status to our pipe (the descriptor is passed to it as is)."""
        return ["--json-status-fd", str(self.write_fd)]

    def pass_fds(self) -> tuple[int, int]:
        """The descriptors bwrap gets: its status pipe and the program's."""
        return self.write_fd, self.report_w

    def start(self) -> None:
        """Once bwrap runs: keep only its copies of the write ends, and read what it writes as it comes."""
        os.close(self.write_fd)
        os.close(self.report_w)
        self.write_fd = self.report_w = -1
        loop = asyncio.get_running_loop()
        self._known = loop.create_future()
        loop.add_reader(self.read_fd, self._read)

    def _read(self) -> None:
        try:
            chunk = os.read(self.read_fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        self._text += chunk
        *lines, self._text = self._text.split(b"\n")
        for line in lines:
            try:
                pid = json.loads(line).get("child-pid")
            except (ValueError, AttributeError):
                continue
            if isinstance(pid, int) and self._pidfd is None and not self._init_gone:
                try:  # at once: the init is alive for as long as the program runs
                    self._pidfd = os.pidfd_open(pid)
                except ProcessLookupError:
                    self._init_gone = True
                except (AttributeError, OSError):
                    pass  # no pidfd here: the sweep stays
        if not chunk or self._pidfd is not None or self._init_gone:
            asyncio.get_running_loop().remove_reader(self.read_fd)
            if self._known is not None and not self._known.done():
                self._known.set_result(None)

    async def ended(self, timeout: float) -> bool:
        """Whether the namespace has ended, waiting up to ``timeout`` seconds; False when it cannot be told."""
        if self._known is None:
            return False
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._known)
                return self._init_gone or (self._pidfd is not None and await _readable(self._pidfd, None))
        except TimeoutError:
            return False

    def exit_status(self) -> int | None:
        """How the program ended once bwrap has: its exit status, or ``-N`` for signal N; None when not reported
        (the program was killed with everything else, or killed the process that reports it)."""
        try:
            words = os.read(self.report_r, 64).split()
        except OSError:
            return None
        if len(words) == 2 and words[0] in (b"exit", b"signal") and words[1].isdigit():
            return int(words[1]) if words[0] == b"exit" else -int(words[1])
        return None

    def close(self) -> None:
        if self._known is not None and not self._known.done():
            asyncio.get_running_loop().remove_reader(self.read_fd)
            self._known.cancel()
        for fd in (self.read_fd, self.write_fd, self._pidfd, self.report_r, self.report_w):
            if fd is not None and fd >= 0:
                os.close(fd)
        self.read_fd = self.write_fd = self.report_r = self.report_w = -1
        self._pidfd = None


@dataclass
class Outcome:
    """What :func:`run_fenced` saw: the output (capped), the exit status, and why it ended."""

    out: bytearray
    err: bytearray
    returncode: int | None
    timed_out: bool
    output_exceeded: bool
    exited: bool  #: False: the process could not be killed (should not happen)
    #: The run's pid namespace was seen to end, so nothing it started is left (no sweep ran, none is needed)
    namespace_ended: bool = False


async def run_fenced(
    argv: Sequence[str],
    data: bytes,
    timeout: float,
    *,
    cwd: Path,
    env: dict[str, str],
    preexec: Callable[[], None] | None,
    cap: int,
    uid: int | None,
    user_kwargs: dict[str, Any],
    namespace: NamespaceWatch | None = None,
    pass_fds: tuple[int, ...] = (),
) -> Outcome:
    """Run ``argv`` to its end, its timeout or its flood, and leave nothing of it running (also when cancelled).

    ``namespace``: ``argv`` is bwrap with ``namespace.argv()`` among its options. A program that ended by
    itself then needs no sweep when its pid namespace is seen to have ended (see :class:`NamespaceWatch`);
    after a kill, or when the end is not seen within a second, the sweep runs as without bwrap. ``pass_fds``: more
    descriptors the command inherits (besides the namespace's).

    Raises what starting the process raises (``OSError``, ``subprocess.SubprocessError``).
    """
    spawn = asyncio.ensure_future(
        _spawn(
            argv,
            cwd=cwd,
            env=env,
            start_new_session=True,
            preexec_fn=preexec,
            pass_fds=(*namespace.pass_fds(), *pass_fds) if namespace else pass_fds,
            **user_kwargs,
        )
    )
    try:
        proc = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        # Cancelled while the pipes are still being connected (the fork of a large process, such as a test suite
        # that loaded models, is slow enough for a sample's time limit to land here). Killing the direct child
        # alone would leave the sandbox running (bwrap's outer process: the sandbox survives it). Let the spawn
        # finish, kill all it started, then raise.
        spawn.add_done_callback(lambda done: _kill_spawned(done, uid))
        await asyncio.wait({spawn})
        raise
    try:
        return await _supervise(proc, data, timeout, cap, uid, namespace)
    finally:
        proc.close()  # its pipes, also when cancelled; a process not yet reaped is reaped when it ends


async def _supervise(
    proc: Child, data: bytes, timeout: float, cap: int, uid: int | None, namespace: NamespaceWatch | None
) -> Outcome:
    """:func:`run_fenced` once the process has started: feed it, read it, end it and whatever it left."""
    if namespace is not None:
        namespace.start()
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
        ended_by_itself = waiter.done()
        if not ended_by_itself:
            # its group now (bwrap's: its pid namespace dies with it); the sweep of the sandbox uid, which scans
            # /proc and may take rounds, follows in a thread: in the event loop it stalled every other call
            kill_group(proc.pid)
            await asyncio.wait({waiter}, timeout=0.5)
        namespace_ended = ended_by_itself and namespace is not None and await namespace.ended(timeout=1.0)
        if not namespace_ended:
            await asyncio.to_thread(kill_leftovers, proc.pid, uid)  # background children, setsid escapes
        cleaned = True
        await asyncio.wait(set(readers), timeout=0.3)
    finally:
        # Also on cancellation (a sample's time limit) or any error: nothing of the call keeps running.
        if not cleaned:
            kill_group(proc.pid)
            kill_leftovers(proc.pid, uid)
        exited = waiter.done()
        for task in (*readers, feeder, flooded, waiter):
            task.cancel()
    if exited:
        # Let the transport see its pipes close, so nothing is left for the garbage collector (which finalized it
        # after its loop had closed, in whatever code then ran). A reader stopped at the cap left its pipe's
        # transport paused, short of EOF: what remains is read and dropped.
        await asyncio.gather(*readers, return_exceptions=True)
        try:
            await asyncio.wait_for(asyncio.gather(_discard(proc.stdout), _discard(proc.stderr), proc.wait()), 0.2)
        except (TimeoutError, ProcessLookupError):
            pass
    return Outcome(out, err, proc.returncode, timed_out, output_exceeded, exited, namespace_ended)


def _kill_spawned(spawn: asyncio.Future[Child], uid: int | None) -> None:
    """Kill what a spawn whose caller was cancelled started (when it started anything)."""
    if not spawn.cancelled() and spawn.exception() is None:
        child = spawn.result()
        kill_group(child.pid)
        kill_leftovers(child.pid, uid)
        child.close()


class Child:
    """A process started by :func:`_spawn`: its pid, its pipes as streams, its exit status once it has ended."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        transports: list[asyncio.BaseTransport],
    ) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self._transports = transports

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), the process reaped once it has ended; None before."""
        return self._popen.poll()

    async def wait(self) -> int:
        return await _exited(self)

    def close(self) -> None:
        """Close its pipes (what is still unread is dropped); a process that has not ended is reaped when it ends."""
        for transport in self._transports:
            transport.close()
        if self.returncode is None:
            pidfd = _pidfd(self.pid)
            if pidfd is None:
                threading.Thread(target=self._popen.wait, daemon=True).start()
                return
            loop = asyncio.get_running_loop()

            def reap() -> None:
                loop.remove_reader(pidfd)
                os.close(pidfd)
                self._popen.poll()

            loop.add_reader(pidfd, reap)


async def _spawn(argv: Sequence[str], **popen: Any) -> Child:
    """Start ``argv`` with pipes for its stdin, stdout and stderr, connected to the running event loop.

    Not ``asyncio.create_subprocess_exec``: on Python 3.11 that starts a thread per process to wait for its exit
    (asyncio's ``ThreadedChildWatcher``), and the event loop waits for each thread to start. Here the process is
    reaped from the loop when its pidfd says it has ended (:func:`_exited`, :attr:`Child.returncode`).
    """
    loop = asyncio.get_running_loop()
    pipe = subprocess.PIPE
    process = subprocess.Popen(list(argv), stdin=pipe, stdout=pipe, stderr=pipe, **popen)
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    transports: list[asyncio.BaseTransport] = []
    try:
        readers = []
        for stream in (process.stdout, process.stderr):
            reader = asyncio.StreamReader(loop=loop)
            transport, _ = await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r), stream)
            transports.append(transport)
            readers.append(reader)
        writing, protocol = await loop.connect_write_pipe(lambda: asyncio.streams.FlowControlMixin(), process.stdin)
        transports.append(writing)
    except BaseException:
        kill_group(process.pid)
        for transport in transports:
            transport.close()
        raise
    stdin = asyncio.StreamWriter(writing, protocol, None, loop)  # type: ignore[arg-type]
    return Child(process, stdin, readers[0], readers[1], transports)


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


async def _discard(stream: asyncio.StreamReader) -> None:
    """Read ``stream`` to EOF, keeping nothing."""
    while await stream.read(1 << 20):
        pass


async def _exited(proc: Child) -> int:
    """Wait for the process itself to end (not for its pipes, which a background child may hold open).

    The process's pidfd wakes this wait when the process ends (a fast poll of every running call keeps the event
    loop busy when many calls run), and :attr:`Child.returncode` then reaps it; a 50 ms poll is the backstop, and
    the only wait where there is no pidfd.
    """
    pidfd, ended = _pidfd(proc.pid), False
    try:
        while proc.returncode is None:
            if pidfd is not None and not ended:
                ended = await _readable(pidfd, 0.05)
            else:  # no pidfd: poll
                await asyncio.sleep(0.05)
    finally:
        if pidfd is not None:
            os.close(pidfd)
    return proc.returncode


async def _readable(fd: int, timeout: float | None) -> bool:
    """Wait until ``fd`` is readable (a pidfd: its process has ended), at most ``timeout`` seconds; whether it is."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await asyncio.wait({ready}, timeout=timeout)
        return ready.done()
    finally:
        loop.remove_reader(fd)
        ready.cancel()


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when process ``pid`` ends (Linux >= 5.3), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd here, or already reaped
        return None


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
