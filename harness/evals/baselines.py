"""The regression's runs: each baseline (:mod:`harness.reports.regression`) evaluated with ``inspect_ai.eval``, one
at a time or each in a process of its own, and the command's whole run (:func:`regression`)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness.reports.compare import ArmRun, CompareError, arm_from_log, read_arms, task_file
from harness.reports.regression import Baseline, BaselineError, baseline_files, find_arm, load_baseline, verdicts


def _errored(baseline: Baseline, exc: BaseException) -> ArmRun:
    error = f"{type(exc).__name__}: {exc}"
    return ArmRun(baseline.task, baseline.arm, baseline.model, "error", "", baseline.epochs, [], error=error)


def run_baseline(baseline: Baseline, log_dir: str | Path, display: str | None = "none") -> ArmRun:
    """Evaluate one baseline with ``inspect_ai.eval``; an eval that raises becomes an errored arm."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.log import read_eval_log

    try:
        spec = task_file(baseline.task)
        logs = inspect_eval(
            tasks=spec,
            model=baseline.model,
            model_args=baseline.model_args,
            task_args=baseline.all_task_args,
            limit=baseline.limit,
            log_dir=str(Path(log_dir) / baseline.name),
            display=display,  # type: ignore[arg-type]
            **baseline.generate,
        )
    except Exception as exc:  # noqa: BLE001 - any failure to run is a failed baseline, reported by name
        return _errored(baseline, exc)
    log = logs[0]
    if log.location:
        log = read_eval_log(log.location)
    return arm_from_log(log)


def _in_a_process_of_its_own(baseline: Baseline, log_dir: str | Path, display: str | None) -> ArmRun:
    """:func:`run_baseline` in a new process: one that dies (killed, out of memory) fails this baseline only."""
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as process:
            return process.submit(run_baseline, baseline, log_dir, display).result()
    except Exception as exc:  # noqa: BLE001 - BrokenProcessPool and the like: a failed baseline, reported by name
        return _errored(baseline, exc)


def run_baselines(
    baselines: Sequence[Baseline], log_dir: str | Path, display: str | None = "none", jobs: int = 1
) -> Iterator[ArmRun]:
    """Each baseline's arm, in the baselines' order; ``jobs`` > 1 evaluates that many at once, each in a process
    of its own (an eval keeps about one core busy: the embedded engine's torch thread, or its sandboxes)."""
    if jobs <= 1:
        yield from (run_baseline(b, log_dir, display) for b in baselines)
        return
    with ThreadPoolExecutor(jobs) as threads:
        futures = [threads.submit(_in_a_process_of_its_own, b, log_dir, display) for b in baselines]
        yield from (f.result() for f in futures)


def regression(
    baselines: Sequence[str | Path] = (),
    *,
    log_dir: str | Path,
    from_logs: Sequence[str | Path] = (),
    update: bool = False,
    display: str | None = "none",
    jobs: int = 1,
    echo: Any = print,
) -> int:
    """Run (or, with ``from_logs``, look up) every baseline and check it; return the exit status (0 = pass).

    ``jobs``: how many baselines are evaluated at once (their verdicts are printed in the baselines' order).
    """
    try:
        loaded = [load_baseline(p) for p in baseline_files(baselines)]
        arms = read_arms(from_logs)[0] if from_logs else []
    except (BaselineError, CompareError) as exc:
        echo(f"regression: {exc}")
        return 2
    found = (find_arm(b, arms) for b in loaded) if from_logs else run_baselines(loaded, log_dir, display, jobs)
    return verdicts(loaded, found, update=update, echo=echo)
