"""``python -m bench``: the tools' front door lists every tool in ``bench/`` and runs one by its name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import __main__ as front

ROOT = Path(__file__).resolve().parents[1]


def test_every_tool_is_listed_with_its_docstring_line(capsys: pytest.CaptureFixture[str]) -> None:
    modules = sorted(
        p.stem
        for p in (ROOT / "bench").glob("*.py")
        if not p.name.startswith("_") and 'if __name__ == "__main__":' in p.read_text(encoding="utf-8")
    )
    assert "standin" in modules and "sandbox_soak" in modules
    assert [module for module, _ in front.tools().values()] == [f"bench.{m}" for m in modules]
    assert front.main([]) == 0
    listing = capsys.readouterr().out
    for name, (_, line) in front.tools().items():
        assert line, f"bench/{name.replace('-', '_')}.py has no docstring"
        assert f"  {name} " in listing and line in listing


def test_an_unknown_tool_is_refused_with_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert front.main(["sandbox-sped"]) == 2
    err = capsys.readouterr().err
    assert "no tool 'sandbox-sped'" in err and "sandbox-speed" in err


def test_a_tool_runs_by_its_name_with_its_arguments() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "sandbox-speed", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "usage: python -m bench.sandbox_speed" in proc.stdout


def test_the_tools_find_the_repository_from_bench() -> None:
    """The evaluation tools run Inspect on ``tasks/`` from the repository's root: their ROOT is the checkout's."""
    from bench import engine_speed, eval_speed

    assert engine_speed.ROOT == eval_speed.ROOT == ROOT
    assert (eval_speed.ROOT / eval_speed.TASK).is_file()


def test_the_stand_in_starts_from_any_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tools are not installed: a stand-in started from elsewhere (a test's temporary directory, a user's
    run directory) and with no PYTHONPATH still finds ``bench.standin``."""
    import urllib.request

    from bench.standin import StandinProcess

    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)
    with StandinProcess(log_path=tmp_path / "standin.log") as server:
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=10) as response:
            assert response.status == 200
