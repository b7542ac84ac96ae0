"""Hostile programs against the Docker backend and, where meaningful, the local one.

For every program: a structured result within its timeout + 1 s, the next call in
the same sandbox succeeds, and the host is unaffected, asserted after every program
for both backends: no process of the program survives anywhere on the host, no file
appears in the host's ``/``, and a loopback listener the test opened on the host saw
no connection. Then a container killed from outside in the middle of a call:
``sandbox_failed=True``, and the sandbox replaces its container. Last, an Inspect
eval with ``sandbox=auto`` on a machine without a Docker engine, whose log must say
that the programs ran isolated (bwrap).

Network tests that aim outside use a TEST-NET address (192.0.2.1) and run only in
the container, which has no network: nothing can leave the machine.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from sandboxes.base import ExecResult

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: Put in the command line of every process a program leaves behind, so that the host can look for it.
MARKER = f"cleaner-hostile-{os.getpid()}"
SECRET = f"s3cret-{os.getpid()}"
HOST_FILE = f"/tmp/cleaner-hostile-host-file-{os.getpid()}"
ROOT_FILE = f"/cleaner-hostile-{os.getpid()}"
SLEEPER = f"[sys.executable, '-c', 'import time; time.sleep(1000)', '{MARKER}']"
LINGER = f"import sys, subprocess\nsubprocess.Popen({SLEEPER})\n"
# Busy threads that spin in bytecode (so the GIL is shared) without growing memory.
SPIN = "import threading\nfor _ in range(4):\n    threading.Thread(target=lambda: [0 for _ in iter(int, 1) if False]"


@dataclass(frozen=True)
class Hostile:
    name: str
    code: str
    check: Callable[[ExecResult], object]  #: asserts what the result must say
    backends: tuple[str, ...] = ("docker", "local")
    timeout: float = 1.5
    local_needs_uid: bool = False  #: needs containment (bwrap or a sandbox uid) on the local backend
    local_check: Callable[[ExecResult], object] | None = None  #: where the weaker local backend differs


def kind(*kinds: str | None) -> Callable[[ExecResult], None]:
    def check(r: ExecResult) -> None:
        assert r.error_kind in kinds, (r.error_kind, r.stderr[-500:])
        assert r.ok is (r.error_kind is None)

    return check


def ok_with(text: str) -> Callable[[ExecResult], None]:
    def check(r: ExecResult) -> None:
        assert r.ok and text in r.stdout, (r.error_kind, r.stdout[-200:], r.stderr[-500:])

    return check


def no_secret(r: ExecResult) -> None:
    assert r.ok and "PATH" in r.stdout and SECRET not in r.stdout


def capped(r: ExecResult) -> None:
    assert r.error_kind == "OutputLimitExceeded" and not r.ok
    assert len(r.stdout) + len(r.stderr) <= 4 * 1024 * 1024 + 16


CASES = [
    Hostile(
        "fork_bomb",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        kind("Timeout"),
        local_needs_uid=True,
    ),
    Hostile("memory_bomb_at_once", "x = b'x' * (3 * 1024**3)\nprint(len(x))", kind("MemoryError")),
    Hostile(
        "memory_bomb_growing",
        "a = []\nwhile True:\n    a.append(b'x' * 10**7)",
        kind("MemoryError"),
        timeout=5,
        local_check=kind("MemoryError", "Timeout"),
    ),
    Hostile("infinite_loop", "while True:\n    pass", kind("Timeout")),
    Hostile("busy_threads", SPIN + ").start()\nprint('started')", kind("Timeout")),
    Hostile("busy_daemon_threads", SPIN + ", daemon=True).start()\nprint('returned')", ok_with("returned")),
    Hostile("background_child_outlives_call", LINGER + "print('left one behind')", ok_with("left one behind")),
    Hostile(
        "background_child_without_stdio",
        f"import sys, subprocess\nsubprocess.Popen({SLEEPER}, stdin=subprocess.DEVNULL, "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\nprint('ok')",
        ok_with("ok"),
    ),
    Hostile(
        "setsid_escape",
        "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(1000)', '{MARKER}'])\n"
        "    os._exit(0)\nprint('escaped?')",
        ok_with("escaped?"),
        local_needs_uid=True,
    ),
    Hostile("sleep_forever", "import time\ntime.sleep(10**6)", kind("Timeout")),
    Hostile("stop_itself", "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)", kind("Timeout")),
    Hostile("read_stdin_line", "input()", kind("EOFError")),
    Hostile("read_all_stdin", "import sys\nprint(repr(sys.stdin.read()))", ok_with("''")),
    Hostile(
        "gigabyte_of_stdout",
        "import sys\nchunk = 'z' * 2**20\nfor _ in range(1024):\n    sys.stdout.write(chunk)",
        capped,
        timeout=10,
    ),
    Hostile("stderr_flood", "import sys\nwhile True:\n    sys.stderr.write('e' * 65536)", capped, timeout=10),
    Hostile(
        "non_utf8_bytes", "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\x80 and text')", ok_with("\ufffd and text")
    ),
    Hostile(
        "fill_the_tmpfs",
        "with open('big', 'wb') as f:\n    while True:\n        f.write(b'0' * 2**20)",
        kind("OSError"),
        backends=("docker",),
        timeout=5,
    ),
    Hostile("write_to_root", f"open('{ROOT_FILE}', 'w').write('pwned')", kind("PermissionError", "OSError")),
    Hostile(
        "connect_loopback",
        "import socket\nsocket.create_connection(('127.0.0.1', 1), timeout=1)",
        kind("ConnectionRefusedError", "OSError", "TimeoutError"),
    ),
    Hostile(
        "connect_to_a_host_listener",
        "import socket\nsocket.create_connection(('127.0.0.1', LISTENER_PORT), timeout=1)\nprint('connected')",
        kind("ConnectionRefusedError", "OSError", "TimeoutError"),
    ),
    Hostile(
        "connect_outside",
        "import socket\nsocket.create_connection(('192.0.2.1', 80), timeout=1)",
        kind("OSError", "TimeoutError"),
        backends=("docker",),
    ),
    Hostile(
        "dns_lookup",
        "import socket\nsocket.getaddrinfo('example.com', 80)",
        kind("gaierror", "OSError"),
        backends=("docker",),
    ),
    Hostile("read_environment_for_secrets", "import os\nprint(dict(os.environ))", no_secret),
    Hostile(
        "look_for_host_files", f"print(open('{HOST_FILE}').read())", kind("FileNotFoundError"), backends=("docker",)
    ),
    Hostile("os_exit", "import os\nprint('bye', flush=True)\nos._exit(7)", kind("NonZeroExit")),
    Hostile("kill_itself", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", kind("Killed")),
    Hostile("segfault_via_ctypes", "import ctypes\nctypes.string_at(0)", kind("Segfault")),
    Hostile("deep_recursion", "def f(n):\n    return f(n + 1)\nf(0)", kind("RecursionError")),
    Hostile(
        "stack_overflow",
        "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1)\nf(0)",
        # a MemoryError at the program's memory limit, then unwinding millions of frames, may reach the time limit
        kind("Segfault", "MemoryError", "RecursionError", "Timeout"),
        local_check=kind("Segfault", "MemoryError", "Timeout"),
    ),
    Hostile("huge_integer", "x = 2 ** (2 ** 40)", kind("MemoryError", "OverflowError", "Timeout")),
    Hostile("huge_integer_to_text", "print(10 ** 100000)", kind("ValueError")),
    Hostile(
        "zombies",
        "import os\nfor _ in range(20):\n    if os.fork() == 0:\n        os._exit(0)\nprint('made zombies')",
        ok_with("made zombies"),
        local_needs_uid=True,
    ),
    Hostile(
        "exhaust_pids_and_leave",
        "import os, time\nn = 0\nwhile True:\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(1000)\n        os._exit(0)\n"
        "    n += 1\n"
        "print('forked', n)",
        ok_with("forked"),
        local_needs_uid=True,
        timeout=5,
    ),
    Hostile(
        # processes that change their pid on every fork: a kill aimed at a pid read from /proc mostly misses
        "pid_runners_left_behind",
        "import os\nfor _ in range(4):\n    if os.fork() == 0:\n        os.setsid()\n        while True:\n"
        "            try:\n                if os.fork():\n                    os._exit(0)\n"
        "            except OSError:\n                pass\nprint('running away')",
        ok_with("running away"),
        local_needs_uid=True,
    ),
    Hostile(
        "signals_to_parent",
        "import os, signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, "
        "signal.SIGSTOP, signal.SIGUSR1):\n    os.kill(os.getppid(), s)\nprint('sent')",
        ok_with("sent"),
        backends=("docker",),
    ),
    Hostile(
        "kill_the_interpreter",
        "import os, signal\nos.kill(1, signal.SIGKILL)\nos.kill(os.getppid(), signal.SIGKILL)\nprint('still here')",
        ok_with("still here"),
        backends=("docker",),
    ),
    # kill(-1) spares PID 1 and the caller: in the container it kills nothing else; locally, nothing of the host
    Hostile(
        "kill_every_process",
        "import os, signal\nos.kill(-1, signal.SIGKILL)",
        kind(None, "ProcessLookupError"),
        local_needs_uid=True,
    ),
    Hostile(
        "delete_the_work_dir",
        "import os, shutil\nopen('f', 'w').write('x')\nshutil.rmtree(os.getcwd(), "
        "ignore_errors=True)\nprint('deleted')",
        ok_with("deleted"),
    ),
    Hostile("lock_the_work_dir", "import os\nos.chmod('.', 0)\nprint('locked')", ok_with("locked")),
    Hostile("close_stdio", "import os\nos.close(0)\nos.close(1)\nos.close(2)", kind(None)),
    Hostile("exhaust_file_descriptors", "fs = []\nwhile True:\n    fs.append(open('/dev/null'))", kind("OSError")),
    Hostile("keyboard_interrupt", "raise KeyboardInterrupt", kind("KeyboardInterrupt")),
]


def _host_processes_with_marker() -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if MARKER.encode() in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def _root_entries() -> set[str]:
    return set(glob.glob("/cleaner-*"))


@pytest.fixture(scope="module")
def listener() -> Iterator[socket.socket]:
    """A TCP listener on the host's loopback: no sandboxed program may reach it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    yield server
    server.close()


