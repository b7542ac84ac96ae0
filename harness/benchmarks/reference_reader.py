"""An expression of the reference's prompt code read as template text, without running it.

A method of the reference's dataset class (:data:`DATASET_CLASS`) builds a prompt from string constants (the
module's and its own), ``+``, f-strings and the row's data; :class:`PromptReader` turns such an expression into a
template of :mod:`harness.core.prompts`, each data value (:class:`DataValue`) its placeholder, and refuses anything
else as a changed shape, naming the file and line (:class:`ReferencePromptError`).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: The commit whose prompts the project reads.
REFERENCE_COMMIT = "91e40ad70b48320ea8db5716bb86292b4e187f4c"
#: The class whose methods build the evaluation prompts.
DATASET_CLASS = "CustomRLHFDataset"


@dataclass(frozen=True)
class DataValue:
    """A value of the row a method puts in its prompt: the template placeholder it becomes.

    ``keys`` are the subscript keys the value is read with (``row["problem"]``: ``("problem",)``;
    ``reward_model["ground_truth"]["inputs"]``: ``("ground_truth", "inputs")``); any one of
    ``sources`` must match the end of them. ``as_str`` says the prompt shows it through ``str()``.
    """

    placeholder: str
    sources: tuple[tuple[str | int, ...], ...]
    as_str: bool = False


class ReferencePromptError(ValueError):
    """The reference's file is missing, of another commit, or not in the shape this reader knows."""


class PromptReader:
    """Turns one method's prompt expressions into template text.

    ``label`` names what the method builds in an error; ``data`` are the method's data names and
    what each becomes.
    """

    def __init__(
        self,
        path: Path,
        constants: Mapping[str, ast.expr],
        method: ast.FunctionDef,
        label: str,
        data: Mapping[str, DataValue],
    ) -> None:
        self.path = path
        self.constants = constants
        self.method = method
        self.label = label
        self.data = data
        self.locals: dict[str, list[ast.expr]] = {}  # name -> every value assigned to it in the method
        for node in ast.walk(method):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._record(target, node.value)

    def _record(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.locals.setdefault(target.id, []).append(value)
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            for name, item in zip(target.elts, value.elts, strict=True):
                self._record(name, item)
        elif isinstance(target, ast.Tuple):
            for name in target.elts:
                if isinstance(name, ast.Name):
                    self.locals.setdefault(name.id, []).append(value)

    def fail(self, node: ast.AST, what: str) -> ReferencePromptError:
        line = getattr(node, "lineno", self.method.lineno)
        return ReferencePromptError(
            f"{self.path}:{line}: {DATASET_CLASS}.{self.method.name} ({self.label}): {what}; the file's shape is not "
            f"that of commit {REFERENCE_COMMIT[:7]}, so its prompt cannot be read"
        )

    def template(self, node: ast.expr) -> str:
        """The template text of the prompt expression ``node``, which must use every data value."""
        text, used = self.text(node, set())
        wanted = {value.placeholder for value in self.data.values()}
        if used != wanted:
            missing = ", ".join(sorted(wanted - used))
            raise self.fail(node, f"the prompt does not use the row's {missing}")
        return text

    def evaluation_template(self) -> str:
        """The template of an evaluation method: its one assignment to ``prompt``."""
        prompts = self.locals.get("prompt", [])
        if len(prompts) != 1:
            raise self.fail(self.method, f"expected one assignment to 'prompt', found {len(prompts)}")
        return self.template(prompts[0])

    def text(self, node: ast.expr, seen: set[str]) -> tuple[str, set[str]]:
        """The template text of ``node`` and the placeholders it uses."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value.replace("{", "{{").replace("}", "}}"), set()
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, left_used = self.text(node.left, seen)
            right, right_used = self.text(node.right, seen)
            return left + right, left_used | right_used
        if isinstance(node, ast.JoinedStr):
            parts, used = [], set()
            for value in node.values:
                if isinstance(value, ast.FormattedValue):
                    if value.conversion != -1 or value.format_spec is not None:
                        raise self.fail(value, "an f-string field with a conversion or format spec")
                    part, part_used = self.data_value(value.value, as_str=False)
                else:
                    part, part_used = self.text(value, seen)
                parts.append(part)
                used |= part_used
            return "".join(parts), used
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "str" and len(node.args) == 1 and not node.keywords:
                return self.data_value(node.args[0], as_str=True)
            raise self.fail(node, f"a call in the prompt ({ast.unparse(node)[:60]})")
        if isinstance(node, ast.Name):
            if node.id in self.data:
                return self.data_value(node, as_str=False)
            if node.id in seen:
                raise self.fail(node, f"{node.id!r} refers to itself")
            values = self.locals.get(node.id)
            if values is None and node.id in self.constants:
                values = [self.constants[node.id]]
            if not values:
                raise self.fail(node, f"{node.id!r} is neither a string constant nor the row's data")
            if len(values) != 1:
                raise self.fail(node, f"{node.id!r} is assigned {len(values)} times")
            return self.text(values[0], seen | {node.id})
        raise self.fail(node, f"an unexpected expression in the prompt ({ast.unparse(node)[:60]})")

    def data_value(self, node: ast.expr, *, as_str: bool) -> tuple[str, set[str]]:
        """The placeholder of a data name, checked against where the method reads it from."""
        if not isinstance(node, ast.Name) or node.id not in self.data:
            raise self.fail(node, f"{ast.unparse(node)[:60]!r} is not the row's data ({', '.join(self.data)})")
        value = self.data[node.id]
        if value.as_str != as_str:
            shown = f"str({node.id})" if value.as_str else node.id
            raise self.fail(node, f"the row's {node.id} is shown otherwise than as {shown}")
        for assigned in self.locals.get(node.id, []):
            keys = subscript_keys(assigned)
            if not any(keys[-len(source) :] == source for source in value.sources):
                sources = " or ".join("[" + "][".join(repr(k) for k in s) + "]" for s in value.sources)
                raise self.fail(assigned, f"{node.id!r} is read from {ast.unparse(assigned)[:60]}, not {sources}")
        if node.id not in self.locals:
            raise self.fail(node, f"{node.id!r} is not read from the row in this method")
        return "{" + value.placeholder + "}", {value.placeholder}


def subscript_keys(node: ast.expr) -> tuple[str | int, ...]:
    """The keys of a subscript chain (``a["x"][0]``: ``("x", 0)``); ``()`` for anything else."""
    keys: list[str | int] = []
    while isinstance(node, ast.Subscript):
        key = node.slice
        if not (isinstance(key, ast.Constant) and type(key.value) in (str, int)):
            return ()
        keys.append(key.value)
        node = node.value
    return tuple(reversed(keys))


def module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    constants: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            constants[node.targets[0].id] = node.value
    return constants
