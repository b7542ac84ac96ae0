"""One replay model through the three rollout paths (Inspect eval, OpenRLHF executor, CPU trainer), under both tool
environments: the same trajectories, tool results, SAAR events (failed calls regenerated shallow and deep, retries
exhausted), verdicts and rewards (trainers.parity, the check's own script), and a path that parts is named."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from chat_server import NoServer
from needs import import_or_skip

import_or_skip("openrlhf.utils.agent")
import_or_skip("trl")

from trainers import parity  # noqa: E402
from trainers.core._compat import load_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


@pytest.fixture(scope="module", params=["project", "reference"])
def runs(request, tmp_path_factory, tokenizer):
    from harness.core.chat import end_of_turn

    tool_env = request.param
    script = parity.profile_script(parity.SAAR_SCRIPT, tool_env, end_of_turn(tokenizer), tmp_path_factory.mktemp("s"))
    judge = "lenient" if tool_env == "project" else "reference"
    inspect_run, problems = parity.run_inspect("aime24", script, tool_env, judge=judge)

    async def trainers():
        return (
            await parity.run_executor(problems, script, tool_env, judge=judge, tokenizer=tokenizer),
            await parity.run_cpu(problems, script, tool_env, judge=judge, tokenizer=tokenizer),
        )

    executor_run, cpu_run = asyncio.run(trainers())
    return {"inspect": inspect_run, "executor": executor_run, "cpu": cpu_run, "problems": problems, "script": script}


def test_the_runs_exercise_tool_results_saar_and_both_verdicts(runs):
    samples = runs["inspect"].samples.values()
    actions = [e["action"] for s in samples for e in s.saar_events]
    # failed calls regenerated into similar calls (shallow) and into others (deep), and retries exhausted
    assert {"shallow", "deep", "exhausted"} <= set(actions), actions
    assert {m["ok"] for s in samples for m in s.messages if m["role"] == "tool"} == {True, False}
    assert {s.correct for s in samples} == {True, False}  # a right and a wrong answer
    assert all(s.seeds and all(isinstance(x, int) for x in s.seeds) for s in samples)  # Inspect seeds every call


@pytest.mark.parametrize("path", ["executor", "cpu"])
def test_every_path_gives_inspects_trajectories_verdicts_and_rewards(runs, path):
    assert parity.first_difference(runs["inspect"], runs[path], seeds=False) is None
    assert parity.first_difference(runs["executor"], runs["cpu"], seeds=False) is None  # both trainers' rewards too


def test_the_cpu_trainer_samples_with_inspects_seeds(runs):
    assert parity.first_difference(runs["inspect"], runs["cpu"]) is None


def test_the_executor_samples_with_inspects_seeds(runs):
    assert parity.first_difference(runs["inspect"], runs["executor"]) is None


def test_a_path_under_the_other_profile_is_named_at_its_first_difference(runs, tokenizer):
    tool_env = runs["inspect"].tool_env
    other = "reference" if tool_env == "project" else "project"
    cpu = asyncio.run(parity.run_cpu(runs["problems"], runs["script"], other, tokenizer=tokenizer))
    where = parity.first_difference(runs["inspect"], cpu, seeds=False)
    # the first sample's call (named by another tool) or its result (framed by another environment)
    first = min(runs["inspect"].samples)
    assert where is not None and where.startswith((f"sample {first}, messages[1]", f"sample {first}, messages[2]"))
    # against the other token path, already in the first prompt: the tool the rendered schema shows
    where = parity.first_difference(runs["executor"], cpu, seeds=False)
    assert where is not None and where.startswith(f"sample {first}, prompt: executor "), where


def test_a_changed_reward_or_tool_result_is_named(runs):
    from dataclasses import replace

    cpu = runs["cpu"]
    last = max(cpu.samples)
    changed = parity.PathRun("cpu", cpu.tool_env, {**cpu.samples, last: replace(cpu.samples[last], reward=-1.0)})
    assert parity.first_difference(runs["executor"], changed, seeds=False) == (
        f"sample {last}, reward: executor {runs['executor'].samples[last].reward!r} vs cpu -1.0"
    )
    record = cpu.samples[last]
    i = next(i for i, m in enumerate(record.messages) if m["role"] == "tool")
    messages = [*record.messages[:i], {**record.messages[i], "text": "other"}, *record.messages[i + 1 :]]
    changed = parity.PathRun("cpu", cpu.tool_env, {**cpu.samples, last: replace(record, messages=messages)})
    assert parity.first_difference(runs["inspect"], changed, seeds=False).startswith(
        f"sample {last}, messages[{i}].text: inspect "
    )


def test_the_command_prints_each_paths_first_difference_and_fails_when_one_differs(runs, monkeypatch, capsys):
    from dataclasses import replace

    from trainers.__main__ import main

    paths = [runs["inspect"], runs["executor"], runs["cpu"]]
    monkeypatch.setattr(parity, "run_paths", lambda *a, **k: paths)
    tool_env = runs["inspect"].tool_env
    argv = ["parity", "--model", "replay", "--script", str(runs["script"]), "--task", "aime24", "--tool-env", tool_env]
    assert main(argv) == 0  # seeds compared too: every path asks the engine with Inspect's seeds
    out = capsys.readouterr().out
    assert "inspect vs executor: same" in out and "inspect vs cpu: same" in out
    executor = runs["executor"]
    first = min(executor.samples)
    seeds = [s + 1 for s in executor.samples[first].seeds]
    paths[1] = parity.PathRun(
        "executor", executor.tool_env, {**executor.samples, first: replace(executor.samples[first], seeds=seeds)}
    )
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert f"inspect vs executor: differ at sample {first}, seeds[0]: inspect " in out
    assert "inspect vs cpu: same" in out
    assert main([*argv, "--no-seeds"]) == 0


@pytest.fixture(scope="module")
def code_runs(tokenizer):
    """The LiveCodeBench fixture under ``reference`` with the reference's judge: a stdin problem whose malformed
    call is purified, a functional (LeetCode) problem and a float-output problem."""
    script = parity.REPLAY_DIR / "livecodebench.yaml"  # its calls name code_interpreter under reference
    runs = parity.run_paths("livecodebench", script, "reference", judge="reference", tokenizer=tokenizer)
    return {run.path: run for run in runs}


def test_code_problems_are_compared_with_the_tests_of_the_tasks_own_loader(code_runs):
    problems = code_runs["inspect"].samples
    assert len(problems) == 3 and {s.correct for s in problems.values()} == {True, False}
    # the functional (LeetCode) problem passes the official grader and fails code-judge's exact comparison; under the
    # reference's judge the eval's verdict and both trainers' rewards are code-judge's, so all three paths agree
    assert problems["fx_9001"].correct is False
    for path in ("executor", "cpu"):
        assert parity.first_difference(code_runs["inspect"], code_runs[path]) is None


def test_the_command_runs_the_warm_model_and_the_checks_replay_script_under_each_profile(monkeypatch, capsys):
    from trainers.__main__ import main

    asked = []

    def run_paths(task, model, tool_env, **kwargs):
        asked.append((task, model if isinstance(model, Path) else type(model).__name__, tool_env))
        return [parity.PathRun(path, tool_env) for path in ("inspect", "executor", "cpu")]

    monkeypatch.setattr(parity, "run_paths", run_paths)
    monkeypatch.setattr(parity, "warm_server", NoServer)
    assert main(["parity", "--tool-env", "project", "reference"]) == 0
    assert asked == [
        ("aime24", parity.SAAR_SCRIPT, "project"),
        ("aime24", parity.SAAR_SCRIPT, "reference"),
        ("aime24", "WarmModel", "project"),
        ("aime24", "WarmModel", "reference"),
    ]
    assert main(["parity", "--model", "warm", "--script", "aime24.yaml"]) == 2
    assert "--script is the replay model's" in capsys.readouterr().err
