"""An engine that cannot be started says why before it is tried: the `vllm` command not on PATH, SGLang that the
Python on PATH (or Inspect's own) cannot import."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from harness.engines.launch_check import (
    EngineCommandMissing,
    check_sglang_command,
    check_vllm_command,
    sglang_would_start,
)

ROOT = Path(__file__).resolve().parents[1]


def test_a_missing_vllm_command_is_named_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a virtualenv's Python run without its bin on PATH
    with pytest.raises(EngineCommandMissing, match=r"no `vllm` executable is on PATH") as err:
        check_vllm_command()
    assert "--model-base-url" in str(err.value) and "VLLM_BASE_URL" in str(err.value)
    assert "activate" in str(err.value) or "pip install vllm" in str(err.value)


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


# ------------------------------------------------------------------ SGLang: Inspect starts it when the model is created


def _python_on_path(bindir: Path, pythonpath: Path | None = None) -> Path:
    """A `python` in ``bindir`` that runs this interpreter, seeing ``pythonpath`` (another environment's python)."""
    bindir.mkdir(exist_ok=True)
    python = bindir / "python"
    env = f"PYTHONPATH={pythonpath} " if pythonpath else ""
    python.write_text(f'#!/bin/sh\n{env}exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return python


def _sglang_package(root: Path) -> Path:
    """A directory holding an importable (empty) ``sglang`` package."""
    (root / "sglang").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    return root


def test_sglang_starts_a_server_exactly_when_inspects_provider_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from inspect_ai._util.error import PrerequisiteError
    from inspect_ai.model import get_model

    monkeypatch.delenv("SGLANG_BASE_URL", raising=False)
    assert sglang_would_start("sglang/Qwen/Qwen3-4B") and not sglang_would_start("vllm/Qwen/Qwen3-4B")
    assert not sglang_would_start("sglang/m", base_url="http://127.0.0.1:9/v1")
    assert not sglang_would_start("sglang/m", model_args={"port": 9})
    with pytest.raises(PrerequisiteError, match="sglang"):  # no endpoint: the provider tries to start one
        get_model("sglang/m", memoize=False)
    get_model("sglang/m", base_url="http://127.0.0.1:9/v1", memoize=False)  # an endpoint: nothing started
    get_model("sglang/m", port=9, memoize=False)
    monkeypatch.setenv("SGLANG_BASE_URL", "http://127.0.0.1:9/v1")
    assert not sglang_would_start("sglang/m")
    get_model("sglang/m", memoize=False)


def test_sglang_missing_here_is_named_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(_python_on_path(tmp_path / "bin").parent))
    with pytest.raises(EngineCommandMissing, match=r"cannot import sglang") as err:
        check_sglang_command()
    message = str(err.value)
    assert "python -m sglang.launch_server" in message and f"{sys.executable} -m pip install sglang" in message
    assert "-M port=PORT" in message and "--model-base-url" in message and "SGLANG_BASE_URL" in message


def test_sglang_that_only_this_python_has_says_to_put_it_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(_sglang_package(tmp_path / "site")))  # this process imports sglang...
    monkeypatch.setenv("PATH", str(_python_on_path(tmp_path / "bin").parent))  # ...the python on PATH does not
    with pytest.raises(EngineCommandMissing, match=r"the `python` on PATH \(.*\) cannot import sglang") as err:
        check_sglang_command()
    assert f"put {Path(sys.executable).parent} first on PATH" in str(err.value)


def test_sglang_importable_on_both_sides_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _sglang_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    python = _python_on_path(tmp_path / "bin", pythonpath=site)
    monkeypatch.setenv("PATH", str(python.parent))
    assert check_sglang_command() == str(python)


def test_compare_with_sglang_that_cannot_start_says_why_before_inspect_tries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.evals.arms import run_arms
    from harness.reports.compare import CompareError

    monkeypatch.delenv("SGLANG_BASE_URL", raising=False)
    monkeypatch.setenv("PATH", str(_python_on_path(tmp_path / "bin").parent))
    monkeypatch.chdir(ROOT)
    with pytest.raises(CompareError, match=r"python -m sglang.launch_server.*cannot import sglang"):
        run_arms(["aime24"], "sglang/some/model", log_dir=tmp_path / "runs", limit=1, task_args={"data": "fixture"})
    assert not (tmp_path / "runs").exists(), "no eval was started"
