"""A recipe may name a ``base:`` recipe and hold only what differs from it."""

from __future__ import annotations

from dataclasses import asdict
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


# What SAAR each shipped recipe trains with, all settings resolved (the tool environment's similarity included):
# a change to how recipes are read must leave every one of these as it is.
SAAR_CPU = {"enabled": True, "prob": 1.0, "gamma": 0.5, "max_retries": 3, "similarity": "code", "max_attempts": 30}
SHIPPED_SAAR = {
    "cpu-ablation": SAAR_CPU,
    "cpu-ablation-vllm": SAAR_CPU,
    "cpu-ablation-vllm-lr1e-3": SAAR_CPU,
    "cpu-ablation-vllm-lr1e-3-bf16": SAAR_CPU,
    "cpu-ablation-vllm-is": SAAR_CPU,
    "cpu-smoke": {**SAAR_CPU, "max_retries": 2},
    "cpu-vllm": {**SAAR_CPU, "max_retries": 2},
    "qwen-gpu-smoke": {**SAAR_CPU, "similarity": "call"},  # the 4B recipe's tool environment
    "qwen2.5-7b-cleaner": {**SAAR_CPU, "prob": 0.7, "similarity": "call"},
    "qwen3-4b-cleaner": {**SAAR_CPU, "similarity": "call"},
    "qwen3-4b-cleaner-is": {**SAAR_CPU, "similarity": "call"},
}


@pytest.mark.parametrize("name", sorted(SHIPPED_SAAR))
def test_each_shipped_recipe_resolves_to_its_saar_settings(name: str) -> None:
    pytest.importorskip("openrlhf")  # the GPU recipes' flags are checked by OpenRLHF's parser
    resolved = load_recipe(name).executor.rollout_config().saar
    assert asdict(resolved) == SHIPPED_SAAR[name]


def test_every_shipped_recipe_has_its_saar_settings_pinned() -> None:
    from trainers.core.recipes import RECIPES

    assert sorted(p.stem for p in RECIPES.glob("*.yaml")) == sorted(SHIPPED_SAAR)
