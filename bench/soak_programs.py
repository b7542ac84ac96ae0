"""The soak's programs: each with the result it must give, in two mixes, and the judge of a call's result.

``default``: ok programs, tracebacks, timeouts, output floods and a few hostile programs (copied from
``tests/test_hostile.py``); ``memory``: memory-hungry programs only, each followed by an ordinary call in the same
sandbox. :mod:`bench.sandbox_soak` runs them; the docker tests run the memory-hungry ones too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

MARKER = f"cleaner-soak-{os.getpid()}"
SLEEPER = f"[sys.executable, '-c', 'import time; time.sleep(1000)', '{MARKER}']"
TRIVIAL_OK = ("ok", "numpy")


@dataclass(frozen=True)
class Program:
    """One kind of call: its code, timeout, weight in the mix, and the result it must give."""

    name: str
    code: str
    kinds: tuple[str | None, ...]  #: the error kinds it may end with (None: ok)
    stdout: str | None = None  #: text the output must contain when ok
    timeout: float = 10.0
    weight: float = 1.0


PROGRAMS = [
    Program("ok", "print(sum(range(1000)))", (None,), "499500", weight=30),
    Program("numpy", "import numpy as np\nprint(int(np.arange(10).sum()))", (None,), "45", weight=8),
    Program("files", "open('f.txt', 'w').write('x' * 100)\nprint(len(open('f.txt').read()))", (None,), "100", weight=5),
    Program("traceback", "def f(x):\n    return 1 / x\nf(0)", ("ZeroDivisionError",), weight=12),
    Program("name_error", "print(undefined_name)", ("NameError",), weight=6),
    Program("syntax_error", "def f(:\n    pass", ("SyntaxError",), weight=4),
    Program("exit_code", "import sys\nsys.exit(3)", ("NonZeroExit",), weight=3),
    Program("busy_timeout", "while True:\n    pass", ("Timeout",), timeout=0.5, weight=4),
    Program("sleep_timeout", "import time\ntime.sleep(100)", ("Timeout",), timeout=0.5, weight=4),
    Program(
        "flood",
        "import sys\nchunk = 'z' * 2**20\nfor _ in range(8):\n    sys.stdout.write(chunk)",
        ("OutputLimitExceeded", "Timeout"),  # Timeout: on an overloaded host the cap may come after the timeout
        timeout=10,
        weight=2,
    ),
    # hostile, from tests/test_hostile.py
    Program(
        "fork_bomb",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        ("Timeout",),
        timeout=1.5,
        weight=0.5,
    ),
    # filling the memory limit can outlast the timeout on a loaded machine: then it is the program's Timeout
    Program("memory_bomb", "x = b'x' * (3 * 1024**3)\nprint(len(x))", ("MemoryError", "Timeout"), weight=1),
    Program(
        "background_child",
        f"import sys, subprocess\nsubprocess.Popen({SLEEPER})\nprint('left one behind')",
        (None,),
        "left one behind",
        weight=1,
    ),
    Program(
        "setsid_escape",
        "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(1000)', '{MARKER}'])\n"
        "    os._exit(0)\nprint('escaped?')",
        (None,),
        "escaped?",
        weight=1,
    ),
    Program("kill_itself", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", ("Killed",), weight=1),
    Program(
        "stop_itself", "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)", ("Timeout",), timeout=0.5, weight=1
    ),
    Program(
        "kill_every_process", "import os, signal\nos.kill(-1, signal.SIGKILL)", (None, "ProcessLookupError"), weight=1
    ),
]

#: Fill what outlives a program (the tmpfs dirs in bytes and inodes, System V segments and queues), then exhaust
#: memory: the most a program can leave behind, then the OOM killer.
PIN_EVERYTHING = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
def fill(directory, tag):
    n = 0
    try:
        while True:
            with open(f"{directory}/{tag}{n}", "wb") as f:
                f.write(b"x" * 2**20)
            n += 1
    except OSError:
        pass
    try:
        while True:
            os.mkdir(f"{directory}/{tag}d{n}")
            n += 1
    except OSError:
        pass
for directory in (".", "/tmp", "/dev/shm"):
    fill(directory, "p%d" % os.getpid())
while True:
    segment = libc.shmget(0, 2**20, 0o1600)
    address = libc.shmat(segment, None, 0) if segment >= 0 else None
    if address in (None, 2**64 - 1):
        break
    ctypes.memset(address, 1, 2**20)
message = ctypes.create_string_buffer(8 + 8192)
message[0] = 1
while True:
    queue = libc.msgget(0, 0o1600)
    if queue < 0 or libc.msgsnd(queue, message, 8192, 0o4000) < 0:
        break
    while libc.msgsnd(queue, message, 8192, 0o4000) == 0:
        pass
hog = []
while True:
    hog.append(b"m" * 2**20)
"""
#: How a memory-hungry program may end: out of memory, out of its tmpfs space or inodes (OSError), out of memory
#: for a new thread (RuntimeError), a non-zero exit with no traceback (no memory left to print one), or its time
#: limit (a thread left running after its siblings' MemoryErrors, or an overloaded machine).
HUNGRY_KINDS = ("MemoryError", "OSError", "FileExistsError", "RuntimeError", "NonZeroExit", "Timeout")
#: The ``--mix memory`` programs (and tests/test_sandbox_docker.py's): each must die, never its container.
MEMORY_PROGRAMS = [
    Program("big_list", "a = []\nwhile True:\n    a.append(' ' * 10**6)", HUNGRY_KINDS, timeout=30),
    Program("numpy_arrays", "import numpy as np\nx = [np.ones(10**7) for _ in range(100)]", HUNGRY_KINDS, timeout=30),
    Program(
        "directories_in_the_work_dir",
        "import os\ni = 0\nwhile True:\n    os.mkdir(f'd{os.getpid()}-{i}')\n    i += 1",
        HUNGRY_KINDS,
        timeout=30,
    ),
    Program(
        "hard_links",
        "import os\nopen('t', 'w').close()\ni = 0\nwhile True:\n    os.link('t', f'l{os.getpid()}-{i}')\n    i += 1",
        HUNGRY_KINDS,
        timeout=30,
    ),
    Program(
        "files_then_list",
        "import os\ni = 0\ntry:\n    while True:\n        open(f'f{i}', 'wb').write(b'x' * 10**6)\n        i += 1\n"
        "except OSError:\n    pass\na = []\nwhile True:\n    a.append(' ' * 10**6)",
        HUNGRY_KINDS,
        timeout=30,
    ),
    Program(
        "threads",
        "import threading\ndef hog():\n    a = []\n    while True:\n        a.append(' ' * 10**6)\n"
        "for _ in range(32):\n    threading.Thread(target=hog, daemon=True).start()\nhog()",
        HUNGRY_KINDS,
        timeout=30,
    ),
    Program(
        "children",
        "import os\nfor _ in range(4):\n    if os.fork() == 0:\n        a = []\n        while True:\n"
        "            a.append(' ' * 10**6)\nos.wait()\na = []\nwhile True:\n    a.append(' ' * 10**6)",
        HUNGRY_KINDS,
        timeout=30,
    ),
    Program("pin_everything", PIN_EVERYTHING, HUNGRY_KINDS, timeout=30),
    # the call after: it must run (with a file to write) in the same container
    Program("next_call", "print(open('/etc/hostname').read() and 'next')", (None,), "next", weight=8),
]
MIXES = {"default": PROGRAMS, "memory": MEMORY_PROGRAMS}


def judge(program: Program, result: Any) -> str:
    if result.sandbox_failed:
        return "sandbox_failed" if (result.error_kind == "SandboxError" and not result.ok) else "unclear sandbox error"
    if result.error_kind not in program.kinds:
        return f"{program.name}: error kind {result.error_kind!r}, expected one of {program.kinds}"
    if result.ok is not (result.error_kind is None):
        return f"{program.name}: ok={result.ok} with error kind {result.error_kind!r}"
    if program.stdout is not None and result.ok and program.stdout not in result.stdout:
        return f"{program.name}: stdout {result.stdout[-80:]!r} lacks {program.stdout!r}"
    return "ok"
