"""The reference's prompts as a template file, read from its source without running it.

Open-CLEANER builds its evaluation prompts in ``recipe/cleaner/reward.py``, class
``CustomRLHFDataset`` (commit 91e40ad70b48320ea8db5716bb86292b4e187f4c): each benchmark's method
joins string constants (the module's and its own) with the row's data into ``prompt``. The project
does not ship that wording; :func:`templates_from_reference` reads it from a checkout of that
commit and :func:`write_templates` writes it as a template file of :mod:`harness.core.prompts`
(what ``-T prompt_template=`` and ``python -m trainers prepare-data --prompt-template`` take).

The file is parsed with :mod:`ast`, never imported or run. Its identity is the sha256 of its bytes
(:data:`REWARD_SHA256`), the same for a git checkout, a plain copy or ``git show`` output: another
commit's file is refused, naming both hashes. Within it, each kind's ``prompt`` must be the same
kind of expression as at that commit: string constants, ``+``, an f-string of the row's data, and
the data named in :data:`METHODS`; anything else (a call, a conditional, an unknown name, a data
value read from another field) is refused as a changed shape, naming the file and line.
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.core.prompts import PromptTemplates, load_prompt_templates

#: The commit whose prompts the project reads, and its file's path and sha256.
REFERENCE_COMMIT = "91e40ad70b48320ea8db5716bb86292b4e187f4c"
REWARD_PATH = Path("recipe/cleaner/reward.py")
REWARD_SHA256 = "ae50eeab374830c6b68bedae807cabb4807e0969fe7b16bff632f087efe27a9d"
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
    sources: tuple[tuple[str, ...], ...]
    as_str: bool = False


#: kind -> (the method that builds its prompt, the method's data names -> what each becomes).
METHODS: Mapping[str, tuple[str, Mapping[str, DataValue]]] = {
    "math": ("map_fn", {"problem": DataValue("problem", (("Problem",), ("problem",)))}),
    "gpqa": (
        "map_fn_gpqa",
        {
            "problem": DataValue("problem", (("problem",),)),
            "domain": DataValue("domain", (("domain",),)),
        },
    ),
    "code": (
        "map_lcb",
        {
            "problem": DataValue("problem", (("problem",),)),
            "inputs": DataValue("test_inputs", (("ground_truth", "inputs"),), as_str=True),
            "outputs": DataValue("test_outputs", (("ground_truth", "outputs"),), as_str=True),
        },
    ),
}


class ReferencePromptError(ValueError):
    """The reference's file is missing, of another commit, or not in the shape this reader knows."""


def reward_file(checkout: str | os.PathLike[str]) -> Path:
    """The ``reward.py`` of ``checkout``: a checkout's directory (git or plain), or the file itself."""
    path = Path(checkout).expanduser()
    if path.is_dir():
        path = path / REWARD_PATH
        if not path.is_file():
            raise ReferencePromptError(
                f"{checkout}: no {REWARD_PATH} in this directory; pass a checkout of Open-CLEANER "
                f"(commit {REFERENCE_COMMIT}) or that file itself"
            )
    elif not path.is_file():
        raise ReferencePromptError(f"{checkout}: no such file or directory")
    return path


def check_commit(path: Path, raw: bytes, pinned: str | None = None) -> None:
    """Refuse a file whose sha256 is not ``pinned`` (None: the pinned commit's, :data:`REWARD_SHA256`)."""
    pinned = REWARD_SHA256 if pinned is None else pinned
    digest = hashlib.sha256(raw).hexdigest()
    if digest != pinned:
        raise ReferencePromptError(
            f"{path}: sha256 {digest} is not that of {REWARD_PATH} at Open-CLEANER commit {REFERENCE_COMMIT} "
            f"({pinned}): this is another commit's file (or an edited one). Check out that commit "
            f"(git checkout {REFERENCE_COMMIT[:7]}), or write its file with "
            f"git show {REFERENCE_COMMIT[:7]}:{REWARD_PATH} > reward.py"
        )


class _Reader:
    """Turns one method's ``prompt`` expression into template text."""

    def __init__(self, path: Path, constants: Mapping[str, ast.expr], method: ast.FunctionDef, kind: str) -> None:
        self.path = path
        self.constants = constants
        self.method = method
        self.kind = kind
        self.data = METHODS[kind][1]
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
            f"{self.path}:{line}: {DATASET_CLASS}.{self.method.name} ({self.kind}): {what}; the file's shape is not "
            f"that of commit {REFERENCE_COMMIT[:7]}, so its prompt cannot be read"
        )

    def template(self) -> str:
        prompts = self.locals.get("prompt", [])
        if len(prompts) != 1:
            raise self.fail(self.method, f"expected one assignment to 'prompt', found {len(prompts)}")
        text, used = self.text(prompts[0], set())
        wanted = {value.placeholder for value in self.data.values()}
        if used != wanted:
            missing = ", ".join(sorted(wanted - used))
            raise self.fail(prompts[0], f"the prompt does not use the row's {missing}")
        return text

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
            keys = _subscript_keys(assigned)
            if not any(keys[-len(source) :] == source for source in value.sources):
                sources = " or ".join("[" + "][".join(repr(k) for k in s) + "]" for s in value.sources)
                raise self.fail(assigned, f"{node.id!r} is read from {ast.unparse(assigned)[:60]}, not {sources}")
        if node.id not in self.locals:
            raise self.fail(node, f"{node.id!r} is not read from the row in this method")
        return "{" + value.placeholder + "}", {value.placeholder}


