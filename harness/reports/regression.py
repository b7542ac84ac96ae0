"""Regression baselines: an eval's pinned metrics, and the check that fails when a metric leaves its tolerance.

A baseline is a YAML file under ``results/baselines/``::

    task: aime24                 # a bundled task name, or a path to a task file
    model: replay/aime24.yaml    # any Inspect model
    dataset: fixture             # passed as -T data=... (a path relative to this file is made absolute)
    saar: true                   # the SAAR arm
    limit: 2                     # optional: first N samples
    epochs: 1                    # optional
    task_args: {sandbox: local}  # optional: any other -T arguments
    model_args: {}               # optional: -M arguments
    generate: {temperature: 0}   # optional: GenerateConfig fields (temperature, max_tokens, seed, ...)
    metrics:                     # names from harness.reports.stats.summarize
      accuracy: {value: 0.5, tolerance: 0.0}
      tool_failure_rate_pooled: {value: 0.25, tolerance: 0.05}
      saar_shallow: 1            # a bare number: exact
      tokens_mean: {min: 10, max: 400}

:func:`check` compares one eval log with its baseline, :func:`verdicts` every baseline with its run
(:mod:`harness.evals.baselines` runs them). A log whose status is not
``success``, or that has errored samples, fails whatever its metrics say:
``inspect eval`` itself exits 0 when a task errors, so this is the CI gate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.reports.compare import ArmRun, task_name
from harness.reports.stats import summarize

#: Where the baselines live in the repository.
BASELINES_DIR = Path(__file__).resolve().parents[2] / "results" / "baselines"

#: Metrics recorded by ``--update`` for a baseline that lists none.
DEFAULT_METRICS = (
    "samples",
    "accuracy",
    "tool_calls",
    "tool_failures",
    "tool_failure_rate",
    "tool_failure_rate_pooled",
    "failures_kept",
    "saar_shallow",
    "saar_deep",
    "saar_purified",
    "saar_exhausted",
    "tokens_mean",
)

_KEYS = {
    "name",
    "task",
    "model",
    "dataset",
    "saar",
    "limit",
    "epochs",
    "task_args",
    "model_args",
    "generate",
    "metrics",
    "description",
}


#: Slack for floating-point noise (values are recorded to 6 decimals).
_EPS = 1e-6


class BaselineError(ValueError):
    """A baseline file is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Expectation:
    """One metric's expected value: ``value ± tolerance``, or a ``[min, max]`` range."""

    metric: str
    value: float | None = None
    tolerance: float = 0.0
    min: float | None = None
    max: float | None = None

    def holds(self, measured: float) -> bool:
        if math.isnan(measured):
            return False
        if self.value is not None and abs(measured - self.value) > self.tolerance + _EPS:
            return False
        if self.min is not None and measured < self.min - _EPS:
            return False
        return not (self.max is not None and measured > self.max + _EPS)

    def describe(self) -> str:
        parts = []
        if self.value is not None:
            parts.append(f"{self.value:g}" + (f" ± {self.tolerance:g}" if self.tolerance else ""))
        if self.min is not None or self.max is not None:
            lo = "-inf" if self.min is None else f"{self.min:g}"
            hi = "inf" if self.max is None else f"{self.max:g}"
            parts.append(f"in [{lo}, {hi}]")
        return " and ".join(parts)


@dataclass(frozen=True)
class Baseline:
    name: str
    path: Path
    task: str
    model: str
    saar: bool
    dataset: str | None = None
    limit: int | None = None
    epochs: int = 1
    task_args: dict[str, Any] = field(default_factory=dict)
    model_args: dict[str, Any] = field(default_factory=dict)
    generate: dict[str, Any] = field(default_factory=dict)
    metrics: tuple[Expectation, ...] = ()

    @property
    def arm(self) -> str:
        return "on" if self.saar else "off"

    @property
    def all_task_args(self) -> dict[str, Any]:
        args = {**self.task_args, "saar": self.saar, "epochs": self.epochs}
        if self.dataset is not None:
            args["data"] = self.dataset
        return args


