"""No silent waits and no leaks of the docker pool: the acquire deadline, signals, reaping leftovers.

The label logic and the configuration run everywhere; the rest (marker ``docker``) needs an engine
and the sandbox image, and skips without them unless ``CI`` is set (see ``conftest.py``).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

from sandboxes.docker import engine as docker_engine
from sandboxes.docker.policy import ACQUIRE_TIMEOUT_ENV, LABEL, MAX_CONTAINERS_ENV
from sandboxes.docker.pool import DockerBackend, PoolExhausted
from sandboxes.owner import owner_labels

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ without an engine


def test_acquire_deadline_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ACQUIRE_TIMEOUT_ENV, raising=False)
    assert DockerBackend().acquire_timeout == 300.0
    assert DockerBackend(acquire_timeout=2.5).acquire_timeout == 2.5
    monkeypatch.setenv(ACQUIRE_TIMEOUT_ENV, "7")
    assert DockerBackend().acquire_timeout == 7.0
    monkeypatch.setenv(ACQUIRE_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=ACQUIRE_TIMEOUT_ENV):
        DockerBackend()
    with pytest.raises(ValueError, match="acquire_timeout"):
        DockerBackend(acquire_timeout=0)


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("socket_file", ["missing", "not listening"])
def test_no_engine_is_no_and_leaves_no_socket_open(
    socket_file: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A machine without an engine answers "no" to every check, and no check leaves a socket to the collector."""
    path = tmp_path / "docker.sock"
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if socket_file == "not listening":
        bound.bind(str(path))  # the file is there, nobody accepts
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    gc.collect()
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert not docker_engine.docker_available()
            gc.collect()
    finally:
        bound.close()
    assert not [w for w in seen if "unclosed" in str(w.message)], [str(w.message) for w in seen]


def test_the_cpu_quota_is_enforced_per_10_ms() -> None:
    from sandboxes.docker.policy import DockerConfig, container_spec

    spec = container_spec(DockerConfig(cpus=1.5), "img")
    assert (spec["cpu_quota"], spec["cpu_period"]) == (15_000, 10_000) and "nano_cpus" not in spec
    with pytest.raises(ValueError, match=r"cpus must be at least 0\.1"):
        DockerConfig(cpus=0.05)  # a 0.5 ms quota: the kernel refuses less than 1 ms


def test_only_a_dead_owner_on_this_host_makes_an_orphan() -> None:
    mine = owner_labels()
    assert mine[f"{LABEL}.owner.pid"] == str(os.getpid()) and mine[f"{LABEL}.owner.boot"]
    assert not docker_engine.orphaned(mine), "a live process's containers are its own"
    dead = owner_labels(_dead_pid())
    dead[f"{LABEL}.owner.start"] = mine[f"{LABEL}.owner.start"]  # the label the dead process would have had
    assert docker_engine.orphaned(dead)
    reused = {**owner_labels(1), f"{LABEL}.owner.start": "1"}  # pid 1 alive, but started at another time
    assert docker_engine.orphaned(reused)
    assert not docker_engine.orphaned(owner_labels(1)), "pid 1 is alive with that start time"
    for key, other in (("host", "another-host"), ("boot", "another-boot"), ("pidns", "pid:[1]")):
        assert not docker_engine.orphaned({**dead, f"{LABEL}.owner.{key}": other}), key
    assert not docker_engine.orphaned({LABEL: "1"}), "no owner labels: not provably ours"


def test_the_container_runs_the_worker_main_by_its_module_name() -> None:
    """The worker's command names the module whose ``main()`` the container runs: it is the worker's main."""
    import importlib

    from sandboxes.docker import policy
    from sandboxes.docker.worker import main as worker_main

    assert policy.WORKER_MAIN == worker_main.__name__ == "sandboxes.docker.worker.main"
    assert importlib.import_module(policy.WORKER_MAIN).main is worker_main.main
    assert all(importlib.import_module(name) for name in policy.WORKER_MODULES)
    command = policy.worker_command(policy.DockerConfig())
    assert command[:3] == ["python3", "-c", policy.WORKER_SOURCE]
    assert f"sys.modules[{policy.WORKER_MAIN!r}].main()" in policy.WORKER_SOURCE


