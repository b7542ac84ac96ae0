"""Configuration of the CLEANER agent executor (JSON in ``CLEANER_AGENT_CONFIG``).

It lives apart from :mod:`trainers.executor` because OpenRLHF loads the executor file
by path as an unregistered module, where dataclasses cannot be defined.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from harness.rollout import RolloutConfig
from harness.saar import SaarConfig

CONFIG_ENV = "CLEANER_AGENT_CONFIG"


@dataclass(frozen=True)
class ExecutorConfig:
    """What the executor needs beyond OpenRLHF's arguments (JSON in ``CLEANER_AGENT_CONFIG``)."""

    saar: dict[str, Any] = field(default_factory=lambda: {"enabled": True, "prob": 1.0})
    max_turns: int = 16
    timeout: float = 10.0
    output_chars: int = 256
    sandbox: str | None = None  #: backend name for :func:`sandboxes.backends.get_backend` (None: the default)
    lenient_reward: bool = False  #: judge math by equivalence instead of the reference's strict check
    seed: int | None = None  #: seed of the per-trajectory SAAR draw (None: fresh randomness)

    def saar_config(self) -> SaarConfig:
        return SaarConfig(**self.saar)

    def rollout_config(self) -> RolloutConfig:
        return RolloutConfig(
            max_turns=self.max_turns, timeout=self.timeout, output_chars=self.output_chars, saar=self.saar_config()
        )

    @classmethod
    def from_json(cls, text: str, where: str = CONFIG_ENV) -> ExecutorConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is not JSON ({exc.msg})") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{where} must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}; known keys are {sorted(known)}")
        cfg = cls(**data)
        cfg.saar_config()  # validate now, not in the middle of a rollout
        return cfg

    @classmethod
    def from_env(cls) -> ExecutorConfig:
        text = os.environ.get(CONFIG_ENV)
        return cls.from_json(text) if text else cls()

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)
