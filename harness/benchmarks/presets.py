"""Evaluation protocols by name: ``-T preset=cleaner-paper`` (``cleaner-paper-7b``), ``harness compare --preset``.

An :class:`EvalProtocol` is every setting that decides what an evaluation measures: the
SAAR switch and its parameters, the rollout limits, the sampling and the number of
samples per problem. Without a preset a task runs :class:`EvalProtocol`'s defaults; with
one it runs the preset's protocol for the task's problem kind. Task arguments given
explicitly override either (so ``-T preset=cleaner-paper -T saar=false`` is the
SAAR-off arm of the paper's protocol).

A preset also runs its whole protocol at once, for a GPU engine (``harness.evals.concurrency``: the task's
requests, samples in flight and sandbox pool; ``--max-connections`` / ``--max-samples`` override it).

``cleaner-paper`` is the protocol of the CLEANER authors' evaluation scripts for their 4B model (arXiv 2601.15141,
Open-CLEANER, ``eval_qwen3_4b_*.sh``), ``cleaner-paper-7b`` that of their 7B model's (``eval_qwen2_7b_*.sh``).
:data:`PRESETS` states their settings, once; docs/evaluation.md's table of them is generated from it
(:func:`preset_table`).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, Literal, get_args

from harness.core.kinds import Kind, check_kind
from harness.core.problems import rollout_config
from harness.core.rollout import RolloutConfig
from harness.core.saar import SaarConfig
from harness.core.settings import setting
from harness.core.toolenv import ToolEnv, get_tool_env

#: Which judge sets ``accuracy``: the evaluation judge, or the reference's strict box check on the whole response.
Judge = Literal["lenient", "reference"]
JUDGES: tuple[Judge, ...] = get_args(Judge)

#: The SAAR task arguments and the :class:`SaarConfig` field each sets (a recipe's ``saar.<field>``): Inspect's task
#: arguments are flat, so each field has a ``-T`` name; the protocol holds them as one SaarConfig.
SAAR_ARGUMENTS: dict[str, str] = {
    "saar": "enabled",
    "saar_prob": "prob",
    "gamma": "gamma",
    "similarity": "similarity",
    "max_retries": "max_retries",
}

#: Protocol settings whose unset value (None) is the tool environment's own (SAAR's similarity is one too).
TOOL_ENV_FIELDS = ("timeout", "output_chars")


@dataclass(frozen=True)
class EvalProtocol:
    """What one task's evaluation measures (defaults: the harness's own, without a preset).

    Built from flat settings (the task arguments' names) by :meth:`of`, which fills what the tool environment
    decides (SAAR's ``similarity``, ``timeout``, ``output_chars``) where they are unset, so a protocol of
    :func:`resolve` has every value. :meth:`to_dict` gives the flat settings back (the log's ``protocol``).
    """

    saar: SaarConfig = field(default_factory=SaarConfig)  # SAAR at inference, in the recipes' shape
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

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> EvalProtocol:
        """The protocol of flat settings (:data:`PROTOCOL_FIELDS`; None or left out: the default, or the tool
        environment's where it decides).

        Raises:
            ValueError: a name that is not a protocol setting, or a bad value.
        """
        unknown = sorted(set(settings) - set(PROTOCOL_FIELDS))
        if unknown:
            raise ValueError(f"not protocol settings: {unknown}; settings: {', '.join(PROTOCOL_FIELDS)}")
        given = {k: v for k, v in settings.items() if v is not None}
        env = get_tool_env(given.get("tool_env", "project"), "-T tool_env")
        saar = {name: given.pop(argument) for argument, name in SAAR_ARGUMENTS.items() if argument in given}
        filled = {f: getattr(env, f) for f in TOOL_ENV_FIELDS} | given
        return cls(saar=SaarConfig(**{"similarity": env.similarity, **saar}), **filled)

    @property
    def env(self) -> ToolEnv:
        return get_tool_env(self.tool_env)

    def rollout_config(self, kind: Kind) -> RolloutConfig:
        """The rollout configuration of this protocol for problems of ``kind``."""
        env = self.env
        return rollout_config(
            kind,
            max_turns=self.max_turns,
            max_total_tokens=self.max_total_tokens,
            timeout=env.timeout if self.timeout is None else self.timeout,
            output_chars=env.output_chars if self.output_chars is None else self.output_chars,
            saar=self.saar,
            tool_env=env,
        )

    def to_dict(self) -> dict[str, Any]:
        """The flat settings (the task arguments' names), SAAR's first."""
        flat = {argument: getattr(self.saar, name) for argument, name in SAAR_ARGUMENTS.items()}
        return flat | {f.name: getattr(self, f.name) for f in fields(self) if f.name != "saar"}


#: The paper's protocol, as flat settings (the task arguments' names).
_PAPER: dict[str, Any] = {
    "saar": True,
    "max_retries": 3,
    "epochs": 16,
    "max_turns": 16,
    "max_total_tokens": 20480,
    "max_tokens": 20480,
    "max_prompt_tokens": 4096,
    "output_chars": 256,
    "temperature": 1.0,
    "top_p": 0.6,
    "tool_env": "reference",
    "judge": "reference",
}

#: Named protocols, by problem kind, as flat settings (:func:`resolve` builds a task's protocol from them).
PRESETS: dict[str, dict[Kind, Mapping[str, Any]]] = {
    "cleaner-paper": {  # the 4B model's (Qwen3-4B-Instruct-2507)
        "math": _PAPER,
        "gpqa": _PAPER,
        "code": _PAPER | {"saar": False, "epochs": 10},
    },
    "cleaner-paper-7b": {  # the 7B model's (Qwen2.5-7B-Instruct): rollback off everywhere, 32 samples on AIME/GPQA
        "math": _PAPER | {"saar": False, "epochs": 32},
        "gpqa": _PAPER | {"saar": False, "epochs": 32},
        "code": _PAPER | {"saar": False, "epochs": 10},
    },
}

#: Every protocol setting, flat: the SAAR arguments, then the protocol's other fields (what :func:`resolve` takes).
PROTOCOL_FIELDS = (*SAAR_ARGUMENTS, *(f.name for f in fields(EvalProtocol) if f.name != "saar"))

#: Protocol settings that only a preset sets, never a task argument (recorded in the log, not enforced).
PRESET_ONLY_FIELDS = ("max_prompt_tokens",)

#: The protocol settings that are task arguments (``harness.evals.tasks``; the other task arguments are the preset,
#: the data, the sandbox and the run's own settings: ``TaskOptions``).
PROTOCOL_ARGUMENTS = tuple(f for f in PROTOCOL_FIELDS if f not in PRESET_ONLY_FIELDS)


def _owner(name: str) -> tuple[type, str]:
    return (SaarConfig, SAAR_ARGUMENTS[name]) if name in SAAR_ARGUMENTS else (EvalProtocol, name)


def protocol_field(name: str) -> Field[Any]:
    """The settings field of the protocol setting ``name``: a SAAR argument's :class:`SaarConfig` field, else
    :class:`EvalProtocol`'s (its type: :func:`protocol_hint`)."""
    owner, field_name = _owner(name)
    return {f.name: f for f in fields(owner)}[field_name]


def protocol_hint(name: str) -> Any:
    """The type of the protocol setting ``name``."""
    owner, field_name = _owner(name)
    return typing.get_type_hints(owner)[field_name]


def resolve(preset: str | None, kind: Kind, **given: Any) -> EvalProtocol:
    """The protocol of a task: the preset's settings for ``kind`` (or none), then every ``given`` value not None.

    Raises:
        ValueError: an unknown preset or protocol setting.
    """
    if preset is None:
        base: Mapping[str, Any] = {}
    elif preset in PRESETS:
        base = PRESETS[preset][check_kind(kind)]
    else:
        raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(sorted(PRESETS))}")
    return EvalProtocol.of({**base, **{k: v for k, v in given.items() if v is not None}})


def preset_table() -> list[str]:
    """docs/evaluation.md's table of the presets: every protocol setting of each preset's protocol for each problem
    kind, beside the default protocol's (resolved: what a log's ``protocol`` records)."""
    columns = [(None, "math", "default")]
    columns += [(p, k, f"`{p}` {k}") for p in PRESETS for k in PRESETS[p]]
    resolved = [resolve(preset, kind).to_dict() for preset, kind, _ in columns]
    rows = ["| setting | " + " | ".join(title for _, _, title in columns) + " |", "|---|" + "---|" * len(columns)]
    for name in PROTOCOL_FIELDS:
        rows.append(f"| `{name}` | " + " | ".join(_cell(protocol[name]) for protocol in resolved) + " |")
    return rows


def _cell(value: Any) -> str:
    return "none" if value is None else f"{str(value).lower() if isinstance(value, bool) else value}"