def test_the_worker_command_runs_from_its_own_sources(tmp_path: Path) -> None:
    """The loader alone (no project on the path, as in the image) starts the worker, which answers a ping and runs
    a program; the worker brings nothing of the project but its own modules."""
    import base64

    from sandboxes.docker.policy import WORKER_MODULES, WORKER_SOURCE
    from sandboxes.docker.worker.wire import LEN

    def frame(request: dict) -> bytes:
        body = json.dumps(request).encode()
        return LEN.pack(len(body)) + body

    code = "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in ('sandboxes', 'harness')))"
    config = {"preload": [], "workdir": str(tmp_path / "work"), "scratch": [], "spares": 1, "hugepages": False}
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", WORKER_SOURCE, json.dumps(config)],
        input=frame({"op": "ping", "id": 1}) + frame({"op": "run", "id": 2, "code": code, "timeout": 30}),
        capture_output=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    answers, out = [], proc.stdout
    while out:
        size = LEN.unpack(out[:4])[0]
        answers.append(json.loads(out[4 : 4 + size]))
        out = out[4 + size :]
    assert [a["id"] for a in answers] == [1, 2] and answers[0]["ok"], answers
    assert answers[1]["exit_code"] == 0, answers[1]
    loaded = json.loads(base64.b64decode(answers[1]["stdout"]).decode().replace("'", '"'))
    assert loaded == sorted({"sandboxes", "sandboxes.docker", "sandboxes.docker.worker", *WORKER_MODULES})


def test_a_program_starts_only_once_its_predecessor_has_exited(tmp_path: Path) -> None:
    """The last program is killed after its answer and exits at idle priority; under load that exit can outlast
    the host's turn, and the next program would see (and open through ``/proc``) a process of the call before.
    A predecessor that takes 0.5 s to exit stands in for that here, in a worker of its own process."""
    script = f"""
import json, os, time
from sandboxes.docker.worker.main import Worker
worker = Worker({{"workdir": {str(tmp_path)!r}, "preload": [], "spares": 1, "hugepages": False}})
pid = os.fork()
if pid == 0:
    time.sleep(0.5)
    os._exit(0)
worker.exiting = pid  # as after_response leaves the last program process: killed, maybe still exiting
start = time.monotonic()
answer = worker.run({{"code": "print(1)", "timeout": 30}})
print(json.dumps({{"took": time.monotonic() - start, "exit_code": answer["exit_code"],
                  "gone": not os.path.exists(f"/proc/{{pid}}")}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    outcome = json.loads(proc.stdout.splitlines()[-1])
    assert outcome["exit_code"] == 0 and outcome["gone"] and outcome["took"] >= 0.4, outcome


def test_unseeded_random_numbers_differ_from_call_to_call(tmp_path: Path) -> None:
    """Each program is forked from a worker that imported numpy and sympy once; their generators must not hand
    every program the same numbers, as a fresh interpreter would not. (The image's numpy loads ``numpy.random``
    with ``numpy``; a newer one does not, so it is named here.)"""
    draw = (
        "import random, numpy, sympy.core.random as sr; "
        "print(numpy.random.rand(), numpy.random.randint(1 << 30), sr.rng.random(), random.random())"
    )
    script = f"""
import base64, json
from sandboxes.docker.worker.main import Worker
preload = ["numpy", "numpy.random", "sympy"]
worker = Worker({{"workdir": {str(tmp_path)!r}, "preload": preload, "spares": 2, "hugepages": False}})
draws = []
for _ in range(3):
    answer = worker.run({{"code": {draw!r}, "timeout": 60}})
    worker.after_response()
    draws.append(base64.b64decode(answer["stdout"]).decode().split())
print(json.dumps(draws))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert proc.returncode == 0, proc.stderr
    draws = json.loads(proc.stdout.splitlines()[-1])
    assert all(len(d) == 4 for d in draws), draws
    names = ("numpy rand", "numpy randint", "sympy rng", "random")
    for name, column in zip(names, zip(*draws, strict=True), strict=True):
        assert len(set(column)) == 3, (name, draws)


