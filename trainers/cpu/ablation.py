"""SAAR in training, measured: the CPU trainer with SAAR on and off from the same warm start.

``python -m trainers ablation --recipe cpu-ablation --seeds 0 1 --steps 8 --run NAME``
trains, for every seed, one run with SAAR off and one with SAAR on. The two runs of a
seed share everything else: the warm model, the recipe, the data order, the LoRA
initialisation and the sampling seeds of every rollout (common random numbers: the
first turn of row r at step s is sampled with the same seed in both arms, so the arms
differ by what SAAR does and by what training on it changes). Before training (once
per seed) and after each run, the policy is evaluated on held-out problems with SAAR
off, so the arms are compared on what the policy does alone.

The command writes ``results/train/<run>/``: ``runs/saar-{off,on}-seed<k>/`` (each run's
``metrics.jsonl``, plot, settings and ``eval.json``), ``ablation.png`` (tool-failure
rate and accuracy per step, both arms), ``summary.json`` and ``report.md``. Runs already
finished are kept, so re-running the command continues an interrupted ablation;
``--report-only`` redraws the report from what is there.

This module trains the runs (:func:`run_ablation`); :mod:`trainers.cpu.ablation_report` collects what they
measured and writes the report; :mod:`trainers.cpu.ablation_config` holds the options and the run directory's layout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from trainers.core.data import generated_items
from trainers.core.plot import read_metrics
from trainers.core.recipes import Recipe, load_recipe
from trainers.cpu.ablation_config import (
    ARMS,
    HELD_OUT_SEED,
    AblationConfig,
    add_arguments,
    config_from_args,
    recorded_elapsed,
    run_name,
)
from trainers.cpu.ablation_report import write_report


def arm_recipe(recipe: Recipe, arm: str, seed: int, steps: int, engine: str = "") -> Recipe:
    """The recipe of one run: SAAR on or off, the seed and step count set (and the engine, when given), no
    checkpoints."""
    saar = replace(recipe.executor.saar, enabled=arm == "on")
    cpu = {**recipe.cpu, "seed": seed, "steps": steps, "save_steps": 0, **({"engine": engine} if engine else {})}
    return replace(recipe, name=f"saar-{arm}-seed{seed}", executor=replace(recipe.executor, saar=saar), cpu=cpu)


def run_ablation(cfg: AblationConfig, *, progress: bool = True) -> Path:
    """Train every (seed, arm) run not finished yet, then write the report; return the report's path.

    With ``jobs`` > 1 the runs go to that many child processes (``--only ARM:SEED``), each
    logging to its run directory's ``log.txt``.
    """
    recipe = load_recipe(cfg.recipe)
    started = time.time()
    pending = [] if cfg.report_only else [(arm, seed) for seed in cfg.seeds for arm in ARMS]
    if cfg.only:
        arm, _, seed = cfg.only.partition(":")
        pending = [(arm, int(seed))]
    kept = [(a, s) for a, s in pending if _finished(cfg, a, s)]
    pending = [(a, s) for a, s in pending if (a, s) not in kept]
    # runs kept from an earlier invocation: the wall time goes on from what that invocation's report recorded
    earlier_s = (recorded_elapsed(cfg) or 0.0) if kept else 0.0
    if pending:
        _refuse_another_model(cfg, model_fingerprint(recipe.model))
    if cfg.jobs > 1 and len(pending) > 1:
        _run_children(cfg, pending, progress)
    else:
        for arm, seed in pending:
            train_arm(cfg, recipe, arm, seed, progress)
    if cfg.only:
        return cfg.run_dir / "runs" / run_name(*pending[0]) if pending else cfg.run_dir
    return write_report(cfg, recipe, None if cfg.report_only else time.time() - started + earlier_s)


def _finished(cfg: AblationConfig, arm: str, seed: int) -> bool:
    run_dir = cfg.run_dir / "runs" / run_name(arm, seed)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file() or len(read_metrics(metrics)) < cfg.steps:
        return False
    return not cfg.eval_problems or (run_dir / "eval.json").is_file()


def _refuse_another_model(cfg: AblationConfig, model_id: str) -> None:
    """An ablation continues only from the model its finished runs started from (the arms must share it)."""
    for path in sorted((cfg.run_dir / "runs").glob("*/eval.json")):
        started_from = json.loads(path.read_text()).get("model")
        if started_from not in (None, model_id):
            raise ValueError(
                f"{path} was trained from {started_from}, and the recipe's model is now {model_id}: "
                f"continue it with that model, or start another run (--run)"
            )


def train_arm(cfg: AblationConfig, recipe: Recipe, arm: str, seed: int, progress: bool = True) -> None:
    """One run, with the held-out evaluation of its result and (in the off arm) of its warm start."""
    from trainers.cpu.trainer import CpuTrainer  # noqa: PLC0415 - loads transformers

    runs = cfg.run_dir / "runs"
    run_dir = runs / run_name(arm, seed)
    if run_dir.exists():  # an interrupted run starts again (ablation runs keep no checkpoints)
        for f in run_dir.glob("*.*"):
            if f.name != "log.txt":
                f.unlink()
    if progress:
        print(f"== seed {seed}, SAAR {arm} ({cfg.steps} steps) -> {run_dir}", flush=True)
    held_out = generated_items(cfg.eval_problems, seed=HELD_OUT_SEED, prefix="heldout") if cfg.eval_problems else []
    model_id = model_fingerprint(recipe.model)
    with CpuTrainer(arm_recipe(recipe, arm, seed, cfg.steps, cfg.engine), run_dir=run_dir, progress=progress) as run:
        warm_path = runs / f"warm-eval-seed{seed}.json"
        if held_out and arm == "off" and not warm_path.is_file():
            warm_path.write_text(json.dumps(run.evaluate(held_out, saar=False, seed=seed), indent=2))
        started = time.time()
        run.train()
        train_s = time.time() - started
        after = run.evaluate(held_out, saar=False, seed=seed) if held_out else {}
    (run_dir / "eval.json").write_text(json.dumps({**after, "train_s": train_s, "model": model_id}, indent=2))


def model_fingerprint(spec: str | None) -> str:
    """The model spec and, for a file or adapter directory, the sha256 of its weights (first 16 hex digits).

    Recorded per run, so a report shows that every run started from the same warm model.
    """
    from harness.engines.models import resolve_spec  # noqa: PLC0415

    kind, path = resolve_spec(spec)
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes())
    return f"{spec or 'smollm2'} ({kind}, sha256 {digest.hexdigest()[:16]})"


def _run_children(cfg: AblationConfig, pending: list[tuple[str, int]], progress: bool) -> None:
    """Run ``pending`` in at most ``cfg.jobs`` child processes; raise if one fails."""
    waiting, running, failed = list(pending), [], []
    base = [sys.executable, "-m", "trainers.cpu.ablation", "--recipe", cfg.recipe, "--steps", str(cfg.steps)]
    base += ["--run", cfg.run, "--out", cfg.out, "--eval-problems", str(cfg.eval_problems), "--engine", cfg.engine]
    base += ["--seeds", *map(str, cfg.seeds)]
    while waiting or running:
        while waiting and len(running) < cfg.jobs:
            arm, seed = waiting.pop(0)
            run_dir = cfg.run_dir / "runs" / run_name(arm, seed)
            run_dir.mkdir(parents=True, exist_ok=True)
            log = (run_dir / "log.txt").open("w")
            child = subprocess.Popen([*base, "--only", f"{arm}:{seed}"], stdout=log, stderr=subprocess.STDOUT)
            running.append((arm, seed, child, log))
            if progress:
                print(f"== started seed {seed}, SAAR {arm} (pid {child.pid}, log {run_dir / 'log.txt'})", flush=True)
        time.sleep(2)
        for entry in list(running):
            arm, seed, child, log = entry
            if child.poll() is not None:
                running.remove(entry)
                log.close()
                if child.returncode:
                    failed.append(f"{run_name(arm, seed)} (exit {child.returncode})")
                if progress:
                    print(f"== finished seed {seed}, SAAR {arm}: exit {child.returncode}", flush=True)
    if failed:
        raise RuntimeError(f"ablation runs failed: {', '.join(failed)}; see their log.txt")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainers ablation", description=__doc__.splitlines()[0])
    add_arguments(parser)
    print(run_ablation(config_from_args(parser.parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