def _expectation(metric: str, raw: Any, where: str) -> Expectation:
    if isinstance(raw, bool) or not isinstance(raw, int | float | dict):
        raise BaselineError(f"{where}: metric {metric!r} must be a number or a mapping with value/tolerance/min/max")
    if not isinstance(raw, dict):
        return Expectation(metric, value=float(raw))
    unknown = set(raw) - {"value", "tolerance", "min", "max"}
    if unknown:
        raise BaselineError(f"{where}: metric {metric!r} has unknown field(s) {sorted(unknown)}")
    nums = {}
    for key, v in raw.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise BaselineError(f"{where}: metric {metric!r}: {key} must be a number, got {v!r}")
        nums[key] = None if v is None else float(v)
    if nums.get("value") is None and nums.get("min") is None and nums.get("max") is None:
        raise BaselineError(f"{where}: metric {metric!r} needs a value or a min/max")
    if (nums.get("tolerance") or 0.0) < 0:
        raise BaselineError(f"{where}: metric {metric!r}: tolerance must be >= 0")
    return Expectation(metric, nums.get("value"), nums.get("tolerance") or 0.0, nums.get("min"), nums.get("max"))


def _dataset(value: Any, baseline: Path) -> str | None:
    """``-T data=``: a file or directory named relative to the baseline file becomes an absolute path.

    Inspect loads a task from the task file's directory, so a relative path would not resolve there.
    """
    if value is None:
        return None
    local = baseline.parent / str(value)
    return str(local.resolve()) if str(value) != "fixture" and local.exists() else str(value)