def _assert_no_connection(server: socket.socket) -> None:
    try:
        conn, peer = server.accept()
    except BlockingIOError:
        return
    conn.close()
    raise AssertionError(f"a sandboxed program connected to the host's loopback listener from {peer}")


async def _assert_no_leftovers() -> None:
    """No process the program started survives on the host (allowing the kill a moment to land)."""
    for _ in range(40):
        if not _host_processes_with_marker():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"processes left behind on the host: {_host_processes_with_marker()}")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def backends(host_files):
    from sandboxes.backends import get_backend

    made = {}
    try:
        made["local"] = get_backend("local")
        yield made
    finally:
        for backend in made.values():
            await backend.shutdown()


@pytest_asyncio.fixture(loop_scope="module")
async def sandboxes(backends):
    """Sandboxes acquired for one test and released (reset) after it, as a rollout would use them."""
    held: dict = {}
    yield held
    for name, sandbox in held.items():
        await backends[name].release(sandbox)


async def _sandbox(name: str, backends, sandboxes):
    if name == "docker" and "docker" not in backends:
        from sandboxes.backends import get_backend

        backends["docker"] = get_backend("docker")
    if name not in sandboxes:
        sandboxes[name] = await backends[name].acquire()
    return sandboxes[name]


#: Known weaknesses of the local backend (reported to its owner); not strict, so that a fix is welcome silently.
PARAMS = [
    pytest.param(case, backend, id=f"{case.name}-{backend}", marks=[pytest.mark.docker] if backend == "docker" else [])
    for case in CASES
    for backend in case.backends
]


