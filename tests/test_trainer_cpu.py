"""The CPU embedded trainer: an interrupted run resumes from its checkpoint's step (slow: loads SmolLM2)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

from trainers.cpu_trainer import CpuConfig, train_cpu  # noqa: E402
from trainers.launcher import load_recipe  # noqa: E402

TINY = """
name: tiny
model: null
data: {source: trainers/data/bignum.jsonl, limit: 4}
executor:
  saar: {enabled: true, prob: 1.0, max_retries: 1}
  max_turns: 1
  timeout: 5.0
  sandbox: local
cpu: {steps: 2, prompts_per_step: 1, num_generations: 2, max_new_tokens: 8, max_total_tokens: 300, save_steps: 1}
"""


def test_cpu_config_rejects_bad_values():
    with pytest.raises(ValueError, match="unknown keys"):
        CpuConfig.from_dict({"stepz": 1}, "r.yaml")
    with pytest.raises(ValueError, match="num_generations"):
        CpuConfig.from_dict({"num_generations": 1}, "r.yaml")


@pytest.mark.slow
def test_interrupted_run_resumes_from_checkpoint_step(tmp_path):
    recipe_path = tmp_path / "tiny.yaml"
    recipe_path.write_text(TINY)
    recipe = load_recipe(recipe_path)
    run = train_cpu(recipe, out_root=tmp_path, stop_after=1, progress=False)  # interrupted after step 1
    assert [p.name for p in (run / "checkpoints").glob("checkpoint-*")] == ["checkpoint-1"]
    with pytest.raises(FileExistsError, match="--resume"):
        train_cpu(recipe, out_root=tmp_path, progress=False)
    train_cpu(recipe, out_root=tmp_path, resume=True, progress=False)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]  # continued at step 2, not from 1
    for r in rows:
        assert {
            "reward",
            "accuracy",
            "tool_failure_rate",
            "saar_shallow",
            "saar_deep",
            "tokens_generated",
            "step_s",
        } <= set(r)
    assert (run / "checkpoints" / "checkpoint-2").is_dir()
    assert (run / "metrics.png").stat().st_size > 0
