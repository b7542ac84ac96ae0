"""``python -m trainers``: launch a recipe, train on CPU, prepare data, benchmark.

* ``launch --recipe <file|name> [--check] [--dry-run]``: validate a recipe, estimate its GPU memory, and print
  (or run) its OpenRLHF command / Ray job;
* ``train-cleaner [--recipe R] [--run NAME] [--resume]``: where CUDA and OpenRLHF are
  present, launch the default GPU recipe; elsewhere run the CPU embedded trainer;
* ``prepare-data [--source S] [--prompt-template FILE] --out F``: Open-AgentRL-30K (hub id
  or local path) as OpenRLHF prompt JSONL, prompts from the project's templates or FILE's;
* ``plot <metrics.jsonl>``: redraw a run's plot;
* ``warmup [--steps N ...]``: the cold-start tool-use SFT that builds ``embedded/smollm2-tools-sft``
  (:mod:`trainers.warmup.build`);
* ``warmup-iterate [--rounds N ...]``: expert-iteration rounds from the SFT, each round's adapter
  in ``results/warmup/expert-iteration/round-<k>/`` (:mod:`trainers.warmup.iterate`);
* ``warmup-measure [--models A B ...]``: the warm model(s) on held-out problems (:mod:`trainers.warmup.measure`);
* ``ablation [--seeds 0 1 --steps N --run NAME]``: the CPU trainer with SAAR on and off from
  the same warm start, with a report and plots (:mod:`trainers.cpu.ablation`).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.cli.forward import TRAINERS
from sandboxes.base import SandboxError
from trainers.core.faults import EngineDied
from trainers.core.recipes import Recipe, RecipeError, load_recipe

GPU_RECIPE = "qwen3-4b-cleaner"
CPU_RECIPE = "cpu-smoke"


def _gpu_ready() -> bool:
    if importlib.util.find_spec("openrlhf") is None or importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def _exit_on_sigterm() -> None:
    """SIGTERM (tox, CI, a user's kill) as SystemExit, so that ``with`` blocks close what they started: vLLM's
    engine runs in child processes that outlive a process killed without cleanup."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _check(recipe: Recipe, gpu_gib: float | None, *, required: bool) -> int:
    """Print the recipe's output paths and GPU memory estimate; 2 when it cannot fit (or, when ``required``,
    cannot be estimated), else 0."""
    for flag, path in recipe.outputs().items():
        print(f"{flag}: {path}")
    if gpu_gib is None and "memory_gib" not in recipe.gpu and not required:
        print("no gpu.memory_gib in the recipe: its GPU memory is not checked (launch --check --gpu-memory-gib N)")
        return 0
    plan = recipe.memory_plan(gpu_gib)
    print(plan.report())
    if problems := plan.problems():
        print("\n".join(f"error: {line}" for line in problems), file=sys.stderr)
        return 2
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainers", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    def command(name: str, **options: Any) -> argparse.ArgumentParser:
        """A subcommand, with its help from the front door's list (one list of the commands and what they do)."""
        if name not in TRAINERS:
            raise KeyError(f"python -m trainers {name}: name it in harness.cli.forward.TRAINERS, with its help")
        return sub.add_parser(name, help=TRAINERS[name], **options)

    p = command("launch")
    p.add_argument("--recipe", required=True)
    p.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    p.add_argument(
        "--check",
        action="store_true",
        help="estimate the GPU memory of the log-prob pass and the training step, check the output paths, and "
        "exit (2 when a setting cannot fit, naming the setting to change); a launch runs the same check first",
    )
    p.add_argument(
        "--gpu-memory-gib", type=float, default=None, help="the GPU's memory for the check (default: gpu.memory_gib)"
    )
    p = command("train-cleaner")
    p.add_argument("--recipe", default=None)
    p.add_argument(
        "--run", default=None, help="run name under results/train/ (default: a new <recipe>-<timestamp> run)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the recipe's newest run (or --run NAME) from its latest checkpoint",
    )
    p.add_argument("--cpu", action="store_true", help="use the CPU trainer even where a GPU is present")
    p = command("prepare-data")
    p.add_argument("--source", default="Gen-Verse/Open-AgentRL-30K")
    p.add_argument("--out", required=True)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument(
        "--prompt-template",
        default=None,
        metavar="FILE",
        help="a prompt template file (YAML or JSON, see docs/benchmarks.md); default: the project's",
    )
    p = command("plot")
    p.add_argument("metrics")
    p = command(
        "warmup",
        epilog="Expert-iteration rounds from this SFT: python -m trainers warmup-iterate --rounds N "
        "(adapters in results/warmup/expert-iteration/round-<k>/, the committed adapter is read, never written; "
        "see docs/models.md). Measure them: python -m trainers warmup-measure --models <dirs> --engine vllm --saar.",
    )
    from trainers.warmup.config import add_arguments as add_warmup_arguments

    add_warmup_arguments(p)
    p = command("warmup-measure", add_help=False)
    p = command("warmup-iterate", add_help=False)
    p = command("ablation")
    from trainers.cpu.ablation_config import add_arguments as add_ablation_arguments

    add_ablation_arguments(p)
    p = command("parity")
    from trainers.parity import add_arguments as add_parity_arguments

    add_parity_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["warmup-measure"]:  # its own parser (and --help)
        from trainers.warmup.measure import main as measure_main

        return measure_main(argv[1:])
    if argv[:1] == ["warmup-iterate"]:  # its own parser (and --help)
        from trainers.warmup.iterate import main as iterate_main

        _exit_on_sigterm()  # closes the vLLM engine and the sandboxes
        return iterate_main(argv[1:])
    args = _parser().parse_args(argv)

    try:
        if args.cmd == "launch":
            recipe = load_recipe(args.recipe)
            if not recipe.openrlhf:
                print(
                    f"error: {recipe.path} has no 'openrlhf' section; run it with: python -m trainers "
                    f"train-cleaner --recipe {args.recipe}",
                    file=sys.stderr,
                )
                return 2
            if args.check or not args.dry_run:
                if (status := _check(recipe, args.gpu_memory_gib, required=args.check)) or args.check:
                    return status
            if args.dry_run:
                print(recipe.shell())
                return 0
            return subprocess.call(recipe.command())
        if args.cmd == "train-cleaner":
            gpu = _gpu_ready() and not args.cpu
            recipe = load_recipe(args.recipe or (GPU_RECIPE if gpu else CPU_RECIPE))
            if gpu and recipe.openrlhf:
                print(recipe.shell(), flush=True)
                return subprocess.call(recipe.command())
            from trainers.cpu.trainer import train_cpu

            _exit_on_sigterm()  # the trainer's context closes its engine and sandboxes (no orphaned vLLM processes)
            run_dir = train_cpu(recipe, run_name=args.run, resume=args.resume)
            print(f"metrics: {run_dir / 'metrics.jsonl'}\nplot: {run_dir / 'metrics.png'}")
            return 0
        if args.cmd == "prepare-data":
            from harness.core.prompts import load_prompt_templates
            from trainers.core.data import export_openrlhf, load_open_agentrl

            templates = load_prompt_templates(args.prompt_template)
            items = load_open_agentrl(args.source, limit=args.limit, templates=templates)
            print(f"{export_openrlhf(items, args.out)}: {len(items)} prompts")
            print(f"prompts: {templates.source} (sha256 {templates.sha256})")
            return 0
        if args.cmd == "warmup":
            from trainers.warmup.build import train
            from trainers.warmup.config import config_from_args

            train(config_from_args(args))
            return 0
        if args.cmd == "ablation":
            from trainers.cpu.ablation import run_ablation
            from trainers.cpu.ablation_config import config_from_args as ablation_config

            print(run_ablation(ablation_config(args)))
            return 0
        if args.cmd == "parity":
            from trainers.parity import main as parity_main

            return parity_main(args)
        if args.cmd == "plot":
            from trainers.core.plot import plot_metrics

            print(plot_metrics(args.metrics, Path(args.metrics).with_suffix(".png")))
            return 0
    except (RecipeError, FileNotFoundError, FileExistsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (EngineDied, SandboxError) as exc:  # a step that cannot be scored: --resume continues the run
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 1


if __name__ == "__main__":
    sys.exit(main())
