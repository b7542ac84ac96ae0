"""`python -m trainers train-cleaner` repeated: a new run each time, `--resume` continues the last, nothing overwritten.

The CLI is driven as `tox -e train-cleaner` drives it, with the CPU trainer replaced by a stand-in that
writes what a run writes (settings, a metrics line and a checkpoint per step), so no model is trained.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

import trainers.__main__ as cli
from trainers.cpu import runs
from trainers.cpu.runs import new_run_name, resolve_run_dir, runs_of


class _StandInTrainer:
    """What CpuTrainer does to its run directory, without a model: one step per call, appended."""

    def __init__(self, recipe, *, run_dir: Path, resume: bool = False, stop_after=None, progress=True) -> None:
        self.run_dir, self.resume = run_dir, resume
        ckpts = sorted(run_dir.glob("checkpoints/checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        if resume and not ckpts:
            raise FileNotFoundError(f"--resume: {run_dir} holds no checkpoint")
        self.step = int(ckpts[-1].name.split("-")[1]) if ckpts else 0

    def __enter__(self):
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not self.resume:
            (self.run_dir / "recipe.json").write_text("{}")
        return self

    def __exit__(self, *exc) -> None:
        pass

    def train(self) -> Path:
        self.step += 1
        with (self.run_dir / "metrics.jsonl").open("a") as fh:
            fh.write(json.dumps({"step": self.step}) + "\n")
        (self.run_dir / "checkpoints" / f"checkpoint-{self.step}").mkdir(parents=True)
        return self.run_dir


@pytest.fixture
def cli_in(tmp_path, monkeypatch):
    """Run the CLI in ``tmp_path`` (its results/train/), with the stand-in trainer and a ticking clock."""
    pytest.importorskip("trl")  # trainers.cpu.trainer imports TRL
    import trainers.cpu.trainer as trainer

    monkeypatch.chdir(tmp_path)  # train_cpu writes under the relative results/train/, as tox runs it
    monkeypatch.setattr(trainer, "CpuTrainer", _StandInTrainer)
    monkeypatch.setattr(cli, "_gpu_ready", lambda: False)
    clock = iter(datetime(2026, 12, 1, 12, 0, s) for s in range(60))
    real = runs.new_run_name
    monkeypatch.setattr(runs, "new_run_name", lambda recipe, root, now=None: real(recipe, root, next(clock)))
    recipe = Path(__file__).resolve().parents[1] / "trainers" / "recipes" / "cpu-smoke.yaml"

    def run(*args: str) -> int:
        return cli.main(["train-cleaner", "--recipe", str(recipe), *args])

    return run, tmp_path / "results" / "train"


def _metrics(run_dir: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_cleaner_twice_makes_two_runs_and_resume_continues_the_last(cli_in, capsys):
    run, root = cli_in
    assert run() == 0
    assert run() == 0  # the command a user repeats: no "already holds a run"
    first, second = runs_of("cpu-smoke", root)
    assert (first.name, second.name) == ("cpu-smoke-20261201-120000", "cpu-smoke-20261201-120001")
    before = {p: p.read_bytes() for p in first.rglob("*") if p.is_file()}
    assert run("--resume") == 0  # continues the newest run, at its next step
    assert _metrics(second) == [1, 2]
    assert _metrics(first) == [1]
    assert {p: p.read_bytes() for p in first.rglob("*") if p.is_file()} == before  # the earlier run untouched
    assert len(runs_of("cpu-smoke", root)) == 2
    assert f"metrics: {Path('results/train') / second.name / 'metrics.jsonl'}" in capsys.readouterr().out


def test_a_named_run_is_refused_when_it_holds_anything_unless_resumed(cli_in, capsys):
    run, root = cli_in
    assert run("--run", "mine") == 0
    assert run("--run", "mine") == 2
    assert "already holds a run; pass --resume" in capsys.readouterr().err
    assert run("--run", "mine", "--resume") == 0
    assert _metrics(root / "mine") == [1, 2]


def test_resume_without_a_run_is_a_clear_error(cli_in, capsys):
    run, _ = cli_in
    assert run("--resume") == 2
    assert "holds no run of recipe 'cpu-smoke'" in capsys.readouterr().err


def test_names_sort_by_time_and_never_collide(tmp_path):
    now = datetime(2026, 12, 1, 9, 5, 7)
    assert new_run_name("r", tmp_path, now) == "r-20261201-090507"
    for _ in range(11):
        (tmp_path / new_run_name("r", tmp_path, now)).mkdir()
    (tmp_path / new_run_name("r", tmp_path, datetime(2026, 12, 1, 9, 5, 8))).mkdir()
    (tmp_path / "r-other").mkdir()  # not a run of recipe r's naming
    (tmp_path / "rr-20261201-090509").mkdir()  # another recipe's
    names = [p.name for p in runs_of("r", tmp_path)]
    assert names[0] == "r-20261201-090507" and names[1] == "r-20261201-090507-2"
    assert names[10] == "r-20261201-090507-11"  # numeric, not lexical, order within a second
    assert names[-1] == "r-20261201-090508"
    assert resolve_run_dir("r", tmp_path, None, True) == tmp_path / "r-20261201-090508"


def test_a_bare_named_run_of_before_timestamps_is_resumed_when_it_is_the_only_one(tmp_path):
    (tmp_path / "cpu-smoke" / "checkpoints" / "checkpoint-3").mkdir(parents=True)
    assert resolve_run_dir("cpu-smoke", tmp_path, None, True) == tmp_path / "cpu-smoke"
    assert resolve_run_dir("cpu-smoke", tmp_path, None, False).name.startswith("cpu-smoke-")
    with pytest.raises(ValueError, match="plain name"):
        resolve_run_dir("cpu-smoke", tmp_path, "../elsewhere", False)


def test_sigterm_during_train_cleaner_closes_the_trainer(cli_in, monkeypatch):
    """A SIGTERM is a SystemExit inside the run, so the trainer's context (its engine, its sandboxes) is closed."""
    import os
    import signal

    run, _ = cli_in
    closed = []

    def train(self):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the signal did not stop the run")

    monkeypatch.setattr(_StandInTrainer, "train", train)
    monkeypatch.setattr(_StandInTrainer, "__exit__", lambda self, *exc: closed.append(exc[0]))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as stopped:
            run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert closed == [SystemExit]
