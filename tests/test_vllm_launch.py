"""The launcher that lets vLLM import while its model directory is written: when it starts, when it gives up."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from harness.engines.vllm_launch import wait_for


def test_it_goes_on_once_the_file_appears(tmp_path: Path) -> None:
    ready = tmp_path / "config.json"
    threading.Timer(0.3, ready.write_text, args=("{}",)).start()
    assert wait_for(ready, timeout_s=10, parent=os.getppid(), poll_s=0.01)


def test_it_gives_up_after_its_timeout(tmp_path: Path) -> None:
    assert not wait_for(tmp_path / "config.json", timeout_s=0.2, parent=os.getppid(), poll_s=0.01)


def test_it_gives_up_when_the_process_that_started_it_is_gone(tmp_path: Path) -> None:
    assert not wait_for(tmp_path / "config.json", timeout_s=10, parent=os.getppid() + 1, poll_s=0.01)
