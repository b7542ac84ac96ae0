"""The problem kinds, and what a kind alone decides; imports nothing of the project.

A problem is ``math`` (AIME, DAPO-style math: the answer is a number in ``\\boxed{}``),
``gpqa`` (a choice letter in ``\\boxed{}``) or ``code`` (LiveCodeBench: the answer is a
final ```python block). The kind decides how an assistant turn is parsed: for math and
GPQA a bare ```python block is taken as a call of the python tool (small models write
them that way), but for code that block IS the answer the prompt asks for, so running it
as a tool call (and letting SAAR purify it) would execute and rewrite final answers.
"""

from __future__ import annotations

from typing import Literal, get_args

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
