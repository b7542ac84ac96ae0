"""What a CPU training ablation is (``python -m trainers ablation``): its options (:class:`AblationConfig`, one
command-line option per field) and where its runs live (``<out>/<run>/runs/saar-{off,on}-seed<k>/``).

The runs are trained by :mod:`trainers.cpu.ablation`, and reported on by :mod:`trainers.cpu.ablation_report`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, fields
from pathlib import Path

from harness.core.settings import setting

ARMS = ("off", "on")
HELD_OUT_SEED = 3000  #: seed of the held-out problems (the RL set uses 2000, the warm SFT 0 and 1000)


@dataclass(frozen=True)
class AblationConfig:
    """Options of ``python -m trainers ablation`` (each field is a command-line option)."""

    recipe: str = setting("cpu-ablation", "recipe both arms train with (name or file)")
    seeds: tuple[int, ...] = setting((0, 1), "seeds; each trains one run per arm")
    steps: int = setting(8, "GRPO steps per run", minimum=1)
    run: str = setting("saar-ablation", "name of the output directory under --out")
    out: str = setting("results/train", "where the run directory is written")
    eval_problems: int = setting(16, "held-out problems evaluated with SAAR off before and after (0: none)", minimum=0)
    jobs: int = setting(1, "runs trained at once, in child processes (1 thread each)", minimum=1)
    engine: str = setting("", "what generates both arms' rollouts: hf or vllm (the recipe's)")
    only: str = setting("", "train just this run, ARM:SEED (what --jobs children do)")
    report_only: bool = setting(False, "only redraw the report from finished runs")

    def __post_init__(self) -> None:
        if not self.seeds or any(not isinstance(s, int) or s < 0 for s in self.seeds):
            raise ValueError(f"ablation.seeds must be non-negative integers, got {self.seeds!r}")
        object.__setattr__(self, "seeds", tuple(self.seeds))
        if self.only and (self.only.partition(":")[0] not in ARMS or not self.only.partition(":")[2].isdigit()):
            raise ValueError(f"ablation.only must be ARM:SEED with ARM in {ARMS}, got {self.only!r}")
        for f in fields(self):
            if f.metadata.get("min") is not None and getattr(self, f.name) < f.metadata["min"]:
                raise ValueError(f"ablation.{f.name} must be >= {f.metadata['min']}, got {getattr(self, f.name)!r}")

    @property
    def run_dir(self) -> Path:
        return Path(self.out) / self.run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One option per :class:`AblationConfig` field, with its help text and default."""
    for f in fields(AblationConfig):
        flag = f"--{f.name.replace('_', '-')}"
        text = f"{f.metadata['help']} (default: {f.default})"
        if f.name == "report_only":
            parser.add_argument(flag, action="store_true", help=f.metadata["help"])
        elif f.name == "seeds":
            parser.add_argument(flag, type=int, nargs="+", default=list(f.default), help=text)
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default, help=text)


def config_from_args(args: argparse.Namespace) -> AblationConfig:
    return AblationConfig(**{f.name: getattr(args, f.name) for f in fields(AblationConfig)})


def run_name(arm: str, seed: int) -> str:
    return f"saar-{arm}-seed{seed}"


def recorded_elapsed(cfg: AblationConfig) -> float | None:
    """The wall time the run directory's last report recorded (None: no report yet, or none recorded)."""
    previous = cfg.run_dir / "summary.json"
    return json.loads(previous.read_text()).get("elapsed_s") if previous.is_file() else None
