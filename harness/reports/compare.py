"""SAAR ablations read back: the eval logs of the SAAR-on and SAAR-off arms of benchmark tasks, as records.

An *arm* is one task evaluated with one SAAR setting (:func:`harness.evals.arms.run_arms` runs them).
:func:`read_arms` turns any directory of eval logs, ours or a GPU cluster's, into :class:`ArmRun` records that
:mod:`harness.reports.report` summarises and tests; :func:`task_file` is the file Inspect loads for a task.

Per-sample numbers come from the trajectory summary that the ``saar_agent`` solver
leaves in every score's metadata, so the comparison can count SAAR events by kind
and by error kind, not only accuracy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from inspect_ai.event import ModelEvent
from inspect_ai.log import EvalLog, EvalSample, read_eval_log

from harness.benchmarks import registry
from harness.benchmarks.registry import NAMES, PAPER
from harness.core.metrics import TrajectoryMetrics

#: The registered benchmarks (harness.benchmarks.registry), each with its task in ``tasks/``: the names
#: ``compare`` accepts (a live view: a benchmark registered later is in it).
TASKS = NAMES
#: The benchmarks ``compare`` runs by default: the paper's protocol (the registry's ``paper`` entries).
DEFAULT_TASKS = PAPER

#: Arm labels: SAAR switched on for the task (``-T saar=true``) or off.
ARMS = ("off", "on")


class CompareError(ValueError):
    """Bad input to a comparison (unknown task, unreadable log, mismatched arms)."""


@dataclass(frozen=True)
class SampleRecord:
    """One scored (sample, epoch) of one arm, flattened from its score and trajectory."""

    sample_id: str
    epoch: int
    correct: float  #: the score's ``accuracy`` (1/0)
    tool_calls: int  #: executed calls, purified attempts included
    tool_failures: int  #: failed attempts
    failures_kept: int  #: failed tool results left in the final trajectory
    tokens: float  #: generated tokens, discarded regenerations included
    saar_on: bool  #: whether SAAR was drawn on for this trajectory
    stop_reason: str | None = None
    error_kinds: dict[str, int] = field(default_factory=dict)  #: error kind -> failed attempts
    events: list[dict[str, Any]] = field(default_factory=list)  #: SAAR events (turn, retry, action, ...)
    time: float | None = None  #: seconds the sample took
    turns: int = 0  #: assistant turns kept
    tokens_kept: int = 0  #: generated tokens of the turns that remain
    #: generations read from Inspect's cache: the other arm's, for a request both sent (``share_prefix``)
    shared_generations: int = 0

    @property
    def metrics(self) -> TrajectoryMetrics:
        """This (sample, epoch)'s trajectory numbers, as :mod:`harness.core.metrics` defines them."""
        return TrajectoryMetrics.from_summary(
            {
                "saar_on": self.saar_on,
                "assistant_turns": self.turns,
                "tool_calls": self.tool_calls,
                "tool_failures": self.tool_failures,
                "failures_kept": self.failures_kept,
                "tokens_generated": self.tokens,
                "tokens_kept": self.tokens_kept,
                "error_kinds": self.error_kinds,
                "saar_events": self.events,
            }
        )


@dataclass
class ArmRun:
    """One eval log: a task under one SAAR setting, with its per-sample records."""

    task: str
    arm: str  #: "on" or "off"
    model: str
    status: str  #: the log's status; anything but "success" fails a regression run
    location: str
    epochs: int
    samples: list[SampleRecord]
    errored: list[str] = field(default_factory=list)  #: ids of samples that errored instead of scoring
    wall_time: float | None = None  #: seconds from the log's start to its completion
    task_args: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  #: the log's error message when its status is "error"
    card: dict[str, Any] | None = None  #: the protocol card of the log's task (harness.reports.card)

    @property
    def label(self) -> str:
        return f"{self.task} / SAAR {self.arm}"


def task_name(spec: str) -> str:
    """The benchmark name of a task spec: ``tasks/aime24.py@aime24`` -> ``aime24``."""
    name = spec.split("@")[-1]
    return Path(name).stem if name.endswith(".py") else name.rsplit("/", 1)[-1]


def task_file(task: str) -> str:
    """The file Inspect should load for ``task``: a bundled name, or a path the user gives."""
    if task in TASKS:
        path = registry.TASKS_DIR / f"{task}.py"
        if not path.is_file():
            raise CompareError(f"task {task!r}: {path} not found (run from a source checkout of the harness)")
        return f"{path}@{task}"  # Inspect loads an absolute file path only with an explicit @task
    path = Path(task.split("@")[0])
    if path.suffix == ".py" and path.is_file():
        return task
    raise CompareError(f"unknown task {task!r}: use one of {', '.join(TASKS)} or a path to a task file")


def _arm_of(log: EvalLog) -> str:
    """ "on" or "off": the resolved switch the task recorded (a preset decides it too), else the task argument."""
    args = {**log.eval.task_args, **log.eval.task_args_passed}
    metadata = log.eval.metadata or {}
    value = metadata["saar"] if "saar" in metadata else args.get("saar", False)
    if isinstance(value, str):
        value = value.strip().lower() in ("1", "true", "yes", "on")
    return "on" if value else "off"


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None


