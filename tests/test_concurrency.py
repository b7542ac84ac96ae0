"""How many samples a task runs at once: a preset asks for its whole run (up to a ceiling), the sandbox pool follows,
Inspect holds no more sandboxes at once than a docker pool gives, the command line overrides it; and the idle-engine
warning, once per task, against the stand-in engine."""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from inspect_ai import Task
from inspect_ai.dataset import Sample
from inspect_ai.log import EvalConfig, EvalDataset, EvalSpec
from inspect_ai.model import GenerateConfig
from inspect_ai.solver import Generate, TaskState, solver

from bench.scripted_policy import Policy
from bench.standin import StandinConfig, StandinProcess
from harness.evals.concurrency import (
    MAX_IN_FLIGHT,
    idle_engine_message,
    is_local_engine,
    preset_concurrency,
    resolve_in_flight,
)
from sandboxes import inspect_provider
from sandboxes.docker.policy import ACQUIRE_TIMEOUT_ENV, MAX_CONTAINERS_ENV
from sandboxes.inspect_provider import CleanerSandboxConfig, CleanerSandboxEnvironment, expect_sandboxes

ROOT = Path(__file__).resolve().parents[1]
WARNING = "samples in flight"


def _task(name: str, **args: Any):
    spec = importlib.util.spec_from_file_location(f"task_{name}", ROOT / "tasks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)(data="fixture", **args)


# ------------------------------------------------------------------ what a preset asks for


def test_a_preset_runs_the_whole_protocol_at_once_up_to_the_ceiling() -> None:
    assert preset_concurrency("cleaner-paper", 30 * 16).in_flight == 480  # AIME: 30 problems x 16 samples
    assert preset_concurrency("cleaner-paper", 198 * 16).in_flight == MAX_IN_FLIGHT  # GPQA: capped
    assert preset_concurrency(None, 480) is None  # no preset: Inspect's defaults


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_the_task_carries_the_presets_concurrency_to_inspect_and_the_sandbox_pool(backend: str) -> None:
    t = _task("aime24", preset="cleaner-paper", sandbox=backend)  # the fixture: 4 problems x 16 samples
    adaptive = t.config.adaptive_connections
    assert (adaptive.start, adaptive.max) == (64, 64) and t.config.max_connections is None  # --max-connections wins
    assert t.metadata["concurrency"] == {"in_flight": 64}
    options = t.sandbox.config.options
    if backend == "docker":  # a container for every sample in flight, else samples wait for one and time out
        assert options["max_containers"] >= 64 and t.metadata["sandbox"]["max_containers"] >= 64
    else:  # the local pool keeps as many sandboxes as were in use at once
        assert options == {}
    assert (t.config.temperature, t.config.top_p) == (1.0, 0.6)  # the protocol's sampling is kept


def test_without_a_preset_the_task_leaves_concurrency_to_inspect() -> None:
    t = _task("aime24", sandbox="local")
    assert t.config.adaptive_connections is None and t.config.max_connections is None
    assert t.sandbox.config.options == {} and t.metadata["concurrency"] is None


# ------------------------------------------------------------- Inspect's limit on sandboxes follows the docker pool


def test_the_sandbox_limit_is_the_largest_docker_pool_bound_and_none_without_docker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(MAX_CONTAINERS_ENV, "6")
    limit = CleanerSandboxEnvironment.default_concurrency  # what Inspect reads when --max-sandboxes is not given
    assert limit() is None  # no task uses docker: the local pool has no bound, so Inspect sets none
    expect_sandboxes({"backend": "local", "isolation": "bubblewrap"})
    assert limit() is None
    expect_sandboxes({"backend": "docker", "max_containers": 6})
    assert limit() == 6
    expect_sandboxes({"backend": "docker", "max_containers": 64})
    expect_sandboxes({"backend": "docker", "max_containers": 8})
    assert limit() == 64  # the largest pool of the process's tasks
    monkeypatch.setattr(inspect_provider, "_docker_bounds", {2})
    assert limit() == 6  # never below the default pool bound


def test_a_task_on_docker_tells_inspect_its_pools_bound() -> None:
    _task("aime24", preset="cleaner-paper", sandbox="local")
    assert CleanerSandboxEnvironment.default_concurrency() is None
    _task("aime24", sandbox="docker")  # no preset: the pool's default bound
    assert CleanerSandboxEnvironment.default_concurrency() == _default_bound()
    _task("aime24", preset="cleaner-paper", sandbox="docker")  # the fixture's 4 problems x 16 samples in flight
    assert CleanerSandboxEnvironment.default_concurrency() == max(64, _default_bound())


def _default_bound() -> int:
    from sandboxes.docker.policy import default_max_containers

    return default_max_containers()


#: The most samples of :func:`count_in_flight` that held their sandbox at once, and how many hold one now.
_held = {"now": 0, "most": 0}


@solver
def count_in_flight():
    """Holds the sample's sandbox for a moment (a sample holds it from its start to its end) and counts."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        _held["now"] += 1
        _held["most"] = max(_held["most"], _held["now"])
        try:
            await anyio.sleep(0.3)
        finally:
            _held["now"] -= 1
        return state

    return solve


def _sandboxes_at_once(samples: int) -> tuple[int, int | None]:
    """Run ``samples`` samples on the local backend, every one allowed to start at once (``max_samples``): the most
    that held a sandbox at once, and Inspect's limiter on ``cleaner`` sandboxes (None: there was none)."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.util._concurrency import concurrency_semaphores

    _held.update(now=0, most=0)
    task = Task(
        dataset=[Sample(input=f"sample {i}", target="x") for i in range(samples)],
        solver=count_in_flight(),
        sandbox=("cleaner", CleanerSandboxConfig(backend="local", prewarm=0)),
    )
    [log] = inspect_eval(task, model="mockllm/model", max_samples=samples, display="none", log_dir=None)
    assert log.status == "success", log.error
    limiters = [s.concurrency for s in concurrency_semaphores() if s.name == "cleaner"]  # "sandboxes/cleaner"
    return _held["most"], (limiters[0] if limiters else None)


def test_inspect_holds_no_more_sandboxes_at_once_than_the_docker_pool_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _sandboxes_at_once(6) == (6, None)  # no docker task in the process: no limit
    monkeypatch.setenv(MAX_CONTAINERS_ENV, "2")
    expect_sandboxes({"backend": "docker", "max_containers": 2})  # as a task built on docker with this bound does
    assert _sandboxes_at_once(6) == (2, 2)  # the other samples waited in Inspect's limiter, and all succeeded


@pytest.mark.docker
def test_samples_beyond_the_docker_pool_wait_for_a_container_instead_of_timing_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four samples, a pool of two containers, each sample's program holding its container longer than the pool's
    acquire deadline: without Inspect's limit the last two samples fail in the pool's acquire."""
    import json

    from inspect_ai import eval as inspect_eval

    monkeypatch.setenv(MAX_CONTAINERS_ENV, "2")
    monkeypatch.setenv(ACQUIRE_TIMEOUT_ENV, "1")
    call = json.dumps({"name": "python", "arguments": {"code": "import time\ntime.sleep(3)\nprint(25)"}})
    script = tmp_path / "slow.yaml"
    script.write_text(json.dumps({"default": [f"Check.\n<tool_call>\n{call}\n</tool_call>", "\\boxed{25}"]}))
    monkeypatch.chdir(ROOT)  # Inspect resolves task files relative to the working directory
    [log] = inspect_eval(
        "tasks/aime24.py",
        model=f"replay/{script}",
        task_args={"data": "fixture", "sandbox": "docker", "timeout": 10},
        limit=4,
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    assert log.status == "success", log.error
    assert log.samples and len(log.samples) == 4
    for s in log.samples:
        assert s.error is None and any(m.role == "tool" and m.text.strip() == "25" for m in s.messages)


# ------------------------------------------------------------------ which models are local engines


@pytest.mark.parametrize(
    ("model", "base_url", "args", "local"),
    [
        ("vllm/Qwen/Qwen3-4B-Instruct-2507", None, {}, True),
        ("sglang/Qwen/Qwen3-4B-Instruct-2507", "http://10.0.0.5:30000/v1", {}, True),
        ("openai-api/served/m", "http://127.0.0.1:8000/v1", {}, True),
        ("openai/m", None, {"base_url": "http://localhost:8000/v1"}, True),
        ("openai/m", "http://[::1]:8000/v1", {}, True),
        ("openai/gpt-4o", None, {}, False),
        ("openai-api/together/m", "https://api.together.xyz/v1", {}, False),
        ("embedded/smollm2", None, {}, False),
        ("replay/livecodebench.yaml", None, {}, False),
    ],
)
def test_local_engines_are_vllm_sglang_and_servers_on_loopback(
    model: str, base_url: str | None, args: dict[str, Any], local: bool
) -> None:
    assert is_local_engine(model, base_url, args) is local


def _spec(
    model: str = "vllm/m",
    *,
    in_flight: int | None = None,
    samples: int = 30,
    epochs: int = 16,
    limit: int | None = None,
    max_samples: int | None = None,
    **given: Any,
) -> EvalSpec:
    return EvalSpec(
        created="2025-01-01T00:00:00+00:00",
        task="aime24",
        dataset=EvalDataset(samples=samples),
        model=model,
        model_generate_config=GenerateConfig(**given),
        config=EvalConfig(epochs=epochs, limit=limit, max_samples=max_samples),
        metadata={"concurrency": {"in_flight": in_flight} if in_flight else None},
    )


def test_in_flight_is_what_inspect_resolves_and_the_command_line_wins() -> None:
    assert resolve_in_flight(_spec(in_flight=480)).samples == 480
    assert resolve_in_flight(_spec(in_flight=480, max_connections=64)).samples == 64
    assert resolve_in_flight(_spec(in_flight=480, max_samples=32)).samples == 32
    assert resolve_in_flight(_spec(in_flight=480, max_connections=64, max_samples=128)).samples == 64
    assert resolve_in_flight(_spec()).samples == 100  # Inspect's adaptive ceiling
    assert resolve_in_flight(_spec(adaptive_connections=False)).samples == 10  # Inspect's fixed default


def test_the_warning_names_the_setting_and_how_to_raise_it() -> None:
    message = idle_engine_message(_spec(in_flight=480, max_connections=10))
    assert message is not None and "--max-connections 10" in message and "--max-connections 480" in message
    assert "vllm/m" in message and "docs/evaluation.md" in message
    assert idle_engine_message(_spec(in_flight=480)) is None  # the preset's own concurrency
    assert idle_engine_message(_spec(in_flight=480, max_samples=300)) is None  # not well below
    assert idle_engine_message(_spec(in_flight=480, max_samples=200)) is not None
    assert idle_engine_message(_spec()) is not None  # no preset, Inspect's default, a 480-sample run
    assert idle_engine_message(_spec(limit=2)) is None  # 32 samples: Inspect's default holds them all
    assert idle_engine_message(_spec(max_connections=10)) is None  # no preset, set on purpose
    assert idle_engine_message(_spec("openai/gpt-4o", in_flight=480, max_connections=10)) is None
    assert idle_engine_message(_spec("embedded/smollm2", in_flight=480, max_connections=10)) is None
    other = _spec(max_connections=10).model_copy(update={"metadata": {}})
    assert idle_engine_message(other) is None  # not a benchmark task of this project


# ------------------------------------------------------------------ with real Inspect, against the stand-in


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandinProcess]:
    """The stand-in engine answering at once, with no program runs: one generation per sample."""
    log = tmp_path_factory.mktemp("standin") / "standin.log"
    # a name of its own: Inspect's vllm/ provider keeps the first endpoint it met for a model name in this process
    config = StandinConfig(policy=Policy(calls=0), name="cleaner-standin-concurrency")
    with StandinProcess(config, log_path=log) as running:
        yield running


def _eval(standin: StandinProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture, **options: Any) -> list[str]:
    """Run aime24 on the fixture against the stand-in; the idle-engine warnings logged."""
    from inspect_ai import eval as inspect_eval

    task_args = {"data": "fixture", "sandbox": "local", **options.pop("task_args", {})}
    cwd = os.getcwd()
    os.chdir(ROOT)  # Inspect resolves task files relative to the working directory
    try:
        with caplog.at_level(logging.WARNING, logger="harness.evals.concurrency"):
            caplog.clear()
            [log] = inspect_eval(
                "tasks/aime24.py",
                model=f"vllm/{standin.name}",
                model_base_url=standin.base_url,
                task_args=task_args,
                log_dir=str(tmp_path),
                display="none",
                **options,
            )
    finally:
        os.chdir(cwd)
    assert log.status == "success", log.error
    assert log.samples and all(s.output.completion for s in log.samples)
    return [r.getMessage() for r in caplog.records if r.name == "harness.evals.concurrency"]


def test_a_preset_run_below_its_concurrency_warns_once(
    standin: StandinProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture, qwen3_tokenizer_dir: str
) -> None:
    task_args = {"preset": "cleaner-paper", "tokenizer": qwen3_tokenizer_dir}
    # 2 problems x 16 samples at 4 at once: the engine sees 4 requests where the preset asks for 32
    [warning] = _eval(standin, tmp_path / "low", caplog, task_args=task_args, limit=2, max_connections=4)
    assert WARNING in warning and "--max-connections 4" in warning and "--max-connections 32" in warning
    assert _eval(standin, tmp_path / "preset", caplog, task_args=task_args, limit=2) == []


@pytest.mark.slow
def test_inspects_default_on_a_large_run_warns_once_and_raising_it_does_not(
    standin: StandinProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 4 problems x 64 samples, no preset: Inspect's default holds at most 100 requests at once
    [warning] = _eval(standin, tmp_path / "default", caplog, epochs=64)
    assert WARNING in warning and "Inspect's default" in warning and "--max-connections 256" in warning
    assert _eval(standin, tmp_path / "raised", caplog, epochs=64, max_connections=256, max_samples=256) == []