def _subscript_keys(node: ast.expr) -> tuple[str, ...]:
    """The string keys of a subscript chain (``a["x"]["y"]``: ``("x", "y")``); ``()`` for anything else."""
    keys: list[str] = []
    while isinstance(node, ast.Subscript):
        key = node.slice
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return ()
        keys.append(key.value)
        node = node.value
    return tuple(reversed(keys))


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    constants: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            constants[node.targets[0].id] = node.value
    return constants


def read_templates(path: Path, source: str) -> dict[str, str]:
    """The template of each kind (:data:`METHODS`) from the text ``source`` of ``path`` (parsed, not run)."""
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ReferencePromptError(f"{path}:{exc.lineno}: not Python ({exc.msg})") from None
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == DATASET_CLASS]
    if len(classes) != 1:
        raise ReferencePromptError(
            f"{path}: expected one class {DATASET_CLASS}, found {len(classes)}; the file's shape is not that of "
            f"commit {REFERENCE_COMMIT[:7]}"
        )
    methods = {n.name: n for n in classes[0].body if isinstance(n, ast.FunctionDef)}
    constants = _module_constants(tree)
    templates: dict[str, str] = {}
    for kind, (name, _) in METHODS.items():
        if name not in methods:
            raise ReferencePromptError(
                f"{path}:{classes[0].lineno}: {DATASET_CLASS} has no method {name} ({kind}'s prompt); the file's "
                f"shape is not that of commit {REFERENCE_COMMIT[:7]}"
            )
        templates[kind] = _Reader(path, constants, methods[name], kind).template()
    return templates


def templates_from_reference(
    checkout: str | os.PathLike[str], *, pinned: str | None = None
) -> tuple[Path, dict[str, str]]:
    """The reference's ``reward.py`` in ``checkout`` and its template of each kind.

    Raises :class:`ReferencePromptError` for a missing file, a file of another commit (its sha256
    is not ``pinned``; None: :data:`REWARD_SHA256`) or a changed shape.
    """
    path = reward_file(checkout)
    raw = path.read_bytes()
    check_commit(path, raw, pinned)
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReferencePromptError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return path, read_templates(path, source)


def render_file(templates: Mapping[str, str], sha256: str = REWARD_SHA256) -> str:
    """The template file's text: a header naming where it came from, then one template per kind (YAML).

    The same templates give the same bytes wherever the checkout lies, so a log's ``prompt_template``
    sha256 identifies them.
    """
    import yaml

    header = (
        f"# Open-CLEANER's evaluation prompts, read from {REWARD_PATH} (sha256 {sha256[:16]}...)\n"
        f"# at commit {REFERENCE_COMMIT}, {DATASET_CLASS}: "
        + ", ".join(f"{kind} <- {METHODS[kind][0]}" for kind in templates)
        + ".\n"
        "# Written by `python -m harness prompts from-reference`. The wording is Open-CLEANER's, not this project's:\n"
        '# keep the file out of the repository. Placeholders: docs/benchmarks.md, "Prompts".\n'
    )

    class Dumper(yaml.SafeDumper):
        """Every template double-quoted on one line: exact whatever its spaces and line breaks."""

    def quoted(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"' if "\n" in text else None)

    Dumper.add_representer(str, quoted)
    body = yaml.dump(dict(templates), Dumper=Dumper, sort_keys=False, allow_unicode=True, width=2**31 - 1)
    return header + body


def write_templates(
    checkout: str | os.PathLike[str], out: str | os.PathLike[str], *, pinned: str | None = None
) -> PromptTemplates:
    """Write the reference's templates read from ``checkout`` to ``out``; the file loaded back and checked."""
    path, templates = templates_from_reference(checkout, pinned=pinned)
    target = Path(out).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_file(templates, pinned or REWARD_SHA256), encoding="utf-8")
    loaded = load_prompt_templates(target)
    if dict(loaded.templates) != templates:  # the YAML must give back exactly what was read
        raise ReferencePromptError(f"{target}: the written file does not read back as the templates read from {path}")
    return loaded
