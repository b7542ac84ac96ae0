"""Every registered benchmark's Inspect task end to end with the replay model, SAAR on and off, in the real local
sandbox (each has a replay script, harness/data/replay/<name>.yaml)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import EvalLog

from harness.benchmarks.registry import NAMES

ROOT = Path(__file__).resolve().parents[1]
TASKS = list(NAMES)


def run(task: str, saar: bool, tmp_path: Path) -> EvalLog:
    # this Inspect version resolves task files only by paths relative to the working directory
    [log] = inspect_eval(
        f"tasks/{task}.py",
        model=f"replay/{task}.yaml",
        task_args={"saar": saar, "data": "fixture", "sandbox": "local"},
        log_dir=str(tmp_path),
        display="none",
    )
    return log


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[tuple[str, bool], EvalLog]:
    tmp = tmp_path_factory.mktemp("logs")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return {(t, s): run(t, s, tmp) for t in TASKS for s in (True, False)}
    finally:
        os.chdir(cwd)


def summaries(log: EvalLog) -> list[dict]:
    return [s.metadata["trajectory"] for s in log.samples or []]


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("saar", [True, False])
def test_task_runs_to_success(logs, task, saar):
    log = logs[(task, saar)]
    assert log.status == "success", log.error
    assert log.samples and all(s.error is None for s in log.samples)
    assert all(t["saar_on"] is saar for t in summaries(log))


def test_saar_on_leaves_no_purified_failure_in_the_trajectory(logs):
    for task in TASKS:
        for sample in logs[(task, True)].samples or []:
            t = sample.metadata["trajectory"]
            kept = [m for m in sample.messages if m.role == "tool" and m.metadata and not m.metadata.get("ok", True)]
            # a failure may only remain when SAAR gave up on it (exhausted, no call, attempt cap)
            allowed = sum(1 for e in t["saar_events"] if e["action"] in ("exhausted", "no_call", "cap"))
            assert len(kept) == t["failures_kept"] <= allowed, (task, sample.id)


def test_fixtures_exercise_shallow_deep_and_the_other_branches(logs):
    actions = {e["action"] for task in TASKS for t in summaries(logs[(task, True)]) for e in t["saar_events"]}
    assert {"shallow", "deep", "exhausted", "no_call", "length"} <= actions


def test_saar_off_keeps_errors(logs):
    kept = {True: 0, False: 0}
    for task in TASKS:
        for saar in (True, False):
            kept[saar] += sum(t["failures_kept"] for t in summaries(logs[(task, saar)]))
        off = summaries(logs[(task, False)])
        assert all(t["saar_events"] == [] for t in off)
        assert sum(t["failures_kept"] for t in off) == sum(t["tool_failures"] for t in off)  # every error stays
    assert kept[False] > kept[True]


def test_scores_of_the_replayed_answers(logs):
    def accuracy(log: EvalLog) -> list[float]:
        return [next(iter(s.scores.values())).value["accuracy"] for s in log.samples or []]

    # aime24: 025 answered as 25 counts; aime25: 30 is wrong; gpqa: the truncated sample has no answer
    assert accuracy(logs[("aime24", True)]) == [1.0, 1.0, 1.0, 1.0]
    assert sorted(accuracy(logs[("aime25", True)])) == [0.0, 1.0, 1.0]
    assert accuracy(logs[("livecodebench", False)]) == [1.0, 1.0, 1.0]


def test_inspect_lists_every_task():
    out = subprocess.run(
        [sys.executable, "-m", "inspect_ai", "list", "tasks", "tasks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert all(f"tasks/{t}.py@{t}" in out for t in TASKS)


@pytest.mark.parametrize("task", TASKS)
def test_inspect_and_the_report_agree_on_each_metric_name(logs, task):
    """One definition per metric: Inspect's tool_failure_rate (a per-sample mean) is the report's tool_failure_rate;
    the report's pooled rate has its own name."""
    from harness.reports.compare import arm_from_log
    from harness.reports.stats import summarize

    log = logs[(task, True)]
    by_name = {score.name: score for score in log.results.scores}
    inspect_rate = by_name["tool_failure_rate"].metrics["mean"].value
    s = summarize(arm_from_log(log))
    assert s["tool_failure_rate"] == pytest.approx(inspect_rate)
    recs = arm_from_log(log).samples
    pooled = sum(r.tool_failures for r in recs) / max(1, sum(r.tool_calls for r in recs))
    assert s["tool_failure_rate_pooled"] == pytest.approx(pooled)
