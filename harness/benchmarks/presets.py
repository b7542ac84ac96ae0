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

from dataclasses import Field, asdict, dataclass, field, fields, replace
from typing import Any, Literal, get_args

from harness.core.problems import Kind, check_kind, rollout_config
from harness.core.rollout import RolloutConfig
from harness.core.saar import SaarConfig, Similarity
from harness.core.toolenv import ToolEnv, get_tool_env

#: Which judge sets ``accuracy``: the evaluation judge, or the reference's strict box check on the whole response.
Judge = Literal["lenient", "reference"]
JUDGES: tuple[Judge, ...] = get_args(Judge)

#: Protocol fields whose unset value (None) is the tool environment's own.
TOOL_ENV_FIELDS = ("similarity", "timeout", "output_chars")


def setting(default: Any, help: str, *, shown: str | None = None) -> Any:
    """A settings field: its default, its help (one sentence or two, as the README's table and ``inspect``'s task
    help show it) and, where the default is not a literal (None), what it stands for (``shown``)."""
    return field(default=default, metadata={"help": help, "shown": shown})


def setting_default(f: Field[Any]) -> str:
    """A field's default as the docs show it: its ``shown`` text, else the literal (``none`` for None)."""
    shown = f.metadata.get("shown")
    if shown is not None:
        return shown
    if f.default is None:
        return "none"
    return f"`{str(f.default).lower() if isinstance(f.default, bool) else f.default}`"


@dataclass(frozen=True)
class EvalProtocol:
    """What one task's evaluation measures (defaults: the harness's own, without a preset).

    ``similarity``, ``timeout`` and ``output_chars`` left None take the tool environment's values
    (:func:`resolve` fills them in, so a resolved protocol has every value).
    """

    saar: bool = setting(False, "SAAR (rollback) at inference")
    saar_prob: float = setting(1.0, "probability that SAAR is on for a trajectory (the paper's 70/30 curriculum: 0.7)")
    gamma: float = setting(0.5, "similarity threshold: ≥ γ shallow, < γ deep")
    similarity: Similarity | None = setting(
        None,
        "`code`: ratio between the two programs (the paper; `project`); `call`: between the calls as written, from "
        "`<tool_call>` to the turn's end (the reference implementation, whose JSON boilerplate pushes ratios up; "
        "`reference`)",
        shown="the tool env's",
    )
    max_retries: int = setting(3, "regenerations per failed turn")
    max_turns: int = setting(16, "assistant turns per trajectory")
    max_total_tokens: int | None = setting(
        None,
        "the response budget: generated tokens kept (`project`), or every response token, tool output included, "
        "each generation taking what is left (`reference`)",
    )
    timeout: float | None = setting(None, "seconds per tool call (`project` 10, `reference` 4)", shown="the tool env's")
    output_chars: int | None = setting(
        None, "tool output shown to the model, middle cut (verl's default)", shown="`256`"
    )
    epochs: int = setting(
        1,
        "samples per problem; pass@1 is the mean over epochs, pass@k (k = epochs) is reported too; "
        "`inspect eval --epochs N` replaces the count and reports pass@N (`--epochs-reducer` replaces the reducers)",
    )
    temperature: float = setting(1.0, "the sampling temperature (the reference's); `--temperature` overrides it")
    top_p: float = setting(0.6, "the sampling's nucleus mass (the reference's); `--top-p` overrides it")
    max_tokens: int | None = setting(None, "tokens per generation; `--max-tokens` overrides it", shown="provider's")
    max_prompt_tokens: int | None = setting(
        None, "the reference's prompt limit; recorded, not enforced (ours are shorter)"
    )
    tool_env: str = setting(
        "project", "the tool environment: `project` (this project's) or `reference` (Open-CLEANER's)"
    )
    judge: Judge = setting(
        "lenient",
        "the reported `accuracy`: `lenient` (equivalence; LiveCodeBench's official grader) or `reference` (the "
        "reference's judge of the whole response: the strict box, or code-judge's exact output; the lenient verdict "
        "beside it as `accuracy_lenient`)",
    )

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
