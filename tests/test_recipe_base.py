"""A recipe may name a ``base:`` recipe and hold only what differs from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainers.core.recipes import RecipeError, load_recipe


def test_a_derived_recipe_differs_from_its_base_only_where_it_says() -> None:
    base, derived = load_recipe("cpu-ablation-vllm-lr1e-3"), load_recipe("cpu-ablation-vllm-lr1e-3-bf16")
    assert {k for k in base.cpu.keys() | derived.cpu.keys() if base.cpu.get(k) != derived.cpu.get(k)} == {
        "engine_dtype"
    }
    assert derived.executor == base.executor and derived.data == base.data and derived.model == base.model
    assert derived.name == "cpu-ablation-vllm-lr1e-3-bf16"
    root = load_recipe("cpu-ablation")  # two bases down: the lr1e-3 recipe's own change and its base's engine
    assert derived.cpu["learning_rate"] == 1.0e-3 != root.cpu["learning_rate"] and root.cpu["threads"] == 1


def test_a_base_loop_and_a_missing_base_are_named(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(f"base: {tmp_path / 'b.yaml'}\nname: a\n")
    (tmp_path / "b.yaml").write_text(f"base: {tmp_path / 'a.yaml'}\nname: b\n")
    with pytest.raises(RecipeError, match="'base' recipes form a loop"):
        load_recipe(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("base: no-such-recipe\nname: c\n")
    with pytest.raises(RecipeError, match="recipe no-such-recipe: no such file"):
        load_recipe(tmp_path / "c.yaml")
