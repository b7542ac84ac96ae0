"""Benchmark: rollout wall time and generated tokens per step, SAAR on vs off (CPU trainer path).

Runs the CPU trainer's rollouts (the embedded model, the local sandbox, the same
prompts and sampling seeds) for a few steps with SAAR off and on, and prints per-step
rollout seconds and generated tokens, and the on/off time ratio (target: <= 1.3).
No training happens: both arms sample from the same untrained policy.

    python -m trainers.bench [--recipe cpu-smoke] [--steps 2]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from dataclasses import replace

from harness.rollout import RolloutConfig
from trainers._compat import get_backend, load_model
from trainers.cpu_trainer import CpuConfig, HFGenerator, load_model_f32, load_train_items, run_one
from trainers.launcher import load_recipe


async def _arm(model, tok, items, cfg: CpuConfig, rcfg: RolloutConfig, steps: int, sandbox: str) -> list[dict]:
    backend = get_backend(sandbox)
    rows = []
    try:
        for step in range(steps):
            gen = HFGenerator(model, tok, cfg, seed=cfg.seed + step)
            prompts = items[step * cfg.prompts_per_step : (step + 1) * cfg.prompts_per_step]
            rng = random.Random(step)
            start = time.perf_counter()
            records = [
                await run_one(item, gen, backend, rcfg, cfg, random.Random(rng.random()))
                for item in prompts
                for _ in range(cfg.num_generations)
            ]
            rows.append({
                "step": step + 1,
                "rollout_s": time.perf_counter() - start,
                "tokens": sum(r.traj.tokens_generated for r in records),
                "tool_failures": sum(r.traj.tool_failures for r in records),
                "saar_events": sum(len(r.traj.events) for r in records),
            })  # fmt: skip
    finally:
        await backend.shutdown()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainers.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="cpu-smoke")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args(argv)
    recipe = load_recipe(args.recipe)
    cfg = CpuConfig.from_dict(recipe.cpu, str(recipe.path))
    import torch

    torch.set_num_threads(cfg.threads)
    model, tok = load_model_f32(recipe.model, load_model)
    model.eval()
    items = load_train_items(recipe)
    base = RolloutConfig(
        max_turns=recipe.executor.max_turns,
        timeout=recipe.executor.timeout,
        output_chars=recipe.executor.output_chars,
        saar=recipe.executor.saar_config(),
    )
    sandbox = recipe.executor.sandbox or "local"
    results = {}
    for name, saar in (("off", replace(base.saar, enabled=False)), ("on", replace(base.saar, enabled=True, prob=1.0))):
        rcfg = replace(base, saar=saar)
        results[name] = asyncio.run(_arm(model, tok, items, cfg, rcfg, args.steps, sandbox))
    print(f"{'saar':<5}{'step':>5}{'rollout_s':>11}{'tokens':>8}{'tool_fail':>10}{'events':>8}")
    for name, rows in results.items():
        for r in rows:
            print(
                f"{name:<5}{r['step']:>5}{r['rollout_s']:>11.2f}{r['tokens']:>8}{r['tool_failures']:>10}"
                f"{r['saar_events']:>8}"
            )
    t_off = sum(r["rollout_s"] for r in results["off"])
    t_on = sum(r["rollout_s"] for r in results["on"])
    tok_off = sum(r["tokens"] for r in results["off"])
    tok_on = sum(r["tokens"] for r in results["on"])
    print(
        f"rollout time on/off: {t_on / t_off:.2f}x (target <= 1.30); generated tokens on/off: "
        f"{tok_on / max(tok_off, 1):.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
