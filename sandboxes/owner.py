"""Whose a sandbox is: the owner process's pid and start time, the host, the boot and the pid namespace.

Both backends mark what they leave on the host with :func:`owner_labels` (the Docker backend as container
labels, the local one as a file in its work directory), so that a later process reaps what a dead process
of this project left (SIGKILL runs no clean-up) with one rule, :func:`orphaned`, and never anyone else's.
"""

from __future__ import annotations

import os
import socket

#: The label on every sandbox container (``docker ps --filter label=...`` finds leftovers) and the prefix of the
#: owner labels.
LABEL = "cleaner.sandbox"
OWNER_PID = f"{LABEL}.owner.pid"
OWNER_START = f"{LABEL}.owner.start"
OWNER_HOST = f"{LABEL}.owner.host"
OWNER_BOOT = f"{LABEL}.owner.boot"
OWNER_PIDNS = f"{LABEL}.owner.pidns"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """The start time of ``pid`` in clock ticks since boot (with the pid, it names one process), or ""."""
    stat = _read(f"/proc/{pid}/stat")
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def owner_labels(pid: int | None = None) -> dict[str, str]:
    """The labels that say whose a sandbox is: this process (or ``pid``) on this host and boot."""
    pid = os.getpid() if pid is None else pid
    return {
        OWNER_PID: str(pid),
        OWNER_START: _start_time(pid),
        OWNER_HOST: socket.gethostname(),
        OWNER_BOOT: _read("/proc/sys/kernel/random/boot_id"),
        OWNER_PIDNS: _pid_namespace(),
    }


def orphaned(labels: dict[str, str]) -> bool:
    """Whether a sandbox with ``labels`` belongs to a process of this project that is dead on this host.

    False for anything not provably ours to reap: no owner labels (an older run, someone's own),
    another host, boot or pid namespace, or an owner that is alive (same pid, same start time).
    """
    me = owner_labels()
    pid = labels.get(OWNER_PID, "")
    if not pid.isdigit() or not labels.get(OWNER_BOOT) or not labels.get(OWNER_START):
        return False
    if any(labels.get(key) != me[key] for key in (OWNER_HOST, OWNER_BOOT, OWNER_PIDNS)):
        return False
    if int(pid) == os.getpid():
        return labels[OWNER_START] != me[OWNER_START]
    return _start_time(int(pid)) != labels[OWNER_START]  # "" when dead; another start time: the pid was reused
