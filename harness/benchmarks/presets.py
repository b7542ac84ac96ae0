"""Evaluation protocols by name: ``-T preset=cleaner-paper`` (``cleaner-paper-7b``), ``harness compare --preset``.

An :class:`EvalProtocol` is every setting that decides what an evaluation measures: the
SAAR switch and its parameters, the rollout limits, the sampling and the number of
samples per problem. Without a preset a task runs :class:`EvalProtocol`'s defaults; with
one it runs the preset's protocol for the task's problem kind. Task arguments given
explicitly override either (so ``-T preset=cleaner-paper -T saar=false`` is the
SAAR-off arm of the paper's protocol).

A preset also runs its whole protocol at once, for a GPU engine (``harness.evals.concurrency``: the task's
requests, samples in flight and sandbox pool; ``--max-connections`` / ``--max-samples`` override it).

``cleaner-paper`` is the protocol of the CLEANER authors' evaluation scripts (arXiv
2601.15141, Open-CLEANER): AIME and GPQA with rollback ON at test time (3 retries) and
16 samples per problem, LiveCodeBench with rollback OFF and 10 samples; temperature 1.0,
top_p 0.6, 16 turns, 20480 response tokens, 4096 prompt tokens, tool output cut to 256
characters. Their reported AIME/GPQA numbers therefore include SAAR at inference: this
preset reproduces their table, and SAAR on vs off under it is the ablation. It is the
protocol of the 4B model (Qwen3-4B-Instruct-2507, ``eval_qwen3_4b_*.sh``).

``cleaner-paper-7b`` is the protocol of their 7B model's scripts (Qwen2.5-7B-Instruct,
``eval_qwen2_7b_aime_gpqa.sh``, ``eval_qwen2_7b_livecodebench.sh``): AIME and GPQA with
rollback OFF and 32 samples per problem, LiveCodeBench with rollback OFF and 10 samples;
the same sampling (temperature 1.0, top_p 0.6) and limits (16 turns, 20480 response tokens,
4096 prompt tokens, 256 characters of tool output).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

from harness.core.kinds import Kind, check_kind
from harness.core.problems import rollout_config
from harness.core.rollout import RolloutConfig
from harness.core.saar import SaarConfig, Similarity
from harness.core.toolenv import ToolEnv, get_tool_env

Judge = Literal["lenient", "reference"]
JUDGES: tuple[Judge, ...] = ("lenient", "reference")

#: Protocol fields whose unset value (None) is the tool environment's own.
TOOL_ENV_FIELDS = ("similarity", "timeout", "output_chars")


@dataclass(frozen=True)
class EvalProtocol:
    """What one task's evaluation measures (defaults: the harness's own, without a preset).

    ``similarity``, ``timeout`` and ``output_chars`` left None take the tool environment's values
    (:func:`resolve` fills them in, so a resolved protocol has every value).
    """

    saar: bool = False  #: SAAR (rollback) at inference
    saar_prob: float = 1.0  #: probability that SAAR is on for a trajectory
    gamma: float = 0.5  #: similarity threshold between shallow and deep replacement
    #: "code" (the two programs) or "call" (the two calls as written: the reference's); None: the tool env's
    similarity: Similarity | None = None
    max_retries: int = 3  #: SAAR regenerations per failed call
    max_turns: int = 16  #: assistant turns per trajectory
    #: the response budget in tokens, counted as the tool environment says (generated, or every response token)
    max_total_tokens: int | None = None
    timeout: float | None = None  #: seconds per tool call (None: the tool env's)
    output_chars: int | None = None  #: characters of tool output shown to the model (None: the tool env's)
    epochs: int = 1  #: samples per problem (pass@1 is their mean)
    temperature: float = 1.0
    top_p: float = 0.6
    max_tokens: int | None = None  #: tokens per generation (None: the provider's default)
    max_prompt_tokens: int | None = None  #: the reference's prompt limit; recorded, not enforced (ours are shorter)
    tool_env: str = "project"  #: the tool environment (harness.core.toolenv): "project" or "reference"
    judge: Judge = "lenient"  #: the reported accuracy: "lenient" (equivalence) or "reference" (the strict box)

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.max_turns < 1:
            raise ValueError(f"epochs and max_turns must be >= 1, got epochs={self.epochs}, max_turns={self.max_turns}")
        get_tool_env(self.tool_env, "-T tool_env")
        if self.judge not in JUDGES:
            raise ValueError(f"-T judge={self.judge!r}: choose one of {', '.join(JUDGES)}")
        self.saar_config()  # validates the SAAR fields

    @property
    def env(self) -> ToolEnv:
        return get_tool_env(self.tool_env)

    def filled(self) -> EvalProtocol:
        """This protocol with every field the tool environment decides set (``None`` becomes the env's)."""
        env = self.env
        return replace(self, **{f: getattr(env, f) for f in TOOL_ENV_FIELDS if getattr(self, f) is None})

    def saar_config(self) -> SaarConfig:
        return SaarConfig(
            enabled=self.saar,
            prob=self.saar_prob,
            gamma=self.gamma,
            similarity=self.similarity or self.env.similarity,
            max_retries=self.max_retries,
        )

    def rollout_config(self, kind: Kind) -> RolloutConfig:
        """The rollout configuration of this protocol for problems of ``kind``."""
        full = self.filled()
        return rollout_config(
            kind,
            max_turns=full.max_turns,
            max_total_tokens=full.max_total_tokens,
            timeout=full.timeout,
            output_chars=full.output_chars,
            saar=full.saar_config(),
            tool_env=full.env,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_PAPER = EvalProtocol(
    saar=True,
    max_retries=3,
    epochs=16,
    max_turns=16,
    max_total_tokens=20480,
    max_tokens=20480,
    max_prompt_tokens=4096,
    output_chars=256,
    temperature=1.0,
    top_p=0.6,
    tool_env="reference",
    judge="reference",
)

#: Named protocols, by problem kind.
PRESETS: dict[str, dict[Kind, EvalProtocol]] = {
    "cleaner-paper": {  # the 4B model's (Qwen3-4B-Instruct-2507)
        "math": _PAPER,
        "gpqa": _PAPER,
        "code": replace(_PAPER, saar=False, epochs=10),
    },
    "cleaner-paper-7b": {  # the 7B model's (Qwen2.5-7B-Instruct): rollback off everywhere, 32 samples on AIME/GPQA
        "math": replace(_PAPER, saar=False, epochs=32),
        "gpqa": replace(_PAPER, saar=False, epochs=32),
        "code": replace(_PAPER, saar=False, epochs=10),
    },
}

#: Every protocol field: the settings :func:`resolve` takes.
PROTOCOL_FIELDS = tuple(f.name for f in fields(EvalProtocol))

#: Protocol fields that only a preset sets, never a task argument (recorded in the log, not enforced).
PRESET_ONLY_FIELDS = ("max_prompt_tokens",)

#: The protocol fields that are task arguments (``harness.evals.tasks.TaskOptions``; the other task arguments
#: are the preset, the data, the sandbox and the run's own settings).
PROTOCOL_ARGUMENTS = tuple(f for f in PROTOCOL_FIELDS if f not in PRESET_ONLY_FIELDS)


def resolve(preset: str | None, kind: Kind, **given: Any) -> EvalProtocol:
    """The protocol of a task: the preset's for ``kind`` (or the defaults), then every ``given`` value not None.

    Raises:
        ValueError: an unknown preset or protocol field.
    """
    if preset is None:
        base = EvalProtocol()
    elif preset in PRESETS:
        base = PRESETS[preset][check_kind(kind)]
    else:
        raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(sorted(PRESETS))}")
    unknown = sorted(set(given) - set(PROTOCOL_FIELDS))
    if unknown:
        raise ValueError(f"not protocol settings: {unknown}; settings: {', '.join(PROTOCOL_FIELDS)}")
    return replace(base, **{k: v for k, v in given.items() if v is not None}).filled()
