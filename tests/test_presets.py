"""The reference evaluation protocol as one preset, recorded in the logs; the parse mode per problem kind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from inspect_ai import eval as inspect_eval

from harness.benchmarks.presets import PRESETS, resolve
from harness.benchmarks.registry import BENCHMARKS
from harness.core.toolenv import PROJECT
from harness.reports.compare import arm_from_log

ROOT = Path(__file__).resolve().parents[1]
#: The registered benchmarks by problem kind.
ROLLBACK_ON = [name for name, b in BENCHMARKS.items() if b.kind in ("math", "gpqa")]
CODE = [name for name, b in BENCHMARKS.items() if b.kind == "code"]


def _load(task: str, **args):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"task_{task}", ROOT / "tasks" / f"{task}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, task)(data="fixture", sandbox="local", **args)


@pytest.mark.parametrize("task", ROLLBACK_ON)
def test_paper_preset_runs_math_and_gpqa_with_rollback_on(task: str) -> None:
    t = _load(task, preset="cleaner-paper")
    protocol = t.metadata["protocol"]
    assert t.metadata["preset"] == "cleaner-paper" and t.metadata["saar"] is True
    assert (protocol["max_retries"], protocol["epochs"], protocol["max_turns"]) == (3, 16, 16)
    assert (protocol["max_total_tokens"], protocol["max_prompt_tokens"], protocol["output_chars"]) == (20480, 4096, 256)
    assert (t.config.temperature, t.config.top_p, t.config.max_tokens) == (1.0, 0.6, 20480)
    assert t.epochs == 16


@pytest.mark.parametrize("task", CODE)
def test_paper_preset_runs_code_with_rollback_off_and_ten_samples(task: str) -> None:
    t = _load(task, preset="cleaner-paper")
    assert t.metadata["saar"] is False and t.epochs == 10 and t.metadata["protocol"]["epochs"] == 10


@pytest.mark.parametrize(("task", "epochs"), [(name, 10 if b.kind == "code" else 32) for name, b in BENCHMARKS.items()])
def test_the_7b_preset_runs_every_benchmark_with_rollback_off(task: str, epochs: int) -> None:
    """The reference's 7B scripts: AIME/GPQA 32 samples, LiveCodeBench 10, rollback off, the same sampling."""
    t = _load(task, preset="cleaner-paper-7b")
    protocol = t.metadata["protocol"]
    assert t.metadata["preset"] == "cleaner-paper-7b" and t.metadata["saar"] is False and protocol["saar"] is False
    assert t.epochs == protocol["epochs"] == epochs
    assert (protocol["max_turns"], protocol["max_total_tokens"], protocol["max_prompt_tokens"]) == (16, 20480, 4096)
    assert (t.config.temperature, t.config.top_p, t.config.max_tokens) == (1.0, 0.6, 20480)
    assert len(t.epochs_reducer) == 2  # mean and pass@epochs


def test_explicit_arguments_override_the_preset_and_defaults_apply_without_one() -> None:
    t = _load("aime24", preset="cleaner-paper", saar=False, epochs=2)
    assert t.metadata["saar"] is False and t.epochs == 2 and t.metadata["protocol"]["max_retries"] == 3
    plain = _load("aime24")
    assert plain.metadata["preset"] is None and plain.metadata["protocol"] == resolve(None, "math").to_dict()
    assert plain.epochs == 1 and plain.metadata["saar"] is False


def test_unknown_preset_and_unknown_setting_are_named() -> None:
    with pytest.raises(ValueError, match="unknown preset 'paper'.*cleaner-paper"):
        resolve("paper", "math")
    with pytest.raises(ValueError, match="not protocol settings: \\['temp'\\]"):
        resolve(None, "math", temp=1.0)
    assert set(PRESETS["cleaner-paper"]) == set(PRESETS["cleaner-paper-7b"]) == {"math", "gpqa", "code"}


def test_the_preset_is_in_the_log_and_decides_the_arm(tmp_path: Path, qwen3_tokenizer_dir: str) -> None:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        [log] = inspect_eval(
            "tasks/aime24.py",
            model="replay/aime24.yaml",
            task_args={
                "preset": "cleaner-paper",
                "epochs": 1,
                "data": "fixture",
                "sandbox": "local",
                "tokenizer": qwen3_tokenizer_dir,  # the reference's budget counts tool output in tokens
            },
            limit=1,
            log_dir=str(tmp_path),
            display="none",
        )
    finally:
        os.chdir(cwd)
    assert log.status == "success"
    assert log.eval.metadata["preset"] == "cleaner-paper" and log.eval.metadata["protocol"]["max_retries"] == 3
    assert arm_from_log(log).arm == "on"  # no saar argument: the preset turned rollback on


def test_the_7b_preset_is_in_the_log_and_decides_the_arm(tmp_path: Path, qwen3_tokenizer_dir: str) -> None:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        [log] = inspect_eval(
            "tasks/gpqa.py",
            model="replay/gpqa.yaml",
            task_args={
                "preset": "cleaner-paper-7b",
                "data": "fixture",
                "sandbox": "local",
                "tokenizer": qwen3_tokenizer_dir,
            },
            epochs=1,  # the command line's count replaces the preset's 32
            limit=1,
            log_dir=str(tmp_path),
            display="none",
        )
    finally:
        os.chdir(cwd)
    assert log.status == "success"
    assert log.eval.metadata["preset"] == "cleaner-paper-7b"
    assert log.eval.metadata["protocol"] == resolve("cleaner-paper-7b", "gpqa").to_dict()
    assert log.eval.metadata["protocol"]["epochs"] == 32 and log.eval.config.epochs == 1
    assert arm_from_log(log).arm == "off"  # no saar argument: the 7B preset leaves rollback off


async def test_code_problems_never_run_the_final_python_block(local_sandbox) -> None:
    """The parse mode comes from the problem kind, wherever the rollout config is built."""
    from harness.core.messages import Generation, user
    from harness.core.problems import rollout_config
    from harness.core.rollout import rollout

    answer = "Here is my solution.\n```python\nprint(input())\n```"

    async def generate(messages, *, seed=None):
        return Generation(answer, output_tokens=9)

    code = await rollout([user("q")], generate, local_sandbox, rollout_config("code", tool_env=PROJECT))
    assert code.tool_calls == 0 and code.stop_reason == "answer"
    math = await rollout([user("q")], generate, local_sandbox, rollout_config("math", max_turns=1, tool_env=PROJECT))
    assert math.tool_calls == 1  # for math, a bare python block is a (small model's) tool call
    with pytest.raises(ValueError, match="follows the problem kind"):
        rollout_config("code", accept_python_fence=True, tool_env=PROJECT)
