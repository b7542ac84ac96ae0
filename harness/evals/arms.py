"""The arms of a SAAR ablation, run: both SAAR settings of every task through Inspect's ``eval_set``.

:func:`run_arms` runs both arms of every task with the same samples, seeds and arguments except ``saar`` (so an
interrupted comparison resumes where it stopped); :mod:`harness.reports.compare` reads their logs back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.core.environ import temporary_environ
from harness.engines.launch_check import EngineCommandMissing, check_sglang_command, sglang_would_start
from harness.reports.compare import ARMS, CompareError, task_file, task_name


def build_task(spec: str, args: dict[str, Any], epochs: int | None = None) -> Any:
    """The Inspect task of ``spec`` (``file.py@name``) built with ``args``, as Inspect's loader builds it."""
    import importlib.util

    file, _, name = spec.partition("@")
    module_spec = importlib.util.spec_from_file_location(f"cleaner_task_{Path(file).stem}", file)
    if module_spec is None or module_spec.loader is None:
        raise CompareError(f"cannot load the task file {file}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    build = getattr(module, name or Path(file).stem, None)
    if build is None:
        raise CompareError(f"{file} has no task {name!r}")
    return build(**args, **({"epochs": epochs} if epochs is not None else {}))


def run_arms(
    tasks: Sequence[str],
    model: str,
    *,
    log_dir: str | Path,
    epochs: int | None = None,
    limit: int | None = None,
    task_args: dict[str, Any] | None = None,
    model_args: dict[str, Any] | None = None,
    generate: dict[str, Any] | None = None,
    arms: Sequence[str] = ARMS,
    display: str | None = None,
    max_samples: int | None = None,
    retry_attempts: int = 2,
    time_limit: int | None = None,
    parallel: bool = False,
    share_prefix: bool = True,
) -> list[Path]:
    """Run both SAAR arms of every task with Inspect's ``eval_set``; return the log directories.

    Each (task, arm) gets its own eval-set directory ``<log_dir>/<task>/saar-<arm>``,
    so rerunning the same command resumes an interrupted comparison and skips
    finished arms. ``{task}`` in ``model`` is replaced by the task name (the replay
    model has one script per task: ``replay/{task}.yaml``). ``time_limit`` bounds each
    sample's seconds (a sample that reaches it ends and is scored). Both arms get the same
    ``seed``, dataset, limit and generation config; only ``saar`` differs. ``epochs`` None
    leaves the number of samples per problem to the task (its preset, or 1). No generation
    seed is sent: the solver seeds every generation per (sample, epoch) from the task's ``seed``. An ``sglang/``
    model for which Inspect would start a server is checked before any eval (Inspect starts it when it creates
    the model): a :class:`CompareError` says what is missing
    (:func:`harness.engines.launch_check.check_sglang_command`).
    ``parallel`` runs a task's arms at once, in one eval set (``<log_dir>/<task>``): a served engine then
    batches both arms' requests, and one arm's slowest samples overlap the other's. ``share_prefix`` (with
    both arms) generates the requests the arms have in common once (:mod:`harness.evals.shared_prefix`),
    cached under ``<log_dir>/generation-cache``; never for the replay model, whose script counts its calls.
    """
    if epochs is not None and epochs < 1:
        raise CompareError(f"epochs must be >= 1, got {epochs}")
    if sglang_would_start(model, model_args=model_args):
        try:  # Inspect starts SGLang when it creates the model, before any task runs: say first if it cannot
            check_sglang_command()
        except EngineCommandMissing as exc:
            raise CompareError(str(exc)) from None
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise CompareError(f"unknown arm(s) {unknown}: use 'on' and/or 'off'")
    task_args = dict(task_args or {})
    if share_prefix and len(arms) == 2 and not model.startswith("replay/"):
        task_args["share_prefix"] = str(log_dir)
    options: dict[str, Any] = dict(
        model_args=model_args or {},
        limit=limit,
        display=display,
        max_samples=max_samples,
        retry_attempts=retry_attempts,
        retry_wait=1,
        time_limit=time_limit,
        **(generate or {}),
    )
    dirs: list[Path] = []
    with _generation_cache(Path(log_dir) / "generation-cache" if "share_prefix" in task_args else None):
        for task in tasks:
            dirs += _run_task_arms(task, model, Path(log_dir), task_args, epochs, arms, options, parallel)
    return dirs


def _generation_cache(path: Path | None) -> contextlib.AbstractContextManager[None]:
    """Inspect's generation cache in ``path`` for the duration (None: left as it is)."""
    return temporary_environ(INSPECT_CACHE_DIR=None if path is None else str(path))


def _run_task_arms(
    task: str,
    model: str,
    log_dir: Path,
    task_args: dict[str, Any],
    epochs: int | None,
    arms: Sequence[str],
    options: dict[str, Any],
    parallel: bool,
) -> list[Path]:
    """Run the arms of one task (see :func:`run_arms`); return their log directories."""
    from inspect_ai import eval_set

    spec = task_file(task)
    name = task_name(spec)
    model = model.replace("{task}", name)
    if parallel:
        arm_dir = log_dir / name
        both = [build_task(spec, {**task_args, "saar": arm == "on"}, epochs) for arm in arms]
        ok, logs = eval_set(tasks=both, log_dir=str(arm_dir), model=model, max_tasks=len(both), **options)
        if not ok:
            statuses = ", ".join(f"{lg.eval.task}: {lg.status}" for lg in logs) or "no logs"
            raise CompareError(
                f"{name}: the eval set did not finish ({statuses}); rerun the same command to resume it "
                f"(logs in {arm_dir})"
            )
        return [arm_dir]
    dirs = []
    for arm in arms:
        arm_dir = log_dir / name / f"saar-{arm}"
        args = {**task_args, "saar": arm == "on"}
        if epochs is not None:
            args["epochs"] = epochs
        ok, logs = eval_set(tasks=spec, log_dir=str(arm_dir), model=model, task_args=args, **options)
        if not ok:
            statuses = ", ".join(f"{lg.eval.task}: {lg.status}" for lg in logs) or "no logs"
            raise CompareError(
                f"{name} / SAAR {arm}: the eval set did not finish ({statuses}); "
                f"rerun the same command to resume it (logs in {arm_dir})"
            )
        dirs.append(arm_dir)
    return dirs
