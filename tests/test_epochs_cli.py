"""pass@k with ``inspect eval ... --epochs N`` on the command line: the task's reducers follow the count that runs.

Each case is the real CLI in a child process (the replay model on the AIME 2025 fixture, the local sandbox),
and the log's results are read back. The module's cases start together: each child spends most of its time
importing, which the machine's cores do side by side.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from inspect_ai.log import EvalLog, read_eval_log

ROOT = Path(__file__).resolve().parents[1]
INSPECT = Path(sys.executable).with_name("inspect")
TIMEOUT_S = 300

#: each test's command-line arguments after the common ones
CASES = {
    "pass_at_k": ("--epochs", "2"),
    "count_replaces_task_argument": ("-T", "epochs=4", "--epochs", "2"),  # pass@4 over 2 epochs would be refused
    "users_reducers": ("--epochs", "2", "--epochs-reducer", "max"),
}


def command(log_dir: Path, *args: str) -> list[str]:
    cmd = [str(INSPECT)] if INSPECT.exists() else [sys.executable, "-m", "inspect_ai"]
    cmd += ["eval", "tasks/aime25.py", "--model", "replay/aime25.yaml", "-T", "data=fixture", "-T", "sandbox=local"]
    return cmd + ["--log-dir", str(log_dir), "--display", "none", *args]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[subprocess.Popen, Path]]]:
    """Every case's CLI run, started at once: its process and its directory (logs, and stderr in ``stderr.txt``)."""
    started: dict[str, tuple[subprocess.Popen, Path]] = {}
    try:
        for name, args in CASES.items():
            directory = tmp_path_factory.mktemp(name)
            with open(directory / "stderr.txt", "w") as stderr:
                child = subprocess.Popen(
                    command(directory / "logs", *args), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr
                )
            started[name] = (child, directory)
        yield started
    finally:
        for child, _ in started.values():
            if child.poll() is None:
                child.kill()
                child.wait()


def inspect_eval(runs: dict[str, tuple[subprocess.Popen, Path]], case: str) -> EvalLog:
    """The case's log, once its CLI run ended with success."""
    child, directory = runs[case]
    try:
        returncode = child.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise
    assert returncode == 0, (directory / "stderr.txt").read_text()[-3000:]
    [path] = (directory / "logs").glob("*.eval")
    log = read_eval_log(str(path))
    assert log.status == "success", log.error
    return log


def accuracy(log) -> dict[str, float]:
    """The accuracy per reducer, from the log's results."""
    return {s.reducer: s.metrics["mean"].value for s in log.results.scores if s.name == "accuracy"}


@pytest.mark.slow
def test_epochs_on_the_command_line_report_pass_at_k(runs):
    log = inspect_eval(runs, "pass_at_k")
    assert log.eval.config.epochs == 2
    assert log.eval.config.epochs_reducer == ["mean", "pass_at_2"]
    assert {s.epoch for s in log.samples} == {1, 2}
    # the replay model answers each problem the same way every epoch: 2 of 3 right, so pass@2 = pass@1 = 2/3
    assert accuracy(log) == pytest.approx({"mean": 2 / 3, "pass_at_2": 2 / 3})


@pytest.mark.slow
def test_the_command_line_count_replaces_the_task_argument_and_its_pass_at_k(runs):
    log = inspect_eval(runs, "count_replaces_task_argument")
    assert log.eval.config.epochs == 2
    assert set(accuracy(log)) == {"mean", "pass_at_2"}


@pytest.mark.slow
def test_the_users_reducers_are_kept(runs):
    log = inspect_eval(runs, "users_reducers")
    assert log.eval.config.epochs_reducer == ["max"]
    assert set(accuracy(log)) == {"max"}