def load_baseline(path: str | Path) -> Baseline:
    """Parse and validate one baseline file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc}") from exc
    if not isinstance(data, dict):
        raise BaselineError(f"{path}: a baseline is a YAML mapping (task, model, saar, metrics, ...)")
    unknown = set(data) - _KEYS
    if unknown:
        raise BaselineError(f"{path}: unknown field(s) {sorted(unknown)}; allowed: {sorted(_KEYS)}")
    for key in ("task", "model"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise BaselineError(f"{path}: field {key!r} is required and must be a string")
    if not isinstance(data.get("saar"), bool):
        raise BaselineError(f"{path}: field 'saar' is required and must be true or false")
    for key in ("task_args", "model_args", "generate"):
        if not isinstance(data.get(key) or {}, dict):
            raise BaselineError(f"{path}: field {key!r} must be a mapping")
    for key in ("limit", "epochs"):
        v = data.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise BaselineError(f"{path}: field {key!r} must be a positive integer")
    metrics = data.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise BaselineError(f"{path}: field 'metrics' must be a mapping of metric name to expectation")
    return Baseline(
        name=str(data.get("name") or path.stem),
        path=path,
        task=data["task"],
        model=data["model"],
        saar=data["saar"],
        dataset=_dataset(data.get("dataset"), path),
        limit=data.get("limit"),
        epochs=data.get("epochs") or 1,
        task_args=dict(data.get("task_args") or {}),
        model_args=dict(data.get("model_args") or {}),
        generate=dict(data.get("generate") or {}),
        metrics=tuple(_expectation(str(k), v, str(path)) for k, v in metrics.items()),
    )


def baseline_files(paths: Sequence[str | Path] = ()) -> list[Path]:
    """The baseline files named, or every ``*.yaml`` under the given directories (default: results/baselines)."""
    files: list[Path] = []
    for p in map(Path, paths or [BASELINES_DIR]):
        if p.is_dir():
            files.extend(sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml")))
        elif p.is_file():
            files.append(p)
        else:
            raise BaselineError(f"baseline path {p} does not exist")
    if not files:
        raise BaselineError(f"no baseline files (*.yaml) under {', '.join(map(str, paths or [BASELINES_DIR]))}")
    return files


@dataclass
class Outcome:
    """The verdict on one baseline: failures are human-readable lines naming task, metric and values."""

    baseline: Baseline
    measured: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    log: str = ""

    @property
    def ok(self) -> bool:
        return not self.failures


def check(baseline: Baseline, arm: ArmRun | None) -> Outcome:
    """Compare one arm (from its eval log) with its baseline."""
    who = f"{baseline.name}: task {baseline.task}, SAAR {baseline.arm}, model {baseline.model}"
    out = Outcome(baseline)
    if arm is None:
        out.failures.append(f"{who}: no eval log for this baseline")
        return out
    out.log = arm.location
    if arm.status != "success":
        out.failures.append(
            f"{who}: eval log status is {arm.status!r}, not 'success'"
            + (f": {arm.error}" if arm.error else "")
            + f" ({arm.location})"
        )
    if arm.errored:
        out.failures.append(f"{who}: {len(arm.errored)} sample(s) errored: {', '.join(arm.errored)} ({arm.location})")
    if not arm.samples:
        out.failures.append(f"{who}: no scored samples in {arm.location}")
        return out
    out.measured = summarize(arm)
    for exp in baseline.metrics:
        if exp.metric in out.measured:
            measured = out.measured[exp.metric]
        elif exp.metric.startswith("errors."):
            measured = 0.0  # an error kind that never occurred
        else:
            known = ", ".join(sorted(k for k in out.measured if not k.startswith("errors.")))
            out.failures.append(f"{who}: unknown metric {exp.metric!r} (known: {known}, errors.<Kind>)")
            continue
        if not exp.holds(measured):
            out.failures.append(f"{who}: metric {exp.metric} expected {exp.describe()}, measured {measured:g}")
    return out


def find_arm(baseline: Baseline, arms: Sequence[ArmRun]) -> ArmRun | None:
    """The arm among existing logs that a baseline describes (same task, SAAR setting and model)."""
    name = task_name(baseline.task)
    return next((a for a in arms if a.task == name and a.arm == baseline.arm and a.model == baseline.model), None)


def update_baseline(baseline: Baseline, measured: dict[str, float]) -> None:
    """Rewrite a baseline's expected values with measured ones (keeping tolerances and ranges' widths)."""
    data = yaml.safe_load(baseline.path.read_text(encoding="utf-8"))
    old = {e.metric: e for e in baseline.metrics}
    kinds = [m for m in measured if m.startswith("errors.")]
    names = list(old) or [*(m for m in DEFAULT_METRICS if m in measured), *kinds]
    metrics: dict[str, Any] = {}
    for name in names:
        value = measured.get(name, 0.0)
        exp = old.get(name)
        if exp is not None and exp.value is None:  # a range stays a range
            metrics[name] = {k: v for k, v in (("min", exp.min), ("max", exp.max)) if v is not None}
        else:
            metrics[name] = {"value": round(value, 6), "tolerance": exp.tolerance if exp else 0.0}
    data["metrics"] = metrics
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)
    baseline.path.write_text(text, encoding="utf-8")


def verdicts(
    baselines: Sequence[Baseline], arms: Iterable[ArmRun | None], *, update: bool = False, echo: Any = print
) -> int:
    """Check each baseline against its arm (``arms``, in the baselines' order; None: no log found) and print each
    verdict; with ``update``, first rewrite the values of each baseline whose eval succeeded with what it measured.
    Return the exit status (0 = pass)."""
    outcomes = []
    for b, arm in zip(baselines, arms, strict=True):
        outcome = check(b, arm)
        if update and outcome.measured and arm is not None and arm.status == "success" and not arm.errored:
            update_baseline(b, outcome.measured)
            echo(f"updated {b.path}")
            outcome = check(load_baseline(b.path), arm)
        outcomes.append(outcome)
        echo(f"{'PASS' if outcome.ok else 'FAIL'}  {b.name}  ({b.task}, SAAR {b.arm}, {b.model})")
        for line in outcome.failures:
            echo(f"      {line}")
    failed = [o for o in outcomes if not o.ok]
    echo(f"regression: {len(outcomes) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0
