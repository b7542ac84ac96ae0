"""Settings fields: each a dataclass field with its default and its help, in one style for every settings object.

The help is what the README's tables, a task's docstring (``inspect``'s task help) and a recipe's reader show;
``shown`` says what a default that is not a literal stands for ("the tool env's").
"""

from __future__ import annotations

from dataclasses import Field, field
from typing import Any


def setting(
    default: Any,
    help: str,
    *,
    shown: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
) -> Any:
    """A settings field: its default, its help (a sentence or two), where the default is not what it means (None for
    "the tool environment's") what to show for it, and for a number the bounds its reader enforces (``min``,
    ``max``: a recipe's ``check_fields``)."""
    return field(default=default, metadata={"help": help, "shown": shown, "min": minimum, "max": maximum})


def setting_help(f: Field[Any]) -> str:
    """A settings field's help; a KeyError naming the field for a field declared without :func:`setting`."""
    try:
        return f.metadata["help"]
    except KeyError:
        raise KeyError(
            f"the settings field {f.name!r} has no help: declare it with harness.core.settings.setting"
        ) from None


def setting_default(f: Field[Any]) -> str:
    """A field's default as the docs show it: its ``shown`` text, else the literal (``none`` for None)."""
    shown = f.metadata.get("shown")
    if shown is not None:
        return shown
    if f.default is None:
        return "none"
    return f"`{str(f.default).lower() if isinstance(f.default, bool) else f.default}`"