@pytest.mark.parametrize(("case", "backend"), PARAMS)
async def test_hostile_program(case: Hostile, backend: str, backends, sandboxes, listener) -> None:
    sandbox = await _sandbox(backend, backends, sandboxes)
    if backend == "local" and case.local_needs_uid and sandbox.uid is None and sandbox.isolation != "bwrap":
        pytest.skip("the local sandbox has neither bwrap nor a uid of its own here: nothing contains this")
    replacements = getattr(sandbox, "replacements", 0)
    in_root = _root_entries()
    code = case.code.replace("LISTENER_PORT", str(listener.getsockname()[1]))
    start = time.monotonic()
    result = await sandbox.run_python(code, timeout=case.timeout)
    elapsed = time.monotonic() - start
    assert isinstance(result, ExecResult)
    assert not result.sandbox_failed, result.stderr[-500:]
    (case.local_check if backend == "local" and case.local_check else case.check)(result)
    # a kill that never comes is what this catches; 2 s absorb a shared 2-core machine's scheduling of the cleanup
    assert elapsed <= case.timeout + 2.0, f"{case.name} took {elapsed:.2f} s with a {case.timeout} s timeout"
    after = await sandbox.run_python("import os\nprint('alive', len(os.listdir('.')))", timeout=5)
    assert after.ok and after.stdout.startswith("alive"), (after.error_kind, after.stderr[-500:])
    # the host is untouched: no process left, no file in /, no connection to its loopback
    await _assert_no_leftovers()
    if backend == "local" and sandbox.uid is not None:
        from sandboxes.local.uids import pids_of_uid

        assert pids_of_uid(sandbox.uid) == []
    assert not os.path.exists(ROOT_FILE)
    assert _root_entries() == in_root
    _assert_no_connection(listener)
    if backend == "docker":
        assert sandbox.replacements == replacements  # the program did not break the container


