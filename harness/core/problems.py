"""The problem kinds, and the one builder of a rollout's configuration per kind.

A problem is ``math`` (AIME, DAPO-style math: the answer is a number in ``\\boxed{}``),
``gpqa`` (a choice letter in ``\\boxed{}``) or ``code`` (LiveCodeBench: the answer is a
final ```python block). The kind decides how an assistant turn is parsed: for math and
GPQA a bare ```python block is taken as a call of the python tool (small models write
them that way), but for code that block IS the answer the prompt asks for, so running it
as a tool call (and letting SAAR purify it) would execute and rewrite final answers.

Evaluation (:mod:`harness.evals.tasks`) and both trainers (``trainers/openrlhf_plugin/executor.py``,
``trainers/cpu/rollouts.py``) build their :class:`~harness.core.rollout.RolloutConfig` with
:func:`rollout_config`, so the rule lives here only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal, get_args

from harness.core.rollout import RolloutConfig

Kind = Literal["math", "gpqa", "code"]

#: Every problem kind, in a stable order.
KINDS: tuple[Kind, ...] = get_args(Kind)


def check_kind(kind: object, where: str = "problem") -> Kind:
    """``kind`` as a :data:`Kind`, or a ValueError naming ``where`` and the choices."""
    if kind not in KINDS:
        raise ValueError(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind  # type: ignore[return-value]


def python_fence_is_call(kind: Kind) -> bool:
    """Whether a bare ```python block in an assistant turn is a tool call (not for code: it is the answer)."""
    return check_kind(kind) != "code"


def rollout_config(kind: Kind, base: RolloutConfig | None = None, **fields: Any) -> RolloutConfig:
    """The rollout configuration for a problem of ``kind``.

    ``base`` and ``fields`` give the limits, the SAAR settings and the tool environment (without ``base``,
    ``fields`` must name ``tool_env``: there is no default profile); the parse mode always comes from the
    kind and cannot be overridden.
    """
    if "accept_python_fence" in fields:
        raise ValueError("accept_python_fence follows the problem kind; it is not set by hand")
    config = replace(base, **fields) if base is not None else RolloutConfig(**fields)
    return replace(config, accept_python_fence=python_fence_is_call(kind))
