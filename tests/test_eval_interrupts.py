"""An eval that cannot run fails before its first sample, and one that is told to stop stops: SIGTERM and Ctrl-C
(SIGINT) end ``inspect eval`` promptly, with its log written as cancelled.

Each case is the real CLI in a child process (the replay model on the AIME 2024 fixture, the local sandbox).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from inspect_ai.log import read_eval_log

ROOT = Path(__file__).resolve().parents[1]
INSPECT = Path(sys.executable).with_name("inspect")


def command(tmp_path: Path, model: str, *args: str) -> list[str]:
    cmd = [str(INSPECT)] if INSPECT.exists() else [sys.executable, "-m", "inspect_ai"]
    cmd += ["eval", "tasks/aime24.py", "--model", model, "-T", "data=fixture", "-T", "sandbox=local", "--limit", "1"]
    return cmd + ["--log-dir", str(tmp_path / "logs"), "--display", "none", *args]


def test_a_response_budget_without_a_tokenizer_fails_before_the_first_sample(tmp_path: Path) -> None:
    """The replay model has no tokenizer: the reference preset's budget is refused when the task is built
    (before: every sample and epoch searched the hub for a tokenizer named after the script)."""
    cmd = command(tmp_path, "replay/aime24.yaml", "-T", "preset=cleaner-paper")
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "TokenizerError" in done.stderr and "pass -T tokenizer=" in done.stderr
    assert "huggingface.co" not in done.stderr  # no hub search


def ignore_sigint() -> None:
    """A background job of a shell script starts with SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def as_in_a_terminal() -> None:
    """A command typed in a terminal starts with SIGINT at its default, whatever the test runner inherited (a test
    run that is itself a shell's background job has it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("signum", "before"),
    [
        (signal.SIGTERM, None),
        pytest.param(signal.SIGINT, None, marks=pytest.mark.slow),
        pytest.param(signal.SIGTERM, ignore_sigint, marks=pytest.mark.slow, id="SIGTERM-sigint-ignored"),
    ],
)
def test_a_signal_ends_the_eval_with_its_log_cancelled(signum: int, before, tmp_path: Path) -> None:
    program = "import time\ntime.sleep(120)"
    turn = "Wait.\n<tool_call>\n" + json.dumps({"name": "python", "arguments": {"code": program}}) + "\n</tool_call>"
    script = tmp_path / "sleep.yaml"
    script.write_text(yaml.safe_dump({"default": [turn, "\\boxed{0}"]}))
    cmd = command(tmp_path, f"replay/{script}", "-T", "timeout=300")
    child = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=before or as_in_a_terminal
    )
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "logs").glob("*.eval")):  # the eval has started
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()[1][-3000:]
            time.sleep(0.2)
        time.sleep(3)  # its sample is in the program, which sleeps for longer than the test waits
        sent = time.monotonic()
        child.send_signal(signum)
        _, stderr = child.communicate(timeout=60)
        assert time.monotonic() - sent < 30, "the eval did not end promptly"
    finally:
        if child.poll() is None:
            child.kill()
    [path] = (tmp_path / "logs").glob("*.eval")
    assert read_eval_log(str(path), header_only=True).status == "cancelled", stderr[-3000:]