# ------------------------------------------------------------------ with an engine

docker = pytest.mark.docker


@docker
async def test_acquire_past_the_bound_fails_clearly_in_time() -> None:
    backend = DockerBackend(max_containers=1, acquire_timeout=0.5)
    try:
        held = await backend.acquire()
        start = time.monotonic()
        with pytest.raises(PoolExhausted) as caught:
            await backend.acquire()
        assert 0.4 < time.monotonic() - start < 5
        message = str(caught.value)
        for needed in ("bounded at 1 containers", "max_containers=N", MAX_CONTAINERS_ENV, ACQUIRE_TIMEOUT_ENV):
            assert needed in message
        assert isinstance(caught.value, TimeoutError)
        await backend.release(held)
        again = await backend.acquire()  # the slot came back: nothing leaked by the failed acquire
        assert (await again.run_python("print(1)")).ok
        await backend.release(again)
    finally:
        await backend.shutdown()


def _containers(**labels: str) -> list[str]:
    filters = ["--filter", f"label={LABEL}"] + [x for k, v in labels.items() for x in ("--filter", f"label={k}={v}")]
    out = subprocess.run(["docker", "ps", "-aq", *filters], capture_output=True, text=True, check=True)
    return out.stdout.split()


_HOLDER = """
import asyncio, faulthandler, signal, sys
from sandboxes.docker.pool import DockerBackend

# SIGINT as a terminal delivers it: a test runner started as a background job passes SIGINT on ignored
signal.signal(signal.SIGINT, signal.default_int_handler)
faulthandler.register(signal.SIGUSR1, all_threads=True)  # where it hangs, if it does

async def main():
    backend = DockerBackend(max_containers=2)
    held = [await backend.acquire() for _ in range(2)]
    print(" ".join(s.container_id for s in held), flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""


@docker
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_process_removes_its_containers(signum: int) -> None:
    # stderr to a file, not a pipe: a full pipe would hang the holder itself
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT, env={**os.environ}
        )
        try:
            assert proc.stdout is not None
            ids = proc.stdout.readline().split()
            assert len(ids) == 2
            assert len(_containers(**{f"{LABEL}.owner.pid": str(proc.pid)})) == 2
            proc.send_signal(signum)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:  # say where each thread waits
                proc.send_signal(signal.SIGUSR1)
                time.sleep(1.0)
                err.seek(0)
                pytest.fail(f"not ended 60 s after {signum!r}; its threads:\n{err.read()[-6000:]}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert _containers(**{f"{LABEL}.owner.pid": str(proc.pid)}) == [], f"containers left after {signum!r}"


@docker
async def test_a_new_backend_reaps_a_dead_processes_containers_only() -> None:
    import docker as sdk

    from sandboxes.docker.policy import DockerConfig, container_spec
    from sandboxes.image import image_tag

    client = sdk.from_env()
    mine = owner_labels()
    dead = {**owner_labels(_dead_pid()), f"{LABEL}.owner.start": mine[f"{LABEL}.owner.start"]}
    others = {
        "dead": dead,
        "other_host": {**dead, f"{LABEL}.owner.host": "another-host"},
        "alive": owner_labels(1),
        "unlabelled": {},
    }
    made = {}
    try:
        for name, labels in others.items():
            spec = container_spec(DockerConfig(), image_tag(), {**labels, f"{LABEL}.test": name})
            spec["command"] = ["sleep", "60"]
            made[name] = client.containers.create(**spec).id
        backend = DockerBackend(max_containers=1)
        try:
            sandbox = await backend.acquire()
            await backend.release(sandbox)
        finally:
            await backend.shutdown()
        left = {c.labels.get(f"{LABEL}.test") for c in client.containers.list(all=True, filters={"label": LABEL})}
        assert "dead" not in left and [made["dead"][:12]] == [r for r in backend.reaped if r == made["dead"][:12]]
        assert {"other_host", "alive", "unlabelled"} <= left, "reaped a container that was not provably ours"
    finally:
        for cid in made.values():
            try:
                client.containers.get(cid).remove(force=True)
            except sdk.errors.NotFound:
                pass
        client.close()


@docker
def test_bench_finishes_on_this_machine_within_its_bound() -> None:
    env = {k: v for k, v in os.environ.items() if k != MAX_CONTAINERS_ENV}  # the default bound: 4 on 2 cores
    argv = [
        sys.executable,
        "-m",
        "bench.sandbox_speed",
        "--n",
        "8",
        "--baseline-n",
        "4",
        "--total",
        "40",
        "--cold",
        "4",
    ]
    proc = subprocess.Popen(
        [*argv, "--skip-local", "--max-seconds", "240"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr[-2000:]
    figures = json.loads(stdout)
    assert figures["docker"]["max_containers"] == 8
    assert set(figures["docker"]["throughput_calls_per_s"]) == {"1", "4", "8"}
    assert figures["docker"]["paced"]["pause_ms"] == 10.0
    cpu = figures["docker"]["cpu_ms_per_call_c8"]
    # a call forks and ends a process in its container: that cannot be free, and the split adds up
    assert cpu["containers"] > 0.5 and cpu["caller"] > 0
    assert cpu["total"] == pytest.approx(cpu["containers"] + cpu["docker_daemons"] + cpu["caller"], abs=0.01)
    assert set(figures["targets"]) and "target docker_calls_per_s_c8>=400: " in stderr
    assert _containers(**{f"{LABEL}.owner.pid": str(proc.pid)}) == [], "the benchmark left containers"


async def test_a_call_waits_at_most_ready_timeout_for_a_replacement_container() -> None:
    """A container being (re)started slowly (an overloaded engine): the call is a clear sandbox failure in time."""
    import asyncio
    import time

    from sandboxes.docker.sandbox import DockerSandbox

    sandbox = DockerSandbox(client=object(), image="unused", ready_timeout=0.3)
    starts = []

    async def slow_start():
        starts.append(time.monotonic())
        await asyncio.sleep(30)

    sandbox._new_container = slow_start  # type: ignore[method-assign]
    start = time.monotonic()
    r = await sandbox.run_python("print(1)", timeout=5)
    assert time.monotonic() - start < 2
    assert r.sandbox_failed and not r.ok and r.error_kind == "SandboxError" and "not ready within 0.3 s" in r.stderr
    r = await sandbox.run_python("print(1)", timeout=5)  # the same start goes on: not a second one
    assert r.sandbox_failed and len(starts) == 1
    sandbox._replacing.cancel()
    sandbox._closed = True


@docker
def test_engine_client_keeps_one_connection_pool_for_all_threads() -> None:
    """docker's unix socket adapter keeps a pool per URL in a cache of 25 that closes what it evicts, with 10
    connections each: with dozens of containers handled by threads at once, a pool in use was closed under a
    thread, which lost the engine's answer ('NoneType' object has no attribute 'qsize') and left behind the
    container the engine had just created. The engine's client keeps one pool, with a connection per thread."""
    import threading

    from sandboxes.docker.engine import ENGINE_THREADS, client
    from sandboxes.docker.policy import DockerConfig, container_spec
    from sandboxes.image import image_tag

    engine = client()
    adapter = engine.api.get_adapter("http+docker://localhost")
    one = adapter.get_connection("http+docker://localhost/v1.45/containers/a/json")
    assert adapter.get_connection("http+docker://localhost/v1.45/containers/b/start") is one
    assert one.pool.maxsize >= ENGINE_THREADS

    label = {"cleaner.test": "connection-pool"}
    spec = {**container_spec(DockerConfig(), image_tag(), label), "command": ["true"], "stdin_open": False}
    errors: list[str] = []

    def churn() -> None:
        try:
            container = engine.containers.create(**spec)
            container.start()
            container.reload()
            container.remove(force=True)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=churn) for _ in range(ENGINE_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    left = engine.containers.list(all=True, filters={"label": "cleaner.test=connection-pool"})
    for container in left:
        container.remove(force=True)
    assert errors == [] and left == []
