"""An engine that cannot be started says why before it is tried: the `vllm` command not on PATH."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.engines.launch_check import EngineCommandMissing, check_vllm_command

ROOT = Path(__file__).resolve().parents[1]


def test_a_missing_vllm_command_is_named_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a virtualenv's Python run without its bin on PATH
    with pytest.raises(EngineCommandMissing, match=r"no `vllm` executable is on PATH") as err:
        check_vllm_command()
    assert "base_url" in str(err.value) and ("activate" in str(err.value) or "pip install vllm" in str(err.value))


def test_the_vllm_command_on_path_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "vllm"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    assert check_vllm_command() == str(fake)


def test_an_eval_that_would_start_vllm_without_the_command_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from inspect_ai import eval as inspect_eval

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("VLLM_BASE_URL", raising=False)
    monkeypatch.chdir(ROOT)
    [log] = inspect_eval(
        "tasks/aime24.py",
        model=f"vllm/{tmp_path / 'checkpoint'}",
        task_args={"data": "fixture", "sandbox": "local"},
        limit=1,
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    assert log.status == "error" and log.error is not None
    assert "no `vllm` executable is on PATH" in log.error.message


def test_a_vllm_model_given_a_server_needs_no_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from inspect_ai.model import get_model

    from harness.engines.launch_check import vllm_would_start

    monkeypatch.delenv("VLLM_BASE_URL", raising=False)
    started = get_model(f"vllm/{tmp_path / 'a'}", memoize=False)
    given = get_model(f"vllm/{tmp_path / 'b'}", base_url="http://127.0.0.1:9/v1", memoize=False)
    assert vllm_would_start(started.api) and not vllm_would_start(given.api)
    monkeypatch.setenv("VLLM_BASE_URL", "http://127.0.0.1:9/v1")
    assert not vllm_would_start(started.api)
