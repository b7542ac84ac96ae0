"""Settings of the cold-start SFT (``python -m trainers warmup``): :class:`WarmupConfig`, one command-line option
per field, and the seeds of the generated problems it trains on (and that held-out measures avoid)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.benchmarks.generators import Generator
from harness.engines.models import ADAPTERS_DIR, TOOLS_SFT_NAME

#: Seeds of the training problems; held-out measurement uses seeds from HELD_OUT_SEED on.
TRAIN_SEED = 0
HELD_OUT_SEED = 1000

#: Generator weights of the training mix: the stdin programs are the kind the model is least fluent in.
TRAIN_WEIGHTS: dict[Generator, float] = {"bignum": 1.0, "modular": 1.0, "counting": 1.0, "aime": 1.0, "stdin": 0.6}


@dataclass(frozen=True)
class WarmupConfig:
    """Settings of ``python -m trainers warmup`` (the defaults build the committed artifact)."""

    seed: int = 0
    problems: int = 480  #: demonstrations generated (one per problem)
    fail_share: float = 0.15  #: share of demonstrations that fail first, then fix the call
    steps: int = 60
    batch_size: int = 8
    micro_batch: int = 8  #: rows per forward pass; a batch's gradient is the token-weighted sum of its micro-batches
    learning_rate: float = 1e-3
    warmup_steps: int = 5
    lora_r: int = 16
    lora_alpha: int = 32
    threads: int = 1  #: torch threads (on cores shared with other jobs, more threads spin against them)
    out: str = str(ADAPTERS_DIR / TOOLS_SFT_NAME)

    def __post_init__(self) -> None:
        for name in ("problems", "steps", "batch_size", "micro_batch", "lora_r", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"warmup: --{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.fail_share <= 1.0:
            raise ValueError(f"warmup: --fail-share must be in [0, 1], got {self.fail_share}")


def non_default_args(cfg: WarmupConfig) -> str:
    """The options of ``python -m trainers warmup`` that rebuild ``cfg``: those whose value is not the default."""
    default = WarmupConfig()
    parts = []
    for name, value in asdict(cfg).items():
        if value != getattr(default, name):
            parts.append(f"--{name.replace('_', '-')} {value}")
    return (" " + " ".join(parts)) if parts else ""


def add_arguments(parser: Any) -> None:
    """The ``warmup`` sub-command's options (one per :class:`WarmupConfig` field)."""
    default = WarmupConfig()
    helps = {
        "seed": "seed of the problems, the demonstrations, LoRA's init and the data order",
        "problems": "demonstrations to generate (one per problem)",
        "fail_share": "share of demonstrations whose first call fails and is then fixed",
        "steps": "optimizer steps",
        "batch_size": "demonstrations per step",
        "micro_batch": "rows per forward pass (the gradient stays the whole batch's; fewer rows, less memory)",
        "learning_rate": "peak learning rate (linear warm-up, then linear decay to a tenth)",
        "warmup_steps": "steps of learning-rate warm-up",
        "lora_r": "LoRA rank (every linear layer)",
        "lora_alpha": "LoRA alpha",
        "threads": "torch threads",
        "out": "artifact directory (default: the one embedded/smollm2-tools-sft loads)",
    }
    for name, value in asdict(default).items():
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=type(value), default=value, help=f"{helps[name]} (default {value})"
        )


def config_from_args(args: Any) -> WarmupConfig:
    return WarmupConfig(**{name: getattr(args, name) for name in asdict(WarmupConfig())})
