"""The protocol card: the whole resolved protocol, what differs from the default, the same in the CLI and the logs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.benchmarks.presets import resolve
from harness.core.prompts import load_prompt_templates
from harness.evals.tasks import registered_task
from harness.reports.card import protocol_card, render_card

ROOT = Path(__file__).resolve().parents[1]


def test_the_paper_card_shows_the_reference_environment_and_what_differs() -> None:
    card = protocol_card("cleaner-paper", "gpqa", resolve("cleaner-paper", "gpqa"), load_prompt_templates())
    assert card["tool_env"]["name"] == "reference" and card["tool_env"]["tool_name"] == "code_interpreter"
    assert card["protocol"]["judge"] == "reference" and card["protocol"]["timeout"] == 4.0
    differs = card["differs_from_default"]
    assert differs["tool_env"] == ["project", "reference"] and differs["tool_env.budget"] == ["generated", "response"]
    assert card["budget"].startswith("20480 tokens, counting every response token")
    # Open-CLEANER 91e40ad, recipe/cleaner/eval/eval_qwen3_4b_aime_gpqa.sh line 147: rollout.dtype=float16
    assert card["engine_dtype"] == "float16"
    text = render_card(card)
    assert "tool environment reference:" in text and 'tool_env.parse: "strict" -> "repair"' in text
    assert "engine dtype: float16, as the reference served it (give the engine -M dtype=float16)" in text
    plain = protocol_card(None, "math", resolve(None, "math"), load_prompt_templates())
    assert plain["differs_from_default"] == {} and "the project's default protocol" in render_card(plain)
    assert plain["engine_dtype"] is None and "engine dtype" not in render_card(plain)
    # eval_qwen2_7b_aime_gpqa.sh sets no dtype (verl's bfloat16); eval_qwen2_7b_livecodebench.sh line 144: float16
    seven = [
        protocol_card("cleaner-paper-7b", k, resolve("cleaner-paper-7b", k), load_prompt_templates())
        for k in ("gpqa", "code")
    ]
    assert [c["engine_dtype"] for c in seven] == ["bfloat16", "float16"]


def test_every_log_carries_the_card_the_cli_prints() -> None:
    task = registered_task("gpqa", preset="cleaner-paper", data="fixture", sandbox="local")
    out = subprocess.run(
        [sys.executable, "-m", "harness", "protocol", "--preset", "cleaner-paper", "--kind", "gpqa", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert task.metadata is not None and json.loads(json.dumps(task.metadata["card"])) == json.loads(out.stdout)
    assert task.metadata["prompt_template"]["sha256"] == load_prompt_templates().sha256


def test_a_setting_given_on_the_command_line_is_in_the_card() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harness", "protocol", "--preset", "cleaner-paper", "-T", "tool_env=project"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "tool environment project:" in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "harness", "protocol", "-T", "tool_env=paper"], cwd=ROOT, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "unknown tool environment 'paper'" in bad.stderr
