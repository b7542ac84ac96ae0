"""Regression evals: a baseline the logs do not meet, or a log that is not a success, fails with a clear message."""

from __future__ import annotations

from pathlib import Path

import ablation_logs as logs
import pytest
import yaml

from harness.__main__ import main
from harness.benchmarks.registry import NAMES
from harness.evals.baselines import regression
from harness.reports.regression import BASELINES_DIR, BaselineError, load_baseline

T, E = logs.trajectory, logs.event
MODEL = "replay/test.yaml"


def _baseline(directory: Path, name: str, **fields) -> Path:
    data = {"task": "aime24", "model": MODEL, "dataset": "fixture", "saar": True, **fields}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture
def run_logs(tmp_path: Path) -> Path:
    """aime24 SAAR on: 2 samples, one purified NameError, accuracy 0.5."""
    d = tmp_path / "logs"
    d.mkdir()
    samples = [
        (
            "a",
            1,
            1.0,
            T(
                calls=2,
                failures=1,
                tokens=50,
                saar_on=True,
                error_kinds={"NameError": 1},
                events=[E("shallow", "NameError", ok=True)],
            ),
        ),
        ("b", 1, 0.0, T(calls=1, tokens=30, saar_on=True)),
    ]
    logs.make_log(d, "aime24", True, samples, model=MODEL)
    return d


def _run(baselines: list[Path], from_logs: Path, tmp_path: Path) -> tuple[int, str]:
    lines: list[str] = []
    rc = regression(baselines, log_dir=tmp_path / "runs", from_logs=[from_logs], echo=lines.append)
    return rc, "\n".join(lines)


def test_met_baseline_passes(run_logs: Path, tmp_path: Path):
    b = _baseline(
        tmp_path,
        "ok",
        metrics={
            "accuracy": {"value": 0.5, "tolerance": 0.0},
            "tool_failure_rate_pooled": {"value": 1 / 3, "tolerance": 0.001},
            "saar_shallow": 1,
            "saar_deep": 0,
            "errors.NameError": 1,
            "errors.Timeout": 0,
            "tokens_mean": {"min": 10, "max": 100},
        },
    )
    rc, out = _run([b], run_logs, tmp_path)
    assert rc == 0, out
    assert "PASS  ok" in out and "1 passed, 0 failed" in out


def test_unmet_baseline_fails_naming_task_metric_expected_and_measured(run_logs: Path, tmp_path: Path):
    b = _baseline(tmp_path, "strict", metrics={"accuracy": {"value": 1.0, "tolerance": 0.25}, "saar_deep": 2})
    rc, out = _run([b], run_logs, tmp_path)
    assert rc == 1
    assert "FAIL  strict" in out
    assert "task aime24" in out and "metric accuracy expected 1 ± 0.25, measured 0.5" in out
    assert "metric saar_deep expected 2, measured 0" in out


def test_log_with_error_status_fails(tmp_path: Path):
    d = tmp_path / "logs"
    d.mkdir()
    logs.make_log(d, "aime24", True, [("a", 1, 1.0, T(saar_on=True))], model=MODEL, status="error")
    b = _baseline(tmp_path, "b", metrics={"accuracy": 1.0})
    rc, out = _run([b], d, tmp_path)
    assert rc == 1
    assert "task aime24" in out and "eval log status is 'error'" in out


def test_errored_samples_fail_even_when_metrics_hold(tmp_path: Path):
    d = tmp_path / "logs"
    d.mkdir()
    logs.make_log(d, "aime24", True, [("a", 1, 1.0, T(saar_on=True))], model=MODEL, errored=[("b", 1)])
    rc, out = _run([_baseline(tmp_path, "b", metrics={"accuracy": 1.0})], d, tmp_path)
    assert rc == 1 and "1 sample(s) errored: b#1" in out


def test_missing_log_and_unknown_metric_fail(run_logs: Path, tmp_path: Path):
    other_arm = _baseline(tmp_path, "off", saar=False, metrics={"accuracy": 0.5})
    typo = _baseline(tmp_path, "typo", metrics={"acuracy": 0.5})
    rc, out = _run([other_arm, typo], run_logs, tmp_path)
    assert rc == 1
    assert "off: task aime24, SAAR off" in out and "no eval log for this baseline" in out
    assert "unknown metric 'acuracy'" in out


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"saar": "yes"}, "'saar' is required and must be true or false"),
        ({"model": None}, "'model' is required"),
        ({"limit": 0}, "'limit' must be a positive integer"),
        ({"metrics": {"accuracy": {"value": 1, "tol": 0}}}, "unknown field(s) ['tol']"),
        ({"metrics": {"accuracy": "high"}}, "must be a number or a mapping"),
        ({"metricz": {}}, "unknown field(s) ['metricz']"),
    ],
)
def test_malformed_baselines_are_rejected_by_file_and_field(tmp_path: Path, fields: dict, message: str):
    path = _baseline(tmp_path, "bad", **fields)
    with pytest.raises(BaselineError) as err:
        load_baseline(path)
    assert str(path) in str(err.value) and message in str(err.value)
    rc, out = _run([path], tmp_path, tmp_path)
    assert rc == 2 and message in out


