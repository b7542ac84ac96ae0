"""``python -m harness regression``: run the baselines (``results/baselines/*.yaml``) and exit non-zero when one is
not met (:mod:`harness.reports.regression`, run by :mod:`harness.evals.baselines`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.cli.options import run_name

HELP = "run the baselines and exit non-zero when one is not met"


def add_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("baselines", nargs="*", help="baseline files or directories (default: results/baselines)")
    r.add_argument("--from-logs", nargs="+", metavar="DIR", help="check existing eval logs instead of running")
    r.add_argument("--log-dir", default=None, help="where eval logs go (default: results/runs/regression/<time>)")
    r.add_argument("--update", action="store_true", help="rewrite the baselines' values with the measured ones")
    r.add_argument("--display", default="none", help="Inspect display (full, rich, plain, none)")
    r.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="baselines evaluated at once, each in its own process (default: 2; 1 on one core)",
    )


def run(args: argparse.Namespace) -> int:
    from harness.evals.baselines import regression

    log_dir = args.log_dir or str(Path("results/runs/regression") / run_name())
    return regression(
        args.baselines,
        log_dir=log_dir,
        from_logs=args.from_logs or (),
        update=args.update,
        display=args.display,
        jobs=args.jobs,
    )
