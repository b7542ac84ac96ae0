"""Configuration of the CLEANER agent executor (JSON in ``CLEANER_AGENT_CONFIG``).

SAAR travels as one typed :class:`harness.core.saar.SaarConfig`, read from a recipe's or the JSON's ``saar``
mapping by :func:`parse_saar` and nowhere else. That mapping must state ``enabled``: a trainer's run is either
CLEANER (rollback on) or its plain-GRPO baseline, and no default picks one silently (the evaluation's switch,
``-T saar``, defaults to off; the executor's used to default to on). Every other key defaults to
:class:`~harness.core.saar.SaarConfig`'s (the paper's), ``similarity`` to the tool environment's.

It lives apart from :mod:`trainers.openrlhf_plugin.executor` because OpenRLHF loads the executor file
by path as an unregistered module, where dataclasses cannot be defined.
"""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, Literal, get_origin, get_type_hints

from harness.core.rollout import RolloutConfig
from harness.core.saar import SaarConfig, Similarity
from harness.core.settings import setting
from harness.core.toolenv import ToolEnv, get_tool_env
from trainers.core.faults import FAILED_ROLLOUT_LIMIT, FAILED_ROLLOUT_WINDOW, SANDBOX_RETRIES

CONFIG_ENV = "CLEANER_AGENT_CONFIG"
#: what may generate the CPU trainer's rollouts (CpuConfig.engine)
ENGINES = ("hf", "vllm", "auto")
#: the weights' dtype in vLLM's engine (CpuConfig.engine_dtype)
ENGINE_DTYPES = ("float32", "bfloat16")
#: importance-sampling correction of the CPU trainer (CpuConfig.is_correction): off, or TRL's
#: ``vllm_importance_sampling_mode``
IS_CORRECTIONS = ("off", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
#: the type of each ``saar`` key: :class:`SaarConfig`'s fields (a ``Literal`` is a ``str``); ints are taken where a
#: float is asked
_SAAR_TYPES: dict[str, type] = {
    name: str if get_origin(hint) is Literal else hint for name, hint in get_type_hints(SaarConfig).items()
}


def parse_saar(data: Any, where: str, similarity: Similarity) -> SaarConfig:
    """The ``saar`` mapping at ``where`` as a :class:`SaarConfig`; ``similarity`` when it names none.

    ``enabled`` must be stated. Raises ValueError naming ``where`` and the key: an unknown key, a value of the
    wrong type or out of range.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where}: 'saar' must be a mapping of {sorted(_SAAR_TYPES)}, got {data!r}")
    if unknown := set(data) - set(_SAAR_TYPES):
        raise ValueError(f"{where}: unknown keys in 'saar': {sorted(unknown)}; known: {sorted(_SAAR_TYPES)}")
    values = dict(data)
    for key, value in data.items():
        want = _SAAR_TYPES[key]
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            values[key] = value = float(value)
        if not isinstance(value, want) or (want is not bool and isinstance(value, bool)):
            raise ValueError(f"{where}: saar.{key} must be {want.__name__}, got {value!r}")
    if "enabled" not in values:
        raise ValueError(
            f"{where}: saar.enabled is not stated; say true (CLEANER: failed calls rolled back) or false "
            "(plain GRPO, the baseline): a recipe never gets SAAR on or off by default"
        )
    try:
        return SaarConfig(**{"similarity": similarity, **values})
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


@dataclass(frozen=True)
class ExecutorConfig:
    """What the executor needs beyond OpenRLHF's arguments (JSON in ``CLEANER_AGENT_CONFIG``)."""

    saar: SaarConfig = setting(
        MISSING, "SAAR of every rollout (the per-trajectory draw uses `seed`); stated, never defaulted (see the module)"
    )
    max_turns: int = setting(16, "assistant turns per trajectory")
    tool_env: str = setting(
        "project", "the tool environment (harness.core.toolenv): project, or reference (Open-CLEANER's)"
    )
    timeout: float | None = setting(None, "seconds per tool call", shown="the tool environment's")
    output_chars: int | None = setting(
        None, "characters of a tool result the model sees", shown="the tool environment's"
    )
    sandbox: str | None = setting(
        None, "the sandbox backend, by name (sandboxes.backends.get_backend)", shown="the default backend"
    )
    lenient_reward: bool = setting(False, "judge math by equivalence instead of the reference's strict check")
    reward_on_response: bool = setting(
        False, "the reward reads the whole response, tool output included (the reference's), not the final answer"
    )
    seed: int | None = setting(None, "seed of the per-trajectory SAAR draw", shown="fresh randomness")
    sandbox_pool: int = setting(
        16, "tool programs running at once per executor, i.e. per vLLM engine (a sandbox is leased per call)"
    )
    sandbox_retries: int = setting(
        SANDBOX_RETRIES,
        "reruns of a rollout whose sandbox failed, from its start (trainers.core.faults); then execute() raises",
    )
    failed_rollout_limit: float = setting(
        FAILED_ROLLOUT_LIMIT,
        "a failed rollout is trained on as nothing; the job stops when more than this fraction of an executor's "
        "last `failed_rollout_window` rollouts failed (trainers.core.faults.FailureLedger)",
    )
    failed_rollout_window: int = setting(FAILED_ROLLOUT_WINDOW, "the rollouts `failed_rollout_limit` counts over")
    max_new_tokens: int | None = setting(
        None,
        "generated tokens a trajectory may have before the overlong penalty (the launcher copies "
        "rollout.max_new_tokens)",
        shown="no overlong penalty",
    )
    overlong_buffer_len: int | None = setting(
        None,
        "DAPO overlong buffer counted over generated tokens only (OpenRLHF 0.11.2's own counts tool output too)",
        shown="no overlong penalty",
    )
    overlong_penalty_factor: float = setting(
        1.0, "the penalty at the end of the overlong buffer (it grows linearly to it)"
    )

    def __post_init__(self) -> None:
        if not isinstance(self.saar, SaarConfig):
            raise TypeError(f"ExecutorConfig.saar must be a SaarConfig (parse_saar reads a mapping), got {self.saar!r}")
        if self.sandbox_pool < 1:
            raise ValueError(f"sandbox_pool must be >= 1, got {self.sandbox_pool!r}")
        if self.sandbox_retries < 0:
            raise ValueError(f"sandbox_retries must be >= 0, got {self.sandbox_retries!r}")
        if not 0.0 <= self.failed_rollout_limit < 1.0:
            raise ValueError(f"failed_rollout_limit must be in [0, 1), got {self.failed_rollout_limit!r}")
        if self.failed_rollout_window < 1:
            raise ValueError(f"failed_rollout_window must be >= 1, got {self.failed_rollout_window!r}")
        if self.overlong_buffer_len is not None:
            if self.max_new_tokens is None:
                raise ValueError("overlong_buffer_len needs max_new_tokens (the generated-token budget)")
            if not 0 < self.overlong_buffer_len <= self.max_new_tokens:
                raise ValueError(
                    f"overlong_buffer_len must be in (0, max_new_tokens={self.max_new_tokens}], "
                    f"got {self.overlong_buffer_len!r}"
                )

    @property
    def env(self) -> ToolEnv:
        return get_tool_env(self.tool_env, f"{CONFIG_ENV}: tool_env")

    def rollout_config(self) -> RolloutConfig:
        """The rollout of this configuration; a ``response`` budget counts against ``max_new_tokens``."""
        env = self.env
        return RolloutConfig(
            max_turns=self.max_turns,
            timeout=env.timeout if self.timeout is None else self.timeout,
            output_chars=env.output_chars if self.output_chars is None else self.output_chars,
            saar=self.saar,
            tool_env=env,
            max_total_tokens=self.max_new_tokens if env.counts_response else None,
        )

    @classmethod
    def from_json(cls, text: str, where: str = CONFIG_ENV) -> ExecutorConfig:
        """The configuration in ``text`` (a JSON object of this class's fields, ``saar`` a mapping: :func:`parse_saar`);
        errors name ``where`` and the key."""
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
        if "saar" not in data:
            raise ValueError(f"{where}: no 'saar' settings; state at least saar.enabled (true or false)")
        env = get_tool_env(data.get("tool_env", cls.__dataclass_fields__["tool_env"].default), f"{where}: tool_env")
        data["saar"] = parse_saar(data["saar"], where, env.similarity)
        return cls(**data)

    @classmethod
    def from_env(cls) -> ExecutorConfig:
        """The configuration in ``CLEANER_AGENT_CONFIG``; its absence is an error (it holds the SAAR switch)."""
        text = os.environ.get(CONFIG_ENV)
        if not text:
            raise ValueError(
                f"{CONFIG_ENV} is not set: the executor's settings (SAAR on or off among them) come from a recipe; "
                f"run python -m trainers launch --recipe R, or set it to the JSON that puts in the job's runtime env"
            )
        return cls.from_json(text)

    def to_json(self) -> str:
        """Every field, ``saar`` as a mapping of all of its own: :meth:`from_json` reads it back to this config."""
        return json.dumps(asdict(self), sort_keys=True)


def check_fields(cfg: Any, prefix: str) -> None:
    """Check every field of a dataclass against its type and the bounds in its metadata.

    Raises ValueError naming ``<prefix>.<field>``, the value and what is allowed.
    """
    for f in fields(cfg):
        value, lo, hi = getattr(cfg, f.name), f.metadata.get("min"), f.metadata.get("max")
        want = f.type if isinstance(f.type, type) else {"int": int, "float": float, "bool": bool}.get(str(f.type))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
            object.__setattr__(cfg, f.name, value)
        if want is not None and (not isinstance(value, want) or (want is not bool and isinstance(value, bool))):
            raise ValueError(f"{prefix}.{f.name} must be {want.__name__}, got {value!r}")
        if lo is not None and value < lo or hi is not None and value > hi:
            bounds = f">= {lo}" if hi is None else f"in [{lo}, {hi}]" if lo is not None else f"<= {hi}"
            raise ValueError(f"{prefix}.{f.name} must be {bounds}, got {value!r}")


@dataclass(frozen=True)
class CpuConfig:
    """The ``cpu:`` section of a recipe: the CPU embedded trainer (:mod:`trainers.cpu.trainer`)."""

    steps: int = setting(4, "optimizer steps of the run", minimum=1)
    prompts_per_step: int = setting(2, "distinct problems per step", minimum=1)
    num_generations: int = setting(4, "rollouts per problem: the GRPO group, normalised together", minimum=2)
    max_new_tokens: int = setting(96, "tokens generated per assistant turn", minimum=1)
    max_total_tokens: int = setting(768, "tokens per trajectory, prompt and every turn included", minimum=16)
    temperature: float = setting(0.9, "sampling temperature of rollouts", minimum=0.0)
    top_p: float = setting(0.95, "nucleus sampling mass of rollouts", minimum=0.01, maximum=1.0)
    learning_rate: float = setting(5e-5, "AdamW learning rate of the LoRA weights", minimum=0.0)
    lora_r: int = setting(8, "LoRA rank (all linear layers)", minimum=1)
    lora_alpha: int = setting(16, "LoRA scale numerator", minimum=1)
    clip_low: float = setting(
        0.2,
        "PPO clip below 1 (CLEANER: 0.2). No effect in this trainer: it takes one optimizer step per batch of "
        "rollouts, with log-probs from the policy it updates, so the ratio is exactly 1 and never clipped",
        minimum=0.0,
    )
    clip_high: float = setting(
        0.28,
        "PPO clip above 1 (CLEANER: 0.28, DAPO's clip-higher). No effect in this trainer, as clip_low",
        minimum=0.0,
    )
    save_steps: int = setting(1, "checkpoint every N steps (0: no checkpoints, so no --resume)", minimum=0)
    seed: int = setting(0, "seed of data order, LoRA init, sampling and SAAR draws", minimum=0)
    threads: int = setting(1, "torch threads; more than the free cores thrash", minimum=1)
    bf16: bool = setting(
        False,
        "the loss's forward and backward passes under bfloat16 autocast (the weights, LoRA and optimizer stay "
        "float32): faster on CPUs with AVX-512 BF16 or AMX, slower on CPUs without them",
    )
    batch_window_s: float = setting(
        0.2, "seconds the batcher waits for more rollouts' requests before generating a batch", minimum=0.0
    )
    sandbox_retries: int = setting(
        SANDBOX_RETRIES,
        "reruns of a rollout whose sandbox failed (a killed container): from its start, never scored as the model's",
        minimum=0,
    )
    step_fault_runs: int = setting(
        3,
        "runs of one step that may end on sandbox faults: --resume samples such a step with new seeds each time, "
        "then stops and says why (trainers.cpu.resume)",
        minimum=1,
    )
    engine: str = setting(
        "hf",
        "what generates the rollouts: hf (the policy in-process, batched), vllm (vLLM's engine on CPU, the "
        "policy's merged weights synced after every optimizer step) or auto (vllm where vLLM can run, else hf)",
    )
    engine_dtype: str = setting(
        "float32",
        "the weights' dtype in vLLM's engine: float32 samples from the trainer's own policy; bfloat16 is faster "
        "on CPUs with AVX-512 BF16 and samples from the policy rounded to bfloat16, as GPU engines do (the "
        "trainer recomputes the log-probs either way)",
    )
    is_correction: str = setting(
        "off",
        "importance-sampling correction of the engine/trainer mismatch, as TRL's vllm_importance_sampling_mode: "
        "off, token_truncate, token_mask, sequence_truncate or sequence_mask (TRL's bound: a ratio of 3). Needs "
        "cpu.engine vllm and, with SAAR on, temperature 1.0 and top_p 1.0: SAAR's replaced spans are rescored "
        "under the purified context by a prefill, whose log-probs skip both (trainers.core.rescore)",
    )

    def __post_init__(self) -> None:
        check_fields(self, "cpu")
        if self.engine not in ENGINES:
            raise ValueError(f"cpu.engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.engine_dtype not in ENGINE_DTYPES:
            raise ValueError(f"cpu.engine_dtype must be one of {', '.join(ENGINE_DTYPES)}, got {self.engine_dtype!r}")
        if self.is_correction not in IS_CORRECTIONS:
            raise ValueError(
                f"cpu.is_correction must be one of {', '.join(IS_CORRECTIONS)}, got {self.is_correction!r}"
            )
        if self.is_correction != "off" and self.engine == "hf":
            raise ValueError(
                "cpu.is_correction needs cpu.engine vllm: the in-process sampler is the trained policy itself, "
                "so there is no engine/trainer mismatch to correct"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> CpuConfig:
        """The ``cpu`` mapping of the recipe at ``where``; errors name the file and the key."""
        known = {f.name for f in fields(cls)}
        if unknown := set(data) - known:
            raise ValueError(f"{where}: unknown keys in 'cpu': {sorted(unknown)}; known: {sorted(known)}")
        try:
            return cls(**data)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc

    @classmethod
    def help(cls) -> str:
        """Every key with its default and help text (for docs and ``--help``)."""
        return "\n".join(f"{f.name} (default {f.default!r}): {f.metadata['help']}" for f in fields(cls))