def _record(sample: EvalSample, where: str) -> SampleRecord:
    score = next(iter(sample.scores.values())) if sample.scores else None
    if score is None:
        raise CompareError(f"{where}: sample {sample.id} epoch {sample.epoch} has no score")
    value = score.value if isinstance(score.value, dict) else {"accuracy": score.value}
    if "accuracy" not in value:
        raise CompareError(f"{where}: sample {sample.id}: score has no 'accuracy' (is this a harness task's log?)")
    traj: dict[str, Any] = (score.metadata or {}).get("trajectory") or sample.metadata.get("trajectory") or {}
    calls = int(traj.get("tool_calls", value.get("tool_calls", 0)))
    failures = traj.get("tool_failures")
    if failures is None:  # older logs: recover the count from the per-sample rate
        failures = round(float(value.get("tool_failure_rate", 0.0)) * calls)
    return SampleRecord(
        sample_id=str(sample.id),
        epoch=int(sample.epoch),
        correct=float(value["accuracy"]),
        tool_calls=calls,
        tool_failures=int(failures),
        failures_kept=int(traj.get("failures_kept", value.get("failures_kept", 0))),
        tokens=float(traj.get("tokens_generated", value.get("tokens_generated", value.get("tokens", 0.0)))),
        saar_on=bool(traj.get("saar_on", False)),
        stop_reason=traj.get("stop_reason"),
        error_kinds={str(k): int(v) for k, v in (traj.get("error_kinds") or {}).items()},
        events=list(traj.get("saar_events") or []),
        time=sample.total_time,
        turns=int(traj.get("assistant_turns", 0)),
        tokens_kept=int(traj.get("tokens_kept", 0)),
        shared_generations=sum(1 for e in sample.events if isinstance(e, ModelEvent) and e.cache == "read"),
    )


def scored(sample: EvalSample) -> bool:
    """Whether a sample scored (one that errored, or has no score, is listed apart, never counted)."""
    return sample.error is None and bool(sample.scores)


def arm_from_log(log: EvalLog) -> ArmRun:
    """Flatten one eval log (read with its samples) into an :class:`ArmRun`."""
    where = log.location or log.eval.task
    records, errored = [], []
    for sample in log.samples or []:
        if not scored(sample):
            errored.append(f"{sample.id}#{sample.epoch}")
            continue
        records.append(_record(sample, where))
    epochs = log.eval.config.epochs or 1
    return ArmRun(
        task=task_name(log.eval.task),
        arm=_arm_of(log),
        model=log.eval.model,
        status=log.status,
        location=str(log.location or ""),
        epochs=int(epochs),
        samples=records,
        errored=errored,
        wall_time=_seconds(log.stats.started_at, log.stats.completed_at),
        task_args=dict(log.eval.task_args),
        error=log.error.message if log.error else None,
        card=(log.eval.metadata or {}).get("card"),
    )


def log_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every eval log (``.eval`` / ``.json``) in the given files and directories (recursively)."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            found.extend(
                f
                for f in sorted(p.rglob("*"))
                if f.suffix == ".eval" or (f.suffix == ".json" and re.match(r"\d{4}-\d{2}-\d{2}T", f.name))
            )
        else:
            raise CompareError(f"log path {p} does not exist")
    return found


def read_arms(paths: Sequence[str | Path]) -> tuple[list[ArmRun], list[str]]:
    """Read every log under ``paths``; one :class:`ArmRun` per (task, arm, model).

    Where a directory holds several logs of the same arm (an eval set that was
    retried, or repeated runs), the successful, most recent one is used and the
    others are listed in the returned notes, so nothing is dropped silently.
    """
    files = log_files(paths)
    if not files:
        raise CompareError(f"no eval logs (*.eval, *.json) found under {', '.join(map(str, paths))}")
    chosen: dict[tuple[str, str, str], tuple[EvalLog, ArmRun]] = {}
    notes: list[str] = []
    for f in files:
        try:
            log = read_eval_log(str(f))
        except Exception as exc:  # noqa: BLE001 - any unreadable file is reported with its path
            raise CompareError(f"cannot read eval log {f}: {exc}") from exc
        arm = arm_from_log(log)
        key = (arm.task, arm.arm, arm.model)
        if key in chosen:
            old_log, old = chosen[key]
            newer = (arm.status == "success", log.eval.created) > (old.status == "success", old_log.eval.created)
            keep, drop = (arm, old) if newer else (old, arm)
            notes.append(
                f"{drop.label} ({drop.model}): ignored {drop.location} (status {drop.status}), used {keep.location}"
            )
            if newer:
                chosen[key] = (log, arm)
        else:
            chosen[key] = (log, arm)
    arms = sorted((a for _, a in chosen.values()), key=lambda a: (a.task, a.model, a.arm))
    return arms, notes
