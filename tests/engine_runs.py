"""The short CPU training run on vLLM's engine that tests/test_trainer_engine*.py train (a recipe's YAML)."""

from __future__ import annotations


def engine_run_recipe(steps: int) -> str:
    """1 problem x 2 rollouts per step, a checkpoint after every step, rollouts on vLLM's engine."""
    return f"""
name: engine-run
model: smollm2-tools
data: {{source: trainers/data/tools-rl.jsonl, limit: 4}}
executor:
  saar: {{enabled: true, prob: 1.0, max_retries: 1}}
  max_turns: 2
  timeout: 5.0
  sandbox: local
cpu: {{steps: {steps}, prompts_per_step: 1, num_generations: 2, max_new_tokens: 48, max_total_tokens: 640,
      learning_rate: 1.0e-4, save_steps: 1, temperature: 1.0, top_p: 1.0, engine: vllm}}
"""
