"""The source of each benchmark's task function, generated from its registry entry and the settings' fields.

A task function takes every task argument as a real named parameter, with its type and default (what a reader, and
Inspect's ``-T`` matching and task help, see), and its docstring's Args say what each means. ``python -m harness
generate`` writes it into ``tasks/<name>.py`` (a checkout's task files, below each file's own docstring) and into
:mod:`cleaner.tasks` (every benchmark's, for ``inspect eval cleaner/<name>`` after ``pip install``);
``tests/test_generated.py`` fails while one is stale.
"""

from __future__ import annotations

import json
import textwrap
import types
import typing
from typing import Any

from harness.benchmarks.presets import Judge
from harness.benchmarks.registry import BENCHMARKS, Benchmark
from harness.core.saar import Similarity
from harness.evals.tasks import ARGUMENT_DOCS, SandboxName, task_signature

#: The type aliases a task function's annotations name (:data:`PROJECT` imports them).
ALIASES: dict[Any, str] = {Similarity: "Similarity", Judge: "Judge", SandboxName: "SandboxName"}

#: The imports of a task function's module (then the project's, sorted as the linter sorts them).
THIRD_PARTY = ["from inspect_ai import Task, task", ""]
PROJECT = [
    "from harness.benchmarks.presets import Judge",
    "from harness.core.saar import Similarity",
    "from harness.evals.tasks import SandboxName, registered_task",
]


def annotation(hint: Any) -> str:
    """A type as source text: ``X | None``, an alias by its name, a builtin by its name."""
    if hint in ALIASES:
        return ALIASES[hint]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " | ".join(annotation(arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return "None"
    if isinstance(hint, type):
        return hint.__name__
    raise TypeError(f"a task argument's type must be a builtin, an alias of {sorted(ALIASES.values())} or a union")


def literal(value: Any) -> str:
    """A default as source text (strings double-quoted, as the formatter writes them)."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


def summary(bench: Benchmark) -> str:
    return f"{bench.title} with the shared rollout core."


def task_function(bench: Benchmark) -> list[str]:
    """The lines of ``bench``'s task function: ``@task``, its parameters, its docstring and its one statement."""
    described = {**ARGUMENT_DOCS, **bench.arguments}
    signature = task_signature(bench)
    lines = ["@task", f"def {bench.name}("]
    for p in signature.parameters.values():
        lines.append(f"    {p.name}: {annotation(p.annotation)} = {literal(p.default)},")
    lines += [") -> Task:", f'    """{summary(bench)}', "", "    Args:"]
    for name in signature.parameters:
        text = f"{name}: {described[name]}".replace("\\", "\\\\")
        lines += textwrap.wrap(text, width=116, initial_indent=" " * 8, subsequent_indent=" " * 12)
    lines += ['    """', f"    return registered_task({literal(bench.name)}, **locals())", "", ""]
    return lines


def task_file(name: str) -> list[str]:
    """The generated part of ``tasks/<name>.py``: the imports and the task function of the benchmark ``name``."""
    return [*THIRD_PARTY, *PROJECT, "", "", *task_function(BENCHMARKS[name])]


def installed_tasks() -> list[str]:
    """The generated part of :mod:`cleaner.tasks`: the providers' registration and every benchmark's task."""
    lines = [*THIRD_PARTY, "import harness.evals._registry  # noqa: F401  (the model and sandbox providers)", *PROJECT]
    lines += ["", ""]
    for bench in BENCHMARKS.values():
        lines += task_function(bench)
    return lines
