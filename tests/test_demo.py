"""The README's main job, ``python -m harness demo`` (what ``tox -e demo`` runs), at a small size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log
from needs import needs_vllm

from harness.__main__ import main


@pytest.mark.slow
def test_the_demo_runs_the_warm_model_in_both_arms_and_the_replay_reference(tmp_path: Path) -> None:
    argv = ["demo", "--problems", "3", "--max-tokens", "96", "--max-turns", "2", "--sandbox", "local"]
    argv += ["--engine", "embedded"]
    assert main([*argv, "--run", "small", "--out-dir", str(tmp_path), "--display", "none"]) == 0
    out = tmp_path / "small"
    arms = {a["arm"]: a for a in json.loads((out / "summary.json").read_text())["arms"]}
    assert set(arms) == {"off", "on"}
    for arm in arms.values():
        assert arm["model"] == "embedded/smollm2-tools" and arm["status"] == "success"
        assert arm["metrics"]["samples"] == 3
        assert arm["metrics"]["tool_calls"] >= 3  # the warm model calls the tool
        log = read_eval_log(arm["log"], header_only=True)
        assert log.eval.model_args.get("dtype") == "float32"  # the arms stay paired whatever shares a batch
        assert (log.plan.config.temperature, log.plan.config.top_p) == (1.0, 1.0)  # the training rollouts' sampling
    assert arms["off"]["metrics"]["saar_on_rate"] == 0 and arms["on"]["metrics"]["saar_on_rate"] == 1
    report = (out / "report.md").read_text()
    assert "## SAAR on vs off (paired by sample)" in report and "| aime24 | 3 |" in report
    # the replay part exercises SAAR's branches deterministically: the mechanism's reference
    replay = {a["arm"]: a["metrics"] for a in json.loads((out / "replay" / "summary.json").read_text())["arms"]}
    assert replay["on"]["saar_shallow"] > 0 and replay["on"]["saar_deep"] > 0 and replay["on"]["saar_purified"] > 0
    assert replay["off"]["saar_shallow"] == replay["off"]["saar_deep"] == 0
    # which failures were purified: the failed program and the one installed in its place
    table = (out / "replay" / "report.md").read_text().split("## Purified failures", 1)[1]
    assert (
        "| SyntaxError | shallow | 0.99 | `import sympy ⏎ print(sympy.divisor_count(2**4 * 3**4)` "
        "| `import sympy ⏎ print(sympy.divisor_count(2**4 * 3**4))` |"
    ) in table
    assert "| NameError | deep |" in table and "`print(total(range(1, 21)))`" in table


@pytest.mark.slow
def test_the_demo_runs_on_vllm_where_it_runs(tmp_path: Path) -> None:
    """The default engine where vLLM runs: its server, Inspect's vllm/ provider, the engine named in the report."""
    needs_vllm()
    argv = ["demo", "--problems", "4", "--epochs", "1", "--max-tokens", "96", "--max-turns", "2", "--sandbox", "local"]
    assert main([*argv, "--run", "small", "--out-dir", str(tmp_path), "--display", "none"]) == 0
    out = tmp_path / "small"
    arms = {a["arm"]: a for a in json.loads((out / "summary.json").read_text())["arms"]}
    for arm in arms.values():
        assert arm["model"].startswith("vllm/") and arm["status"] == "success"
        assert arm["metrics"]["samples"] == 4 and arm["metrics"]["tool_calls"] >= 4
    report = (out / "report.md").read_text()
    assert "Engine: vLLM 0.32.0 (CPU, bfloat16, eager)" in report
    assert "significant at the 5% level" in report  # the verdict, in words
    assert "POST /v1/chat/completions" in (out / "vllm-server.log").read_text()
