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
    text = render_card(card)
    assert "tool environment reference:" in text and 'tool_env.parse: "strict" -> "repair"' in text
    plain = protocol_card(None, "math", resolve(None, "math"), load_prompt_templates())
    assert plain["differs_from_default"] == {} and "the project's default protocol" in render_card(plain)


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
