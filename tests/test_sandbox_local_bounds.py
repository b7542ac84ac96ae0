"""What bounds the memory a local sandbox program keeps outside its address space: hostile programs, one a resource.

``RLIMIT_AS`` counts what a process maps. The kernel also keeps memory for a process that is not mapped: System V
semaphores, segments and queues, POSIX message queues, memfd contents, files in a tmpfs. Each program below tries
to take more of one than the bound docs/sandboxes.md states, and is refused; each attempt is capped, so that a bound
that fails costs this machine little. The hostile programs run first in a call that must then fail or report the
refusal, and a plain call follows, because a sandbox that survives an attack only to fail the next rollout is
broken too.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import AsyncIterator

import pytest

from sandboxes.local import seccomp
from sandboxes.local.policy import LocalConfig, set_rlimits
from sandboxes.local.procs import run_fenced
from sandboxes.local.sandbox import LocalSandbox

pytestmark = pytest.mark.skipif(
    seccomp.program_filter() is None, reason=f"no system call filter for {platform.machine()}"
)


@pytest.fixture
async def sb() -> AsyncIterator[LocalSandbox]:
    sandbox = LocalSandbox(max_file_mb=4, max_open_files=64)
    if sandbox.isolation != "bwrap":
        await sandbox.close()
        pytest.skip("no bwrap here")
    try:
        yield sandbox
    finally:
        await sandbox.close()


async def _run(sandbox: LocalSandbox, code: str) -> str:
    result = await sandbox.run_python(code, timeout=20)
    assert result.ok, (result.error_kind, result.stderr[-800:])
    after = await sandbox.run_python("print(6 * 7)", timeout=10)
    assert after.ok and after.stdout == "42\n", after
    return result.stdout.strip()


#: Each attempt prints how much it got and the errno of its first refusal; 0 is what the bound allows.
_PRELUDE = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def why():
    return errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())
"""

HOSTILE = {
    # 200 sets of 32000 semaphores took 2.2 GB of kernel memory; here at most 100 sets of 1000 (about 7 MB)
    "semaphores": """
sets = 0
while sets < 100 and libc.semget(0, 1000, 0o1600) != -1:
    sets += 1
print(sets, why())
""",
    # segments filled through an attachment and detached (a detached segment is in no address space), 64 MB at most
    "shared_memory_segments": """
libc.shmat.restype = ctypes.c_void_p
got = 0
while got < 16:
    seg = libc.shmget(0, 4 << 20, 0o1600)
    if seg == -1:
        break
    at = libc.shmat(seg, None, 0)
    ctypes.memset(at, 1, 4 << 20)
    libc.shmdt(ctypes.c_void_p(at))
    got += 1
print(got, why())
""",
    # full message queues, 16 of 16 KB at most
    "message_queues": """
msg = ctypes.create_string_buffer(8 + 8192)
msg[0] = 1
got = 0
while got < 16:
    q = libc.msgget(0, 0o1600)
    if q == -1 or libc.msgsnd(q, msg, 8192, 0o4000) == -1:
        break
    got += 1
print(got, why())
""",
    "posix_message_queues": """
libc.mq_open.restype = ctypes.c_int
got = 0
while got < 16 and libc.mq_open(b'/hoard%d' % got, os.O_CREAT | os.O_RDWR, 0o600, None) != -1:
    got += 1
print(got, why())
""",
    # memfds filled to the file size limit and kept open unmapped (they held 2.6 GB): 16 at most
    "memfd": """
got, err = 0, None
while got < 16:
    try:
        fd = os.memfd_create('hoard')
        os.write(fd, b'x' * (4 << 20))
    except OSError as exc:
        err = errno.errorcode[exc.errno]
        break
    got += 1
print(got, err)
""",
    # memfd_secret: the same, through the raw system call
    "memfd_secret": """
got = 0
while got < 4 and libc.syscall(447, 0) != -1:
    got += 1
print(got, why())
""",
}


@pytest.mark.parametrize("resource", list(HOSTILE))
async def test_memory_no_limit_counts_is_refused(sb: LocalSandbox, resource: str) -> None:
    """System V IPC, POSIX queues and memfds are kernel memory outside RLIMIT_AS: a program gets none of it."""
    assert await _run(sb, _PRELUDE + HOSTILE[resource]) == "0 ENOSYS"


