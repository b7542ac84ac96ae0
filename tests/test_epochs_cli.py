"""pass@k with ``inspect eval ... --epochs N`` on the command line: the task's reducers follow the count that runs.

Each case is the real CLI in a child process (the replay model on the AIME 2025 fixture, the local sandbox),
and the log's results are read back.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log

ROOT = Path(__file__).resolve().parents[1]
INSPECT = Path(sys.executable).with_name("inspect")


def inspect_eval(tmp_path: Path, *args: str):
    cmd = [str(INSPECT)] if INSPECT.exists() else [sys.executable, "-m", "inspect_ai"]
    cmd += ["eval", "tasks/aime25.py", "--model", "replay/aime25.yaml", "-T", "data=fixture", "-T", "sandbox=local"]
    cmd += ["--log-dir", str(tmp_path), "--display", "none", *args]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [path] = tmp_path.glob("*.eval")
    log = read_eval_log(str(path))
    assert log.status == "success", log.error
    return log


def accuracy(log) -> dict[str, float]:
    """The accuracy per reducer, from the log's results."""
    return {s.reducer: s.metrics["mean"].value for s in log.results.scores if s.name == "accuracy"}


@pytest.mark.slow
def test_epochs_on_the_command_line_report_pass_at_k(tmp_path):
    log = inspect_eval(tmp_path, "--epochs", "2")
    assert log.eval.config.epochs == 2
    assert log.eval.config.epochs_reducer == ["mean", "pass_at_2"]
    assert {s.epoch for s in log.samples} == {1, 2}
    # the replay model answers each problem the same way every epoch: 2 of 3 right, so pass@2 = pass@1 = 2/3
    assert accuracy(log) == pytest.approx({"mean": 2 / 3, "pass_at_2": 2 / 3})


@pytest.mark.slow
def test_the_command_line_count_replaces_the_task_argument_and_its_pass_at_k(tmp_path):
    log = inspect_eval(tmp_path, "-T", "epochs=4", "--epochs", "2")  # pass@4 over 2 epochs would be refused
    assert log.eval.config.epochs == 2
    assert set(accuracy(log)) == {"mean", "pass_at_2"}


@pytest.mark.slow
def test_the_users_reducers_are_kept(tmp_path):
    log = inspect_eval(tmp_path, "--epochs", "2", "--epochs-reducer", "max")
    assert log.eval.config.epochs_reducer == ["max"]
    assert set(accuracy(log)) == {"max"}
