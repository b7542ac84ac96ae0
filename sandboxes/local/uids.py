"""The sandbox uids: one reserved for each sandbox's life (a lock file per uid), and every process of a uid found
and killed.

A uid belongs to one sandbox while its lease holds the uid's lock file in :data:`UID_LOCK_DIR` (root only); a
lease skips uids that are accounts of the system. :func:`kill_uid` kills what runs as a uid, sent as that uid
(``kill(-1, SIGKILL)``), until none is left.
"""

from __future__ import annotations

import fcntl
import functools
import os
import pwd
import subprocess
import time
from pathlib import Path

#: Where the per-uid lock files live (root only); a held lock means "uid in use".
UID_LOCK_DIR = Path("/tmp/.cleaner-sandbox-uids")


# --------------------------------------------------------------------------- uid reservation


#: Where this process's next uid lease starts looking, per uid range.
_next_uid: dict[tuple[int, int], int] = {}


@functools.cache
def _is_account(uid: int) -> bool:
    """Whether ``uid`` belongs to an account of this machine (looked up once per process)."""
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


class UidLease:
    """An unprivileged uid reserved for one sandbox for its lifetime (flock across processes).

    The search starts after the uid this process leased last and wraps around, so with many sandboxes open a
    lease tries the free uids first instead of every held one from the start of the range.
    """

    def __init__(self, uid_range: tuple[int, int]) -> None:
        UID_LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
        lo, hi = uid_range
        start = _next_uid.get(uid_range, lo)
        for uid in (*range(start, hi), *range(lo, start)):
            if _is_account(uid):
                continue  # a real account: never ours to kill
            fd = os.open(UID_LOCK_DIR / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.uid = self.gid = uid
            self._fd: int | None = fd
            _next_uid[uid_range] = uid + 1 if uid + 1 < hi else lo
            return
        raise RuntimeError(f"no free sandbox uid in {uid_range}: too many local sandboxes open")

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _threads_run(pid: str) -> bool:
    """Whether a process that ``/proc/PID/stat`` shows as a zombie still has a thread that runs: its main thread
    has exited while another runs on."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            state = Path(f"/proc/{pid}/task/{tid}/stat").read_bytes().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            return True
    return False


def pids_of_uid(uid: int) -> list[int]:
    """Processes whose real uid is ``uid`` with a thread that runs (a zombie whose other threads run is one).

    Reads each ``/proc/PID/status`` as bytes and looks for its ``Uid:`` and ``State:`` lines without parsing the
    rest (the scan runs while a sandbox is made and after every killed run, so its cost is per process on the
    machine).
    """
    uid_line, zombie = b"\nUid:\t%d\t" % uid, b"\nState:\tZ"
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{entry}/status", os.O_RDONLY)
        except OSError:
            continue
        try:
            status = os.read(fd, 4096)
        except OSError:
            continue
        finally:
            os.close(fd)
        if uid_line in status and (zombie not in status or _threads_run(entry)):
            pids.append(int(entry))
    return pids


def pids_of_session(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parts = stat.rsplit(")", 1)[-1].split()
        if len(parts) > 4 and int(parts[3]) == sid and (parts[0] != "Z" or _threads_run(entry)):
            pids.append(int(entry))
    return pids


def kill_uid(uid: int, rounds: int = 50) -> int:
    """SIGKILL every process of ``uid``; returns how many were still alive at the start.

    ``kill(-1, SIGKILL)`` sent *as* that uid reaches exactly its processes (the kernel
    checks permission, so no pid-reuse race can hit anyone else). Repeated until none
    is left, because a fork bomb may fork between rounds.
    """
    found = len(pids_of_uid(uid))
    for _ in range(rounds):
        if not pids_of_uid(uid):
            break
        subprocess.run(["kill", "-KILL", "-1"], user=uid, group=uid, extra_groups=[], capture_output=True)
        time.sleep(0.01)
    return found
