"""``python -m harness`` is the project's front door: its --help names every command of the project, evaluation,
training and sandbox tools alike, and the training and sandbox ones run ``python -m trainers`` and
``python -m sandboxes`` as they are."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import forward
from harness.core.environ import temporary_environ

ROOT = Path(__file__).resolve().parents[1]


def subcommands(parser: argparse.ArgumentParser) -> list[str]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(action.choices)


def python_m(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_front_door_lists_the_trainers_and_sandboxes_commands_as_they_are() -> None:
    import sandboxes.__main__
    import trainers.__main__

    assert list(forward.TRAINERS) == subcommands(trainers.__main__._parser())
    assert list(forward.SANDBOXES) == subcommands(sandboxes.__main__._parser())


def test_python_m_harness_help_names_every_command_of_the_project() -> None:
    import sandboxes.__main__
    import trainers.__main__

    done = python_m("harness", "--help")
    assert done.returncode == 0, done.stderr
    evaluation = ["compare", "regression", "demo", "serve", "protocol"]
    training = subcommands(trainers.__main__._parser())
    sandbox_tools = subcommands(sandboxes.__main__._parser())
    named = {word.strip("{},") for line in done.stdout.splitlines() for word in line.split()}
    missing = [c for c in [*evaluation, "trainers", "sandboxes", *training, *sandbox_tools] if c not in named]
    assert not missing, f"python -m harness --help does not name {missing}:\n{done.stdout}"


def test_the_front_door_runs_the_trainers_command_with_its_arguments_and_exit_status() -> None:
    done = python_m("harness", "trainers", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout == python_m("trainers", "--help").stdout
    bad = python_m("harness", "trainers", "plot", "no-such-metrics.jsonl")
    assert bad.returncode == python_m("trainers", "plot", "no-such-metrics.jsonl").returncode == 2
    assert "no-such-metrics.jsonl" in bad.stderr


def test_a_temporary_environment_variable_is_put_back_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLEANER_TEST_SET", "before")
    monkeypatch.delenv("CLEANER_TEST_UNSET", raising=False)
    monkeypatch.setenv("CLEANER_TEST_KEPT", "kept")
    with temporary_environ(CLEANER_TEST_SET="during", CLEANER_TEST_UNSET="during", CLEANER_TEST_KEPT=None):
        assert os.environ["CLEANER_TEST_SET"] == os.environ["CLEANER_TEST_UNSET"] == "during"
        assert os.environ["CLEANER_TEST_KEPT"] == "kept"  # None: left as it is
        os.environ["CLEANER_TEST_OTHER"] = "set inside"  # not one of its variables: stays
    assert os.environ["CLEANER_TEST_SET"] == "before" and "CLEANER_TEST_UNSET" not in os.environ
    assert os.environ["CLEANER_TEST_KEPT"] == "kept"
    assert os.environ.pop("CLEANER_TEST_OTHER") == "set inside"
    with pytest.raises(RuntimeError), temporary_environ(CLEANER_TEST_SET="during"):
        raise RuntimeError("the block failed")
    assert os.environ["CLEANER_TEST_SET"] == "before"
