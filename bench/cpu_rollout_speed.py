"""Benchmark: SAAR's rollout cost, on vs off, with the warm model (CPU trainer path).

Runs the CPU trainer's rollouts (the recipe's model, by default the warm embedded model
``smollm2-tools`` that calls the tool and makes its own mistakes; the local sandbox; the
same prompts and per-trajectory seeds in both arms) for a few steps with SAAR off and
on, and prints per step and per arm: rollout wall time, generated tokens (discarded
regenerations included), failed calls and SAAR events, then the on/off ratios (target:
time <= 1.3x). No training happens: both arms sample from the same policy.

    python -m bench.cpu_rollout_speed [--recipe cpu-smoke] [--steps 4]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import replace

from harness.core import seeds
from harness.core.rollout import RolloutConfig
from trainers.core._compat import get_backend, load_model
from trainers.core.config import CpuConfig, ExecutorConfig
from trainers.core.recipes import load_recipe
from trainers.cpu.rollouts import PolicySampler, run_one
from trainers.cpu.trainer import load_model_f32, load_train_items


async def _arm(
    model, tok, items, cfg: CpuConfig, rcfg: RolloutConfig, judge: ExecutorConfig, steps: int, sandbox: str
) -> list[dict]:
    backend = get_backend(sandbox, runtime=rcfg.tool_env.runtime)
    sampler = PolicySampler(model, tok, cfg, max_batch=cfg.prompts_per_step * cfg.num_generations)
    rows = []
    try:
        for step in range(steps):
            prompts = items[step * cfg.prompts_per_step : (step + 1) * cfg.prompts_per_step]
            jobs = [item for item in prompts for _ in range(cfg.num_generations)]
            start = time.perf_counter()
            records = await asyncio.gather(*(
                run_one(
                    item, sampler, backend, rcfg, cfg, seeds.trajectory_seed(cfg.seed, f"{step}/{row}", 0), judge=judge
                )
                for row, item in enumerate(jobs)
            ))  # fmt: skip
            rows.append({
                "step": step + 1,
                "rollout_s": time.perf_counter() - start,
                "tokens": sum(r.traj.tokens_generated for r in records),
                "tool_failures": sum(r.traj.tool_failures for r in records),
                "saar_events": sum(len(r.traj.events) for r in records),
                "tool_calls": sum(r.traj.tool_calls for r in records),
                "purified": sum(1 for r in records for e in r.traj.events if e.ok),
                "accuracy": sum(r.correct for r in records) / max(len(records), 1),
                "rollouts": len(records),
            })  # fmt: skip
    finally:
        sampler.close()
        await backend.shutdown()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_rollout_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="cpu-smoke")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    recipe = load_recipe(args.recipe)
    cfg = CpuConfig.from_dict(recipe.cpu, str(recipe.path))
    import torch

    torch.set_num_threads(cfg.threads)
    model, tok = load_model_f32(recipe.model, load_model)
    model.eval()
    items = load_train_items(recipe)
    base = recipe.executor.rollout_config()
    sandbox = recipe.executor.sandbox or "local"
    results = {}
    for name, saar in (("off", replace(base.saar, enabled=False)), ("on", replace(base.saar, enabled=True, prob=1.0))):
        rcfg = replace(base, saar=saar)
        results[name] = asyncio.run(_arm(model, tok, items, cfg, rcfg, recipe.executor, args.steps, sandbox))
    print(f"model {recipe.model}, {args.steps} steps of {cfg.prompts_per_step} x {cfg.num_generations} rollouts")
    print(
        f"{'saar':<5}{'step':>5}{'rollout_s':>11}{'tokens':>8}{'calls':>7}{'failed':>8}{'events':>8}{'purified':>9}"
        f"{'acc':>6}"
    )
    for name, rows in results.items():
        for r in rows:
            print(
                f"{name:<5}{r['step']:>5}{r['rollout_s']:>11.2f}{r['tokens']:>8}{r['tool_calls']:>7}"
                f"{r['tool_failures']:>8}{r['saar_events']:>8}{r['purified']:>9}{r['accuracy']:>6.2f}"
            )
    totals = {name: {k: sum(r[k] for r in rows) for k in rows[0] if k != "step"} for name, rows in results.items()}
    for name, t in totals.items():
        print(
            f"{name:<5}{'all':>5}{t['rollout_s']:>11.2f}{t['tokens']:>8}{t['tool_calls']:>7}{t['tool_failures']:>8}"
            f"{t['saar_events']:>8}{t['purified']:>9}{t['accuracy'] / len(results[name]):>6.2f}"
        )
    off, on = totals["off"], totals["on"]
    print(
        f"rollout time on/off: {on['rollout_s'] / off['rollout_s']:.2f}x (target <= 1.30); generated tokens on/off: "
        f"{on['tokens'] / max(off['tokens'], 1):.2f}x; failed calls off {off['tool_failures']}, on "
        f"{on['tool_failures']} ({on['purified']} purified by SAAR)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
