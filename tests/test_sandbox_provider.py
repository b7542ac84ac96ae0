"""The ``cleaner`` Inspect sandbox provider, the backend registry and the sandbox CLI.

The provider is tested through a real (tiny) Inspect eval with the offline
``mockllm/model``: the solver uses ``sandbox().exec``, file access and the
structured run, and the test reads what it stored in the log.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import sandbox

import sandboxes.inspect_provider  # noqa: F401 - registers the "cleaner" sandbox
from sandboxes.backends import LocalBackend, get_backend, resolve_backend_name
from sandboxes.inspect_provider import CleanerSandboxConfig, structured
from sandboxes.local.sandbox import LocalSandbox


@solver
def exercise_sandbox():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        env = sandbox()
        out: dict[str, object] = {}
        r = await env.exec(["python3", "-c", "print(2 + 3)"])
        out["exec_c"] = [r.success, r.returncode, r.stdout]
        await env.write_file("prog.py", "import sys\nprint(sys.stdin.read().upper(), sys.argv[1:])")
        r = await env.exec(["python3", "prog.py", "arg"], input="abc")
        out["exec_file"] = [r.success, r.stdout]
        r = await env.exec(["python3", "-c", "raise KeyError('k')"])
        out["exec_fail"] = [r.success, r.returncode, "KeyError" in r.stderr]
        r = await env.exec(["sh", "-c", "echo shell; exit 4"])
        out["exec_sh"] = [r.success, r.returncode, r.stdout]
        try:
            await env.exec(["python3", "-c", "import time; time.sleep(30)"], timeout=1)
            out["timeout"] = "no error"
        except TimeoutError:
            out["timeout"] = "TimeoutError"
        await env.exec(["python3", "-c", "open('made.txt', 'w').write('from program')"])
        out["read_file"] = await env.read_file("made.txt")
        result = await structured(env).run_python("print(undefined)")
        out["structured"] = [result.ok, result.error_kind, structured(env).backend]
        leftover = await env.exec(["python3", "-c", "import os; print(sorted(os.listdir('.')))"])
        out["listing"] = leftover.stdout.strip()
        state.metadata["sandbox_checks"] = out
        return state

    return solve


def _run_eval(config: CleanerSandboxConfig, samples: int = 2) -> list[dict[str, object]]:
    task = Task(
        dataset=[Sample(input=f"sample {i}", target="x") for i in range(samples)],
        solver=exercise_sandbox(),
        sandbox=("cleaner", config),
    )
    [log] = eval(task, model="mockllm/model", display="none", log_dir=None, max_samples=1)
    assert log.status == "success", log.error
    assert log.samples is not None and len(log.samples) == samples
    return [s.metadata["sandbox_checks"] for s in log.samples]


def test_inspect_eval_with_cleaner_local_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    checks = _run_eval(CleanerSandboxConfig(backend="local", timeout=20, options={"max_idle": 2}))
    for out in checks:
        assert out["exec_c"] == [True, 0, "5\n"]
        assert out["exec_file"] == [True, "ABC ['arg']\n"]
        assert out["exec_fail"] == [False, 1, True]
        assert out["exec_sh"] == [False, 4, "shell\n"]
        assert out["timeout"] == "TimeoutError"
        assert out["read_file"] == "from program"
        assert out["structured"] == [False, "NameError", "local"]
        assert out["listing"] == "['made.txt', 'prog.py']"  # the second sample got a reset sandbox


def test_eval_leaves_no_backend_or_sandbox_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inspect calls task_init("startup") and task_cleanup("shutdown"): one backend per config, shut down after."""
    from sandboxes.inspect_provider import STORE_KEY, CleanerSandboxEnvironment

    monkeypatch.chdir(tmp_path)
    made: list[LocalSandbox] = []
    original = LocalSandbox.__init__

    def recording_init(self: LocalSandbox, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(LocalSandbox, "__init__", recording_init)
    task = Task(
        dataset=[Sample(input=f"sample {i}", target="x") for i in range(3)],
        solver=exercise_sandbox(),
        sandbox=("cleaner", CleanerSandboxConfig(backend="local", timeout=20, prewarm=1)),
    )
    [log] = eval(task, model="mockllm/model", display="none", log_dir=str(tmp_path), max_samples=1)
    assert log.status == "success", log.error
    assert CleanerSandboxEnvironment._backends == {}, "a backend outlived its eval"
    assert len(made) == 1, "the prewarmed sandbox serves the samples (one at a time), no second backend"
    assert all(not sandbox.workdir.exists() for sandbox in made)
    assert log.samples is not None
    assert all(s.store[STORE_KEY]["backend"] == "local" and s.store[STORE_KEY]["isolation"] for s in log.samples)


def test_structured_refuses_a_foreign_sandbox() -> None:
    from inspect_ai.util._sandbox.local import LocalSandboxEnvironment

    with pytest.raises(TypeError, match="cleaner"):
        structured(LocalSandboxEnvironment())


def test_config_forms() -> None:
    from sandboxes.inspect_provider import _config

    assert _config(None).backend == "auto"
    assert _config("local").backend == "local"
    with pytest.raises(ValueError, match="'auto', 'local' or 'docker'"):
        _config("podman")
    with pytest.raises(ValueError):
        CleanerSandboxConfig(backend="podman")  # type: ignore[arg-type]


# ------------------------------------------------------------------ registry


async def test_local_backend_pools_and_resets() -> None:
    backend = get_backend("local", max_idle=1)
    assert isinstance(backend, LocalBackend)
    first = await backend.acquire()
    assert isinstance(first, LocalSandbox)
    await first.run_python("open('x.txt', 'w').write('1')")
    await backend.release(first)
    again = await backend.acquire()
    assert again is first
    listing = await again.run_python("import os\nprint(os.listdir('.'))")
    assert listing.stdout == "[]\n"
    second = await backend.acquire()
    assert second is not first
    await backend.release(again)
    await backend.release(second)  # beyond max_idle: closed
    assert not second.workdir.exists()
    stranger = LocalSandbox()
    with pytest.raises(ValueError, match="did not hand out"):
        await backend.release(stranger)
    await stranger.close()
    await backend.shutdown()
    assert not first.workdir.exists()
    with pytest.raises(RuntimeError, match="shut down"):
        await backend.acquire()


async def test_local_backend_keeps_as_many_as_were_in_use_at_once() -> None:
    """By default a released sandbox is kept while fewer idle ones than the most ever in use wait, so a steady
    load of N in flight reuses N sandboxes and makes none after its first round."""
    backend = get_backend("local")
    try:
        first_round = [await backend.acquire() for _ in range(12)]
        for box in first_round:
            await box.run_python("open('x.txt', 'w').write('1')")
            await backend.release(box)
        assert backend.idle_limit == 12 and all(box.workdir.exists() for box in first_round)
        second_round = [await backend.acquire() for _ in range(12)]
        assert set(second_round) == set(first_round), "the second round made new sandboxes"
        listings = [await box.run_python("import os\nprint(os.listdir('.'))") for box in second_round]
        assert {r.stdout for r in listings} == {"[]\n"}, "a reused sandbox kept the previous sample's files"
        for box in second_round:
            await backend.release(box)
    finally:
        await backend.shutdown()
    assert not any(box.workdir.exists() for box in first_round)


def test_docker_pool_is_bounded_by_default_and_by_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    from sandboxes.docker.policy import MAX_CONTAINERS_ENV, default_max_containers
    from sandboxes.docker.pool import DockerBackend

    monkeypatch.delenv(MAX_CONTAINERS_ENV, raising=False)
    unconfigured = DockerBackend()  # makes no container: the engine is needed only at the first acquire
    assert unconfigured.max_containers == default_max_containers() >= 4
    assert unconfigured.max_idle == unconfigured.max_containers and unconfigured.idle_ttl > 0
    monkeypatch.setenv(MAX_CONTAINERS_ENV, "3")
    assert get_backend("docker").max_containers == 3  # type: ignore[attr-defined]
    assert DockerBackend(max_containers=5, max_idle=9).max_idle == 5
    monkeypatch.setenv(MAX_CONTAINERS_ENV, "many")
    with pytest.raises(ValueError, match=MAX_CONTAINERS_ENV):
        DockerBackend()
    with pytest.raises(ValueError, match="max_containers"):
        DockerBackend(max_containers=0)
    with pytest.raises(ValueError, match="pool_size"):
        DockerBackend(max_containers=2, pool_size=3)


def test_registry_names() -> None:
    assert resolve_backend_name("local") == "local"
    assert resolve_backend_name(None) in ("local", "docker")
    with pytest.raises(ValueError, match="unknown sandbox backend 'podman'"):
        get_backend("podman")
    with pytest.raises(ValueError, match="bad option"):
        get_backend("local", no_such_option=1)


# ------------------------------------------------------------------ CLI


def test_cli_runs_files_in_one_sandbox(tmp_path: Path) -> None:
    first = tmp_path / "first.py"
    first.write_text("open('shared.txt', 'w').write('hi')\nprint('one')\n")
    second = tmp_path / "second.py"
    second.write_text("print(open('shared.txt').read())\n1 / 0\n")
    proc = subprocess.run(
        [sys.executable, "-m", "sandboxes", "run", "--backend", "local", "--timeout", "10", str(first), str(second)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [line["file"] for line in lines] == [str(first), str(second)]
    assert lines[0]["ok"] and lines[0]["stdout"] == "one\n"
    assert lines[1]["stdout"] == "hi\n" and lines[1]["error_kind"] == "ZeroDivisionError"


def test_cli_missing_file_is_an_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sandboxes", "run", "--backend", "local", str(tmp_path / "nope.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "no such file" in proc.stderr and "nope.py" in proc.stderr
