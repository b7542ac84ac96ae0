"""The executor's settings are declared as settings fields, and the recipes' docs name every one."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from harness.core.settings import setting_help
from trainers.core.config import ExecutorConfig

ROOT = Path(__file__).resolve().parents[1]


def test_every_executor_setting_has_help_and_is_named_in_the_recipes_docs() -> None:
    """``ExecutorConfig``'s fields are settings (``harness.core.settings.setting``), and docs/training.md's recipe
    keys name each of them, so a new one cannot go undocumented."""
    recipes = (ROOT / "docs" / "training.md").read_text(encoding="utf-8").split("## Recipes", 1)[1].split("\n## ")[0]
    for f in fields(ExecutorConfig):
        assert setting_help(f), f.name
        assert f"`{f.name}`" in recipes, f"docs/training.md's Recipes section does not name executor.{f.name}"
