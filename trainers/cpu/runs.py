"""Where a CPU training run writes: a new directory per run, ``--resume`` continuing the last one.

``python -m trainers train-cleaner`` run twice makes two runs, ``results/train/<recipe>-<timestamp>/``
(the timestamp as the demo names its runs, ``YYYYmmdd-HHMMSS``; ``-2``, ``-3`` ... when two start in
the same second), so nothing of an earlier run is overwritten. ``--resume`` continues the newest run
of the recipe (or the one ``--run NAME`` names). A name given with ``--run`` that already holds
anything is refused without ``--resume``. Runs named after the bare recipe (``results/train/cpu-smoke``,
the name before timestamps) are still found by ``--resume`` when the recipe has no timestamped run.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

STAMP = "%Y%m%d-%H%M%S"


def _pattern(recipe: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(recipe)}-(\d{{8}}-\d{{6}})(?:-(\d+))?$")


def runs_of(recipe: str, out_root: Path) -> list[Path]:
    """The recipe's timestamped run directories under ``out_root``, oldest first."""
    pattern = _pattern(recipe)
    found = []
    for path in out_root.glob(f"{recipe}-*") if out_root.is_dir() else ():
        m = pattern.match(path.name)
        if m and path.is_dir():
            found.append(((m.group(1), int(m.group(2) or 1)), path))
    return [path for _, path in sorted(found)]


def new_run_name(recipe: str, out_root: Path, now: datetime | None = None) -> str:
    """A run name no directory under ``out_root`` has yet: ``<recipe>-<timestamp>[-n]``."""
    base = f"{recipe}-{(now or datetime.now()).strftime(STAMP)}"
    name, n = base, 1
    while (out_root / name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def last_run(recipe: str, out_root: Path) -> Path | None:
    """The newest run of the recipe (a timestamped one, else the bare-named one), or None."""
    runs = runs_of(recipe, out_root)
    if runs:
        return runs[-1]
    legacy = out_root / recipe
    return legacy if legacy.is_dir() else None


def _holds_anything(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def resolve_run_dir(
    recipe: str, out_root: Path, run_name: str | None, resume: bool, now: datetime | None = None
) -> Path:
    """The directory this invocation writes to (see the module docstring); errors say what to pass instead."""
    if run_name is not None:
        if "/" in run_name or run_name in ("", ".", ".."):
            raise ValueError(f"--run must be a plain name (a directory under {out_root}), got {run_name!r}")
        run_dir = out_root / run_name
        if not resume and _holds_anything(run_dir):
            raise FileExistsError(
                f"{run_dir} already holds a run; pass --resume to continue it, choose another --run, "
                "or leave --run out for a new timestamped run"
            )
        return run_dir
    if resume:
        run_dir = last_run(recipe, out_root)
        if run_dir is None:
            raise FileNotFoundError(f"--resume: {out_root} holds no run of recipe {recipe!r} to continue")
        return run_dir
    return out_root / new_run_name(recipe, out_root, now)
