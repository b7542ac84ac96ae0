"""What a CPU training run's directory holds for ``--resume``: the checkpoint to continue from, the settings the
run started with and each resume, and the steps that ended on sandbox faults.

A step whose rollout's sandbox kept failing past its reruns (:func:`trainers.core.faults.rerun_on_sandbox_failure`)
ends the invocation, and is appended to ``sandbox_faults.jsonl`` (step, reseed, error). When ``--resume`` reaches
that step again it samples it with new seeds (:func:`step_reseed`: the number of its recorded faults, recorded in
the step's metrics line as ``reseed``), so a rollout that broke its sandbox is not regenerated token for token; every
other step keeps its seeds. After ``cpu.step_fault_runs`` such runs of one step, ``--resume`` stops with
:class:`trainers.core.faults.StepKeepsFailing` before training: the sandbox fails whatever the model samples.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainers.core.faults import StepKeepsFailing

#: the steps that ended on sandbox faults, a JSON line each (:class:`StepFault`)
FAULTS = "sandbox_faults.jsonl"


@dataclass(frozen=True)
class StepFault:
    """One run of a step that ended on a sandbox fault."""

    step: int
    reseed: int  #: the step's seeds were those of this reseed (0: the run's own)
    error: str


def checkpoint_to_resume(run_dir: Path, resume: bool) -> Path | None:
    """The newest checkpoint of ``run_dir`` to continue from (``resume``), or None for a fresh run.

    Raises FileExistsError when a fresh run would overwrite checkpoints, FileNotFoundError when there is nothing
    to resume.
    """
    ckpt_dir = run_dir / "checkpoints"
    last = max(ckpt_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]), default=None)
    if not resume and last is not None:
        raise FileExistsError(f"{run_dir} already holds a run; pass --resume to continue it or choose another --run")
    if resume and last is None:
        raise FileNotFoundError(f"--resume: {ckpt_dir} holds no checkpoint to continue from")
    return last


def next_step(checkpoint: Path | None) -> int:
    """The step a run continues with from ``checkpoint`` (1 without one)."""
    return int(checkpoint.name.split("-")[1]) + 1 if checkpoint is not None else 1


def write_settings(run_dir: Path, info: dict[str, Any], resumed_from: Path | None) -> None:
    """``recipe.json``: what the run started with; a resumed run keeps it and appends ``info`` to ``resumed.jsonl``."""
    settings = run_dir / "recipe.json"
    if resumed_from is not None and settings.exists():
        with (run_dir / "resumed.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"from": str(resumed_from), **info}) + "\n")
    else:
        settings.write_text(json.dumps(info, indent=2))


def step_faults(run_dir: Path) -> dict[int, list[StepFault]]:
    """The recorded sandbox faults of ``run_dir``, by step."""
    path = run_dir / FAULTS
    found: dict[int, list[StepFault]] = {}
    if path.exists():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                fault = StepFault(**json.loads(line))
            except (json.JSONDecodeError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: not a step fault record ({exc})") from exc
            found.setdefault(fault.step, []).append(fault)
    return found


def record_step_fault(run_dir: Path, fault: StepFault) -> None:
    with (run_dir / FAULTS).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(asdict(fault)) + "\n")


def step_reseed(run_dir: Path, step: int, limit: int, backend: str) -> int:
    """The reseed of ``step``: how many of its runs ended on sandbox faults.

    Raises:
        StepKeepsFailing: ``limit`` runs of the step did, each with other seeds.
    """
    faults = step_faults(run_dir).get(step, [])
    if len(faults) >= limit:
        raise StepKeepsFailing(
            f"step {step} of {run_dir} ended on sandbox faults in {len(faults)} runs, each sampled with other "
            f"seeds; last: {faults[-1].error}. The sandbox fails whatever the model samples: an infrastructure "
            f"fault of the {backend!r} sandbox backend (its engine or host), not the model's. Fix the backend, "
            f"then move {run_dir / FAULTS} aside and --resume: the step runs again with the run's own seeds"
        )
    return len(faults)
