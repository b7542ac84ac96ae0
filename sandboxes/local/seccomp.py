"""The system calls a local sandbox program may not make: a seccomp filter, built here without libseccomp.

The kernel keeps some memory for a process outside its address space, where ``RLIMIT_AS`` does not count it:
System V semaphores, shared memory segments and message queues, POSIX message queues, and the contents of a
memfd that is not mapped. A program could hold gigabytes that way within one call. None of them is needed by
the programs a model writes (``multiprocessing`` uses files in ``/dev/shm``), so the filter refuses them:

- every System V IPC call and every POSIX message queue call, and ``memfd_create`` and ``memfd_secret``, fail
  with ``ENOSYS``, as on a kernel built without them;
- ``fallocate`` with any mode flag fails with ``EOPNOTSUPP``: ``FALLOC_FL_KEEP_SIZE`` reserves blocks past
  ``RLIMIT_FSIZE`` (mode 0, ``posix_fallocate``, is allowed and bounded by it);
- a system call of another ABI (32-bit ``int 0x80``, x32) cannot slip past: another architecture kills the
  process, an x32 call number fails with ``ENOSYS``.

bwrap loads it (``--seccomp FD``) just before it starts the program; unisolated, the child installs it itself
(:func:`install`). A filter stays for the process and every child, and no program can lift it.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import platform
import struct

logger = logging.getLogger(__name__)

#: The refused calls' numbers per machine (``uname -m``): x86_64's own table, and the generic one of aarch64.
_SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "shmget": 29,
        "shmat": 30,
        "shmctl": 31,
        "semget": 64,
        "semop": 65,
        "semctl": 66,
        "shmdt": 67,
        "msgget": 68,
        "msgsnd": 69,
        "msgrcv": 70,
        "msgctl": 71,
        "semtimedop": 220,
        "mq_open": 240,
        "mq_unlink": 241,
        "mq_timedsend": 242,
        "mq_timedreceive": 243,
        "mq_notify": 244,
        "mq_getsetattr": 245,
        "memfd_create": 319,
        "memfd_secret": 447,
        "fallocate": 285,
    },
    "aarch64": {
        "mq_open": 180,
        "mq_unlink": 181,
        "mq_timedsend": 182,
        "mq_timedreceive": 183,
        "mq_notify": 184,
        "mq_getsetattr": 185,
        "msgget": 186,
        "msgctl": 187,
        "msgrcv": 188,
        "msgsnd": 189,
        "semget": 190,
        "semctl": 191,
        "semtimedop": 192,
        "semop": 193,
        "shmget": 194,
        "shmctl": 195,
        "shmat": 196,
        "shmdt": 197,
        "memfd_create": 279,
        "memfd_secret": 447,
        "fallocate": 47,
    },
}
#: ``AUDIT_ARCH_*`` of each machine's native ABI, as the kernel puts it in ``seccomp_data.arch``
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
#: x86_64 numbers with this bit set are x32 calls
_X32_BIT = 0x40000000

# classic BPF, as seccomp runs it: opcodes and the return values of a filter
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
# offsets in ``struct seccomp_data``: nr, arch, then 8-byte instruction pointer and six 8-byte arguments
_NR, _ARCH, _ARG1_LOW = 0, 4, 24


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _program(arch: int, refused: list[int], fallocate: int, x32: bool) -> bytes:
    """The filter as ``struct sock_filter`` records: each refused number a test that jumps to ``ENOSYS``."""
    enosys = _RET_ERRNO | errno.ENOSYS
    head = [
        _insn(_LD_W_ABS, 0, 0, _ARCH),
        _insn(_JEQ_K, 1, 0, arch),
        _insn(_RET_K, 0, 0, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, 0, 0, _NR),
    ]
    if x32:
        head += [_insn(_JGE_K, 0, 1, _X32_BIT), _insn(_RET_K, 0, 0, enosys)]
    # after the tests (R refused numbers, then fallocate's): R + 1 allow, R + 2 enosys, then fallocate's mode:
    # allowed when 0, else EOPNOTSUPP. A jump of J from instruction I lands on I + 1 + J.
    tests = [_insn(_JEQ_K, len(refused) + 1 - i, 0, nr) for i, nr in enumerate(refused)]
    tests.append(_insn(_JEQ_K, 2, 0, fallocate))
    tail = [
        _insn(_RET_K, 0, 0, _RET_ALLOW),
        _insn(_RET_K, 0, 0, enosys),
        _insn(_LD_W_ABS, 0, 0, _ARG1_LOW),
        _insn(_JEQ_K, 0, 1, 0),
        _insn(_RET_K, 0, 0, _RET_ALLOW),
        _insn(_RET_K, 0, 0, _RET_ERRNO | errno.EOPNOTSUPP),
    ]
    return b"".join(head + tests + tail)


@functools.cache
def program_filter() -> bytes | None:
    """The filter for this machine, or None (and a warning, once) where its system call table is not known here."""
    machine = platform.machine()
    table = _SYSCALLS.get(machine)
    if table is None:
        logger.warning(
            "local sandbox: no system call filter for %s; programs may keep System V IPC objects, POSIX message "
            "queues and memfds in kernel memory that no limit counts (docs/sandboxes.md)",
            machine,
        )
        return None
    refused = [nr for name, nr in table.items() if name != "fallocate"]
    return _program(_AUDIT_ARCH[machine], refused, table["fallocate"], x32=machine == "x86_64")


def filter_fd() -> int | None:
    """A descriptor bwrap reads the filter from (``--seccomp FD``): a pipe's read end, the filter already in it.
    The caller closes it once bwrap has started. None where there is no filter for this machine."""
    data = program_filter()
    if data is None:
        return None
    read, write = os.pipe()
    try:
        os.write(write, data)  # a few hundred bytes: the pipe holds them
    finally:
        os.close(write)
    return read


_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> None:
    """Install the filter on this process (the child, between fork and exec, when no bwrap runs).

    Raises:
        OSError: the kernel refused it (a kernel without seccomp).
    """
    data = program_filter()
    if data is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(data, len(data))
    prog = _SockFprog(len(data) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or (
        libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0
    ):
        err = ctypes.get_errno()
        raise OSError(err, f"the seccomp filter could not be installed: {os.strerror(err)}")