@pytest.mark.docker
async def test_no_zombies_or_stray_processes_in_the_container(backends, sandboxes) -> None:
    """The orphans of a finished call are reaped by the worker (PID 1). Until the call's own process has finished
    exiting (at idle priority, after its answer) they are its zombies, and on a busy machine that can outlast the
    next call's start (seen in .ci/run: ten of them), so the container is looked at until they are gone, for 10 s."""
    sandbox = await _sandbox("docker", backends, sandboxes)
    await sandbox.run_python("import os\nfor _ in range(10):\n    if os.fork() == 0:\n        os._exit(0)")
    probe = (
        "import os\nstates = []\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
        "        states.append(open(f'/proc/{p}/stat').read().rpartition(')')[2].split()[0])\nprint(sorted(states))"
    )
    deadline = time.monotonic() + 10.0
    while True:
        r = await sandbox.run_python(probe)
        assert r.ok, r.stderr[-500:]
        # The worker (PID 1), the program itself, and possibly the exiting process of the previous call.
        states = r.stdout.strip().strip("[]").replace("'", "").split(", ")
        if "Z" not in states or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert "Z" not in states, r.stdout


@pytest.mark.docker
async def test_container_killed_from_outside_mid_call() -> None:
    from sandboxes.docker.sandbox import DockerSandbox

    sb = await DockerSandbox().start()
    try:
        old = sb._current.container
        call = asyncio.ensure_future(sb.run_python("import time\ntime.sleep(30)", timeout=20))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(old.kill)
        start = time.monotonic()
        r = await call
        assert time.monotonic() - start < 5  # noticed at once, not at the call's timeout
        assert r.sandbox_failed and not r.ok and r.error_kind == "SandboxError" and r.exit_code is None
        assert "failed" in r.stderr
        r = await sb.run_python("print('replaced')", timeout=5)
        assert r.ok and r.stdout == "replaced\n"
        assert sb.replacements == 1 and sb.container_id != old.id
    finally:
        await sb.close()


@pytest.fixture(scope="module")
def host_files():
    with open(HOST_FILE, "w") as f:
        f.write("host secret")
    os.environ["CLEANER_HOSTILE_SECRET"] = SECRET
    yield
    os.environ.pop("CLEANER_HOSTILE_SECRET", None)
    os.unlink(HOST_FILE)


# ------------------------------------------------------------------ an eval on a machine without Docker


async def test_auto_eval_without_docker_runs_isolated(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path, listener
) -> None:
    from inspect_ai import Task, eval_async
    from inspect_ai.dataset import Sample
    from inspect_ai.solver import Generate, TaskState, solver
    from inspect_ai.util import sandbox

    from sandboxes.inspect_provider import STORE_KEY, CleanerSandboxConfig, sandbox_metadata, structured

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # no engine answers
    monkeypatch.setenv("INSPECT_DISPLAY", "none")
    monkeypatch.chdir(tmp_path)
    port = listener.getsockname()[1]
    programs = {
        "whoami": "import os\nprint(os.getuid())",
        "write_to_root": f"open('{ROOT_FILE}', 'w').write('pwned')",
        "connect": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)",
    }

    @solver
    def run_programs():
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            runs = {}
            for name, code in programs.items():
                r = await structured(sandbox()).run_python(code, timeout=10)
                runs[name] = {"ok": r.ok, "stdout": r.stdout, "extra": r.extra}
            state.metadata["runs"] = runs
            return state

        return solve

    config = CleanerSandboxConfig(backend="auto")
    task = Task(
        dataset=[Sample(input=f"sample {i}", target="x") for i in range(3)],
        solver=run_programs(),
        sandbox=("cleaner", config),
        metadata={"sandbox": sandbox_metadata(config)},
    )
    in_root = _root_entries()
    with caplog.at_level(logging.INFO, logger="sandboxes"):
        [log] = await eval_async(task, model="mockllm/model", log_dir=str(tmp_path), max_samples=3)
    assert log.status == "success", log.error
    header = log.eval.metadata["sandbox"]
    assert header["requested"] == "auto" and header["backend"] == "local" and header["isolation"] == "bwrap"
    assert log.samples is not None and len(log.samples) == 3
    for sample in log.samples:
        assert sample.store[STORE_KEY] == header
        runs = sample.metadata["runs"]
        assert all(run["extra"]["isolation"] == "bwrap" and run["extra"]["backend"] == "local" for run in runs.values())
        assert runs["whoami"]["ok"] and (os.geteuid() != 0 or int(runs["whoami"]["stdout"]) != 0)
        assert not runs["write_to_root"]["ok"] and not runs["connect"]["ok"]
    assert _root_entries() == in_root
    _assert_no_connection(listener)
    choices = [r for r in caplog.records if "sandbox 'auto'" in r.getMessage()]
    assert len(choices) == 1, "the choice is logged once per eval, not per sample"
    assert "local backend" in choices[0].getMessage() and "bwrap" in choices[0].getMessage()