def test_update_records_measured_values(run_logs: Path, tmp_path: Path):
    b = _baseline(tmp_path, "new")
    lines: list[str] = []
    rc = regression([b], log_dir=tmp_path / "runs", from_logs=[run_logs], update=True, echo=lines.append)
    assert rc == 0
    metrics = load_baseline(b).metrics
    values = {m.metric: m.value for m in metrics}
    assert values["accuracy"] == 0.5 and values["saar_shallow"] == 1 and values["tool_calls"] == 3


def test_bundled_baselines_are_valid():
    files = sorted(BASELINES_DIR.glob("*.yaml"))
    assert files, f"no baselines in {BASELINES_DIR}"
    loaded = [load_baseline(f) for f in files]
    pairs = {(b.task, b.saar) for b in loaded if b.model.startswith("replay/")}
    assert pairs == {(t, s) for t in NAMES for s in (False, True)}  # both arms of every registered benchmark
    assert all(b.metrics for b in loaded)
    assert any(b.model.startswith("embedded/") and b.generate.get("temperature") == 0 for b in loaded)


def test_cli_exit_codes(run_logs: Path, tmp_path: Path):
    good = _baseline(tmp_path, "good", metrics={"accuracy": 0.5})
    bad = _baseline(tmp_path, "bad", metrics={"accuracy": 0.0})
    assert main(["regression", str(good), "--from-logs", str(run_logs)]) == 0
    assert main(["regression", str(good), str(bad), "--from-logs", str(run_logs)]) == 1


def test_real_replay_run_meets_its_baseline_and_a_tampered_copy_fails(tmp_path: Path):
    """The bundled aime25 replay baseline, run for real; then the same with one expected value changed."""
    source = BASELINES_DIR / "aime25-replay-saar-on.yaml"
    data = yaml.safe_load(source.read_text())
    lines: list[str] = []
    assert regression([source], log_dir=tmp_path / "runs", echo=lines.append) == 0, "\n".join(lines)
    data["metrics"]["accuracy"] = {"value": 0.0, "tolerance": 0.1}
    tampered = tmp_path / "tampered.yaml"
    tampered.write_text(yaml.safe_dump(data))
    lines.clear()
    # two at once, each in its own process: the verdicts come in the baselines' order
    assert regression([tampered, source], log_dir=tmp_path / "runs2", jobs=2, echo=lines.append) == 1
    assert lines[0].startswith("FAIL  tampered") and lines[2].startswith("PASS  aime25-replay-saar-on"), lines
    assert "task aime25" in lines[1] and "metric accuracy expected 0 ± 0.1, measured 0.666667" in lines[1]
    assert lines[-1] == "regression: 1 passed, 1 failed"


def test_a_worker_process_that_dies_fails_its_baseline_by_name(tmp_path: Path):
    """An eval whose process dies (here its task exits the interpreter) fails that baseline, not the others."""
    dies = tmp_path / "dies.py"
    dies.write_text("import os\nfrom inspect_ai import task\n\n\n@task\ndef dies(**args):\n    os._exit(9)\n")
    good = BASELINES_DIR / "aime25-replay-saar-on.yaml"
    lines: list[str] = []
    assert regression(
        [_baseline(tmp_path, "dies", task=f"{dies}@dies", model="replay/aime25.yaml"), good],
        log_dir=tmp_path,
        jobs=2,
        echo=lines.append,
    )
    out = "\n".join(lines)
    assert lines[0].startswith("FAIL  dies") and "BrokenProcessPool" in lines[1], out
    assert lines[-2].startswith("PASS  aime25-replay-saar-on"), out  # the other process ran on


def test_a_run_that_errors_fails_the_regression(tmp_path: Path):
    path = _baseline(
        tmp_path,
        "broken",
        task="aime25",
        model="replay/does-not-exist.yaml",
        task_args={"sandbox": "local"},
        metrics={"accuracy": 1.0},
    )
    lines: list[str] = []
    assert regression([path], log_dir=tmp_path / "runs", echo=lines.append) == 1
    out = "\n".join(lines)
    assert "broken: task aime25" in out and "eval log status is 'error'" in out and "does-not-exist" in out


def test_a_dataset_file_next_to_the_baseline_is_found_from_any_directory(tmp_path: Path):
    """Inspect loads a task from the task's own directory: a relative data path must be resolved by the baseline."""
    (tmp_path / "data").mkdir()
    problems = tmp_path / "data" / "problems.jsonl"
    problems.write_text('{"ID": "p1", "Problem": "What is 1 + 1?", "Answer": 2}\n', encoding="utf-8")
    baseline = load_baseline(_baseline(tmp_path, "warm", dataset="data/problems.jsonl"))
    assert baseline.all_task_args["data"] == str(problems.resolve())
    assert load_baseline(_baseline(tmp_path, "fx")).all_task_args["data"] == "fixture"
