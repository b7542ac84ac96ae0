"""``python -m harness compare``: run (or read) the SAAR-on and SAAR-off arms and write the ablation report.

python -m harness compare --tasks aime24 gpqa --model sglang/Qwen/Qwen3-4B-Instruct-2507 -M tool_call_parser=qwen25 \\
    --epochs 16
python -m harness compare --from-logs /cluster/logs/run7 --run run7
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.benchmarks.presets import PRESETS
from harness.cli.options import add_share_prefix, run_name
from harness.reports.compare import DEFAULT_TASKS, TASKS, CompareError

HELP = "run or read the SAAR-on and SAAR-off arms and write the ablation report"


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "--tasks",
        nargs="+",
        default=list(DEFAULT_TASKS),
        help=f"task names ({', '.join(TASKS)}) or task files (default: the paper's, {' '.join(DEFAULT_TASKS)})",
    )
    c.add_argument("--model", help="Inspect model; {task} is replaced by the task name (replay/{task}.yaml)")
    c.add_argument("--from-logs", nargs="+", metavar="DIR", help="report on existing eval logs instead of running")
    c.add_argument("--arms", nargs="+", default=["off", "on"], choices=["off", "on"])
    c.add_argument("--run", default=None, help="run name (default: a timestamp)")
    c.add_argument("--runs-dir", default="results/runs", help="where eval logs go (<runs-dir>/<run>/<task>/saar-<arm>)")
    c.add_argument("--out-dir", default="results/ablation", help="where the report goes (<out-dir>/<run>/report.md)")
    c.add_argument("--bootstrap", type=int, default=10_000, help="bootstrap resamples of the paired test")
    _add_run_options(c)


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--preset",
        default=None,
        choices=sorted(PRESETS),
        help="a named evaluation protocol for every task (cleaner-paper: the authors' 4B evaluation; "
        "cleaner-paper-7b: their 7B one); both arms run it, with SAAR on and off",
    )
    p.add_argument(
        "--epochs", type=int, default=None, help="samples per problem (pass@1 = mean over epochs; default: preset or 1)"
    )
    p.add_argument("--limit", type=int, default=None, help="first N samples of each task")
    p.add_argument("--data", default=None, help='-T data= for every task: a local path or "fixture"')
    p.add_argument("--sandbox", default="auto", choices=["auto", "local", "docker"])
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="run seed: each (sample, epoch) samples from its own seed derived from it, the same in both arms",
    )
    p.add_argument("--temperature", type=float, default=None, help="override the task's sampling (reference: 1.0)")
    p.add_argument("--top-p", type=float, default=None, help="override the task's top_p (reference: 0.6)")
    p.add_argument("--max-tokens", type=int, default=None, help="tokens per generation")
    p.add_argument("-T", dest="task_args", action="append", metavar="KEY=VALUE", help="extra task argument")
    p.add_argument("-M", dest="model_args", action="append", metavar="KEY=VALUE", help="model argument")
    p.add_argument("--max-samples", type=int, default=None, help="samples run concurrently")
    p.add_argument("--display", default=None, help="Inspect display (full, rich, plain, none)")
    add_share_prefix(p)


def _kv(items: Sequence[str] | None, flag: str) -> dict[str, Any]:
    """``key=value`` pairs (values parsed as YAML, as Inspect's -T does)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CompareError(f"{flag} {item!r}: expected key=value")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _generate_args(args: argparse.Namespace) -> dict[str, Any]:
    # no "seed": one seed for every request would make every epoch the same sample (the solver seeds each call)
    gen = {"temperature": args.temperature, "top_p": args.top_p, "max_tokens": args.max_tokens}
    return {k: v for k, v in gen.items() if v is not None}


def run(args: argparse.Namespace) -> int:
    from harness.evals.arms import run_arms
    from harness.reports.compare import read_arms
    from harness.reports.report import side_by_side, write_report

    name = args.run or run_name()
    started = time.monotonic()
    if args.from_logs:
        sources: list[str | Path] = list(args.from_logs)
    else:
        if not args.model:
            raise CompareError("compare needs --model (or --from-logs DIR to report on existing logs)")
        task_args = {"sandbox": args.sandbox, "seed": args.seed, **_kv(args.task_args, "-T")}
        if args.preset is not None:
            task_args["preset"] = args.preset
        if args.data is not None:
            task_args["data"] = args.data
        sources = list(
            run_arms(
                args.tasks,
                args.model,
                log_dir=Path(args.runs_dir) / name,
                epochs=args.epochs,
                limit=args.limit,
                task_args=task_args,
                model_args=_kv(args.model_args, "-M"),
                generate=_generate_args(args),
                arms=args.arms,
                display=args.display,
                max_samples=args.max_samples,
                share_prefix=args.share_prefix,
            )
        )
    arms, notes = read_arms(sources)
    report = write_report(
        arms,
        Path(args.out_dir) / name,
        title=f"SAAR ablation: {name}",
        notes=notes,
        n_boot=args.bootstrap,
        seed=args.seed,
    )
    print(side_by_side(arms))
    print(f"\nreport: {report}  ({time.monotonic() - started:.0f} s)")
    return 0 if all(a.status == "success" for a in arms) else 1