async def test_dev_shm_and_every_file_is_bounded_per_file_and_on_the_hosts_disk(sb: LocalSandbox) -> None:
    """``/dev/shm`` is the sandbox's directory on the host's file system, not a tmpfs no limit counts (its bytes
    and its inodes): each file ends at RLIMIT_FSIZE, ``fallocate`` cannot reserve past it, and the reset empties it.
    ``multiprocessing`` works on it."""
    code = _PRELUDE + (
        "import multiprocessing\n"
        "multiprocessing.Lock()\n"
        "same = os.stat('/dev/shm').st_dev == os.stat('/tmp').st_dev\n"
        "big = 0\n"
        "try:\n"
        "    with open('/dev/shm/big', 'wb') as f:\n"
        "        for _ in range(16):\n"
        "            f.write(b'x' * (1 << 20))\n"
        "            big += 1\n"
        "except OSError as exc:\n"
        "    err = errno.errorcode[exc.errno]\n"
        "fd = os.open('/tmp/reserved', os.O_RDWR | os.O_CREAT)\n"
        "libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]\n"
        "kept = libc.fallocate(fd, 1, 0, 64 << 20)\n"  # FALLOC_FL_KEEP_SIZE: 64 MB past the 4 MB limit
        "print(same, big, err, kept, why(), os.fstat(fd).st_blocks * 512 >> 20)\n"
    )
    assert await _run(sb, code) == "True 4 EFBIG -1 ENOTSUP 0"
    shm = sb._shmdir
    assert os.path.getsize(shm / "big") == 4 << 20
    await sb.reset()
    assert not os.listdir(shm)


async def test_the_new_root_and_dev_are_read_only(sb: LocalSandbox) -> None:
    """bwrap's own tmpfs mounts (``/``, ``/dev``) are memory; without root they belong to the program's uid."""
    code = (
        "import errno\nout = []\n"
        "for path in ('/hoard', '/dev/hoard', '/dev/pts/hoard'):\n"
        "    try:\n"
        "        open(path, 'wb').write(b'x')\n"
        "        out.append('written')\n"
        "    except OSError as exc:\n"
        "        out.append(errno.errorcode[exc.errno])\n"
        "open('/dev/null', 'wb').write(b'x')\n"
        "print(out)\n"
    )
    assert all(why in ("EROFS", "EACCES") for why in eval(await _run(sb, code)))  # noqa: S307 - printed by the program


async def test_descriptors_are_bounded(sb: LocalSandbox) -> None:
    """RLIMIT_NOFILE bounds what pipes and sockets hold in kernel buffers."""
    code = (
        "import os\npipes = []\n"
        "try:\n"
        "    while len(pipes) < 10000:\n"
        "        pipes.append(os.pipe())\n"
        "except OSError as exc:\n"
        "    print(len(pipes), exc.errno)\n"
    )
    count, err = (await _run(sb, code)).split()
    assert int(count) * 2 + 3 <= 64 and int(err) == 24  # EMFILE


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x32 numbers are x86_64's")
async def test_another_abi_does_not_slip_past_the_filter(sb: LocalSandbox) -> None:
    """shmget by its x32 number (the native number plus 0x40000000) is refused like the native call."""
    assert await _run(sb, _PRELUDE + "print(libc.syscall(0x40000000 + 29, 0, 4096, 0o1600), why())") == "-1 ENOSYS"


async def test_unisolated_the_child_installs_the_filter(tmp_path) -> None:
    """Without bwrap the child installs the filter itself before exec (the System V objects would be the host's)."""
    config = LocalConfig()
    program = _PRELUDE + "print(libc.semget(0, 4, 0o1600), why())\ntry:\n    os.memfd_create('x')\nexcept OSError:\n"
    program += "    print('no memfd')\n"
    outcome = await run_fenced(
        [sys.executable, "-c", program],
        b"",
        20,
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        preexec=lambda: set_rlimits(config, 20, 4096, filter_syscalls=True),
        cap=1 << 16,
        uid=None,
        user_kwargs={},
    )
    assert outcome.returncode == 0, bytes(outcome.err)
    assert bytes(outcome.out).decode().split("\n")[:2] == ["-1 ENOSYS", "no memfd"]
