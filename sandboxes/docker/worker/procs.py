"""Process control inside the sandbox container: find, kill and reap processes, read the OOM counter,
empty directories (standard library only; part of the worker, see :mod:`sandboxes.docker.worker`).
"""

import itertools
import os
import signal
import time

#: True only when the worker runs alone in a container's PID namespace (set from the config by the worker).
CONTAINED = False
#: True when the worker is also that namespace's PID 1 (the attach transport): :func:`stop_and_kill` may be used.
INIT = False
_OOM_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def _proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return None


def _runs(pid):
    """Whether any thread of ``pid`` still runs code: a process whose main thread has exited shows ``Z`` in its
    ``/proc/PID/stat`` while its other threads run on, so a zombie's threads are looked at one by one."""
    state = _proc_state(pid)
    if state is None or state == b"X":
        return False
    if state != b"Z":
        return True
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                if f.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X"):
                    return True
        except (OSError, IndexError):
            continue
    return False


#: ``PF_EXITING`` in ``/proc/PID/stat``'s flags: the process is exiting (its SIGKILL is no longer pending)
_PF_EXITING = 0x4
_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def dying(pid):
    """Whether ``pid`` is gone or on its way out: a SIGKILL pending (a process at idle priority on a loaded machine
    may take long to act on it), exiting (its exit tears down its address space before it closes its descriptors
    and before its pidfd says so), or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        with open(f"/proc/{pid}/status", "rb") as f:
            status = dict(line.split(b":", 1) for line in f if b":" in line)
        pending = int(status.get(b"SigPnd", b"0"), 16) | int(status.get(b"ShdPnd", b"0"), 16)
        return fields[0] in (b"Z", b"X") or bool(int(fields[6]) & _PF_EXITING) or bool(pending & _SIGKILL_BIT)
    except (OSError, IndexError, ValueError):
        return True


def other_pids(keep):
    """Processes visible in /proc other than those in ``keep`` with a thread that still runs (a zombie whose
    threads have all ended is not one; a zombie main thread whose other threads run is).

    Only inside a container of its own (``contained``) is that every process; run
    anywhere else (a developer trying the worker out), the worker confines itself
    to the processes whose parent chain leads back to it.
    """
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            pid = int(name)
            if pid not in keep and _runs(pid):
                if CONTAINED or _descends_from(pid, os.getpid()):
                    pids.append(pid)
    return pids


def parent_and_start(pid):
    """The parent pid of ``pid`` and when it started (clock ticks since boot); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _descends_from(pid, ancestor):
    for _ in range(64):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rpartition(b")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            return False
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


#: Exit statuses collected by :func:`reap` for children someone may still ask about (pid -> status).
REAPED = {}


def reap():
    """Collect every exited child (orphans are re-parented to PID 1, which is us)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status
        if len(REAPED) > 1000:
            REAPED.pop(next(iter(REAPED)))


def kill_others(keep, once=()):
    """SIGKILL every process but ``keep`` until none is left; return how many were killed.

    The processes in ``once`` get one SIGKILL without being waited for (a program
    process that has already reported its end is only finishing its exit).
    """
    killed = 0
    for pid in once:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    keep = set(keep) | set(once)
    for attempt in range(200):
        pids = other_pids(keep)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        reap()
        if attempt:
            time.sleep(0.001)
    reap()
    return killed


def stop_and_kill(keep, wait=0.0):
    """As the container's PID 1: stop every other process with one ``kill(-1, SIGSTOP)``, SIGKILL each one not in
    ``keep``, continue those in ``keep``, and reap the others for at most ``wait`` seconds; return how many were
    killed.

    The kernel signals every process of the namespace but PID 1 in one pass that no ``fork`` can overtake (a fork
    under way passes the signal on to its child), so a fork bomb stops at once however loaded the host is, where
    killing pid by pid from a ``/proc`` scan of running processes races its refill. Stopped, no process can start
    another, so scans of ``/proc`` until one finds nobody new find them all. ``keep`` (the worker's clean parent,
    spares and session) lives on. From the stop on no process but the worker and ``keep`` runs code of its own
    again; what is left is their exits, which take the CPU of tearing down each address space (seconds for a fork
    bomb on a starved container), so they need not be waited for before answering.
    """
    me = os.getpid()
    try:
        os.kill(-1, signal.SIGSTOP)
    except ProcessLookupError:
        pass
    killed = set()
    try:
        for _ in range(200):
            new = [pid for pid in other_pids(keep) if pid not in killed]
            if not new:
                break
            for pid in new:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                killed.add(pid)
    finally:
        for pid in keep:
            if pid > 0 and pid != me:  # not 0, which would name our own process group
                try:
                    os.kill(pid, signal.SIGCONT)
                except (ProcessLookupError, PermissionError):
                    pass
    deadline = time.monotonic() + wait
    for attempt in itertools.count():
        reap()
        if time.monotonic() >= deadline or not other_pids(keep):
            break
        time.sleep(0.001 if attempt < 100 else 0.01)
    return len(killed)


try:  # standard library, but an interpreter may be built without it
    import ctypes

    _libc = ctypes.CDLL(None, use_errno=True)
except (ImportError, OSError):
    _libc = None

IPC_RMID = 0
_MQUEUE_DIR = "/dev/mqueue"


def remove_ipc():
    """Remove every System V semaphore set, shared memory segment and message queue, and every POSIX message
    queue, of the container's own IPC namespace; return how many.

    They outlive the process that made them; the programs run as the worker's uid, their creator, which may
    always remove them (a program cannot give one away: ``IPC_SET`` keeps its creator, a queue's owner needs
    ``CAP_CHOWN`` to change). A shared memory segment still attached (by nothing: every program process is dead
    by now) would go with its last detach.
    """
    removed = 0
    if _libc is not None:
        for kind, rmid in (
            ("sem", lambda ident: _libc.semctl(ident, 0, IPC_RMID)),
            ("shm", lambda ident: _libc.shmctl(ident, IPC_RMID, None)),
            ("msg", lambda ident: _libc.msgctl(ident, IPC_RMID, None)),
        ):
            try:
                with open(f"/proc/sysvipc/{kind}") as f:
                    rows = f.read().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                fields = row.split()
                if len(fields) > 1 and fields[1].isdigit() and rmid(int(fields[1])) == 0:
                    removed += 1
    try:
        names = os.listdir(_MQUEUE_DIR)
    except OSError:
        names = []
    for name in names:
        try:
            os.unlink(os.path.join(_MQUEUE_DIR, name))
            removed += 1
        except OSError:
            pass
    return removed


def oom_kills():
    """The container's OOM-kill counter (cgroup v2 or v1), or None when unreadable."""
    for path in _OOM_FILES:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def empty_dir(path, remove_top=False):
    """Remove everything below ``path`` (restoring permissions the program may have taken away)."""
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return
    except OSError:
        entries = []
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                empty_dir(entry.path, remove_top=True)
            else:
                os.unlink(entry.path)
        except OSError:
            pass
    if remove_top:
        try:
            os.rmdir(path)
        except OSError:
            pass
