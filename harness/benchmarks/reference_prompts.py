"""The reference's prompts as a template file, read from its source without running it.

Open-CLEANER builds its prompts in ``recipe/cleaner/reward.py``, class ``CustomRLHFDataset``
(commit 91e40ad70b48320ea8db5716bb86292b4e187f4c). The project does not ship that wording;
:func:`write_templates` reads it from a checkout of that commit and writes it as a template file
of :mod:`harness.core.prompts` (what ``-T prompt_template=`` and ``python -m trainers prepare-data
--prompt-template`` take):

* **evaluation prompts** (:data:`METHODS`): each benchmark's method joins string constants (the
  module's and its own) with the row's data into ``prompt``;
* **training prompts** (``training=`` the ``data_source`` of a training file's first row): the
  reference maps a whole file with one method, chosen by that first row (:data:`DISPATCH_METHOD`,
  :func:`training_method`), which sets each row's first message from itself
  (:data:`TRAINING_METHODS`); one such method sets it differently for code rows
  (:data:`CODE_CONDITION`). Open-AgentRL-30K.parquet's first row is :data:`OPEN_AGENTRL_FIRST_SOURCE`.

The file is parsed with :mod:`ast`, never imported or run. Its identity is the sha256 of its bytes
(:data:`REWARD_SHA256`), the same for a git checkout, a plain copy or ``git show`` output: another
commit's file is refused, naming both hashes. Within it, each prompt must be the same kind of
expression as at that commit: string constants, ``+``, an f-string of the row's data, and the data
named for its method; anything else (a call, a conditional, an unknown name, a data value read from
another field, another dispatch) is refused as a changed shape, naming the file and line.
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.core.kinds import KINDS
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
    sources: tuple[tuple[str | int, ...], ...]
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


#: The method that chooses each training file's prompt method, by the data_source of the file's first row.
DISPATCH_METHOD = "_read_files_and_tokenize"
#: The methods that build training prompts: each sets the row's first message (:data:`MESSAGE`) from itself.
TRAINING_METHODS = ("map_fn2", "map_fn_skywork")
MESSAGE: tuple[str | int, ...] = ("prompt", 0, "content")
TRAINING_DATA: Mapping[str, DataValue] = {"content": DataValue("problem", (MESSAGE,))}
#: The condition under which a training method builds a code prompt (its ``else``: every other kind's).
CODE_CONDITION = '"code" in row["data_source"]'
#: The data_source of Open-AgentRL-30K.parquet's first row, which chooses the training prompts of the whole file.
OPEN_AGENTRL_FIRST_SOURCE = "math_dapo"


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
            keys = _subscript_keys(assigned)
            if not any(keys[-len(source) :] == source for source in value.sources):
                sources = " or ".join("[" + "][".join(repr(k) for k in s) + "]" for s in value.sources)
                raise self.fail(assigned, f"{node.id!r} is read from {ast.unparse(assigned)[:60]}, not {sources}")
        if node.id not in self.locals:
            raise self.fail(node, f"{node.id!r} is not read from the row in this method")
        return "{" + value.placeholder + "}", {value.placeholder}


def _subscript_keys(node: ast.expr) -> tuple[str | int, ...]:
    """The keys of a subscript chain (``a["x"][0]``: ``("x", 0)``); ``()`` for anything else."""
    keys: list[str | int] = []
    while isinstance(node, ast.Subscript):
        key = node.slice
        if not (isinstance(key, ast.Constant) and type(key.value) in (str, int)):
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


@dataclass(frozen=True)
class ReadPrompts:
    """The templates read from the reference's file, and where each came from (the written file's header)."""

    templates: dict[str, str]  #: kind -> template
    what: str  #: which prompts these are ("evaluation prompts", "training prompts")
    origin: str  #: where in the dataset class each kind was read from


def _dataset_class(path: Path, source: str) -> tuple[ast.ClassDef, dict[str, ast.FunctionDef], dict[str, ast.expr]]:
    """The dataset class of ``source`` (parsed, not run), its methods by name, and the module's constants."""
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
    return classes[0], methods, _module_constants(tree)


def _method(
    path: Path, cls: ast.ClassDef, methods: Mapping[str, ast.FunctionDef], name: str, what: str
) -> ast.FunctionDef:
    if name not in methods:
        raise ReferencePromptError(
            f"{path}:{cls.lineno}: {DATASET_CLASS} has no method {name} ({what}); the file's "
            f"shape is not that of commit {REFERENCE_COMMIT[:7]}"
        )
    return methods[name]


def read_templates(path: Path, source: str, *, training: str | None = None) -> ReadPrompts:
    """The template of each kind from the text ``source`` of ``path`` (parsed, not run).

    ``training`` None: the evaluation prompts (:data:`METHODS`). Otherwise the training prompts the
    reference gives a training file whose first row's ``data_source`` is ``training``
    (:func:`training_method`, :func:`_training_templates`).
    """
    cls, methods, constants = _dataset_class(path, source)
    if training is None:
        templates: dict[str, str] = {}
        for kind, (name, data) in METHODS.items():
            method = _method(path, cls, methods, name, f"{kind}'s prompt")
            templates[kind] = _Reader(path, constants, method, kind, data).evaluation_template()
        origin = ", ".join(f"{kind} <- {METHODS[kind][0]}" for kind in templates)
        return ReadPrompts(templates, "evaluation prompts", origin)
    dispatch = _method(path, cls, methods, DISPATCH_METHOD, "the choice of a file's method")
    name = training_method(path, dispatch, training)
    method = _method(path, cls, methods, name, f"the training prompts of data_source {training!r}")
    reader = _Reader(path, constants, method, f"training, first data_source {training!r}", TRAINING_DATA)
    templates = _training_templates(reader)
    origin = f"for a file whose first row's data_source is {training!r} ({DISPATCH_METHOD}): " + ", ".join(
        f"{kind} <- {name}" for kind in templates
    )
    return ReadPrompts(templates, "training prompts", origin)


# --------------------------------------------------------------------------- the training prompts


def _data_sources(test: ast.expr) -> frozenset[str] | None:
    """The data sources a dispatch condition names (``data_source in [...]``, ``data_source == "x"``), else None."""
    if not (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "data_source"
        and len(test.ops) == 1
    ):
        return None
    (op,), (right,) = test.ops, test.comparators
    if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
        return frozenset({right.value})
    if isinstance(op, ast.In) and isinstance(right, ast.List | ast.Tuple | ast.Set):
        values = [e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(values) == len(right.elts):
            return frozenset(values)
    return None


def _mapped_method(path: Path, dispatch: ast.FunctionDef, branch: list[ast.stmt], at: ast.AST) -> str:
    """The method a dispatch branch maps its file with (``dataframe.map(self.NAME, ...)``)."""
    names = [
        node.args[0].attr
        for stmt in branch
        for node in ast.walk(stmt)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "map"
        and node.args
        and isinstance(node.args[0], ast.Attribute)
        and isinstance(node.args[0].value, ast.Name)
        and node.args[0].value.id == "self"
    ]
    if len(names) != 1:
        raise ReferencePromptError(
            f"{path}:{getattr(at, 'lineno', dispatch.lineno)}: {DATASET_CLASS}.{dispatch.name}: expected one "
            f"dataframe.map(self.<method>) in this branch, found {len(names)}; the file's shape is not that of "
            f"commit {REFERENCE_COMMIT[:7]}"
        )
    return names[0]


def training_method(path: Path, dispatch: ast.FunctionDef, first_source: str) -> str:
    """The training method the reference maps a file with whose first row's ``data_source`` is ``first_source``.

    The reference chooses one method per file, by the ``data_source`` of its first row
    (:data:`DISPATCH_METHOD`: an ``if``/``elif`` chain on ``data_source`` ending in an ``else``),
    and applies it to every row of that file. A source the chain gives an evaluation method is refused.
    """

    def fail(node: ast.AST, what: str) -> ReferencePromptError:
        return ReferencePromptError(
            f"{path}:{getattr(node, 'lineno', dispatch.lineno)}: {DATASET_CLASS}.{dispatch.name}: {what}; the "
            f"file's shape is not that of commit {REFERENCE_COMMIT[:7]}"
        )

    chain = [n for n in ast.walk(dispatch) if isinstance(n, ast.If) and _data_sources(n.test) is not None]
    if not chain:
        raise fail(dispatch, "no if/elif chain on data_source")
    node, chosen = chain[0], None
    while True:
        sources = _data_sources(node.test)
        if sources is None:
            raise fail(node, f"a branch on {ast.unparse(node.test)[:60]}, not on data_source")
        if chosen is None and first_source in sources:
            chosen = _mapped_method(path, dispatch, node.body, node)
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
            continue
        if not node.orelse:
            raise fail(node, "the chain on data_source has no else")
        if chosen is None:
            chosen = _mapped_method(path, dispatch, node.orelse, node.orelse[0])
        break
    evaluation = {name: kind for kind, (name, _) in METHODS.items()}
    if chosen in evaluation:
        raise ReferencePromptError(
            f"{path}: data_source {first_source!r} is mapped with {chosen}, the reference's evaluation prompt of "
            f"{evaluation[chosen]}, not a training prompt; write the evaluation prompts without --training"
        )
    if chosen not in TRAINING_METHODS:
        raise fail(dispatch, f"data_source {first_source!r} is mapped with {chosen}, which this reader does not know")
    return chosen


def _sets_message(node: ast.AST) -> bool:
    return isinstance(node, ast.Assign) and any(_subscript_keys(t) == MESSAGE for t in node.targets)


def _training_templates(reader: _Reader) -> dict[str, str]:
    """The template of each kind of a training method: the value it sets the row's first message to.

    A method that sets it once, unconditionally, gives every kind that template; one that sets it
    on each side of ``if`` :data:`CODE_CONDITION` gives ``code`` its ``if`` side and the other
    kinds its ``else`` side.
    """
    method = reader.method
    sets = [node for node in ast.walk(method) if _sets_message(node)]
    top = [stmt for stmt in method.body if _sets_message(stmt)]
    if len(sets) == 1 and len(top) == 1:
        template = reader.template(top[0].value)  # type: ignore[attr-defined]
        return {kind: template for kind in KINDS}
    branches = [stmt for stmt in method.body if isinstance(stmt, ast.If) and any(map(_sets_message, ast.walk(stmt)))]
    shape = f"expected the row's message set once, or once on each side of `if {CODE_CONDITION}`"
    if top or len(branches) != 1 or len(sets) != 2:
        raise reader.fail(method, f"{shape}; it is set {len(sets)} times")
    branch = branches[0]
    if ast.dump(branch.test) != ast.dump(ast.parse(CODE_CONDITION, mode="eval").body):
        raise reader.fail(branch, f"the message is chosen by `{ast.unparse(branch.test)[:60]}`; {shape}")
    code = [stmt for stmt in branch.body if _sets_message(stmt)]
    other = [stmt for stmt in branch.orelse if _sets_message(stmt)]
    if len(code) != 1 or len(other) != 1:
        raise reader.fail(branch, shape)
    code_template = reader.template(code[0].value)  # type: ignore[attr-defined]
    other_template = reader.template(other[0].value)  # type: ignore[attr-defined]
    return {kind: code_template if kind == "code" else other_template for kind in KINDS}


# --------------------------------------------------------------------------- the file


def templates_from_reference(
    checkout: str | os.PathLike[str], *, pinned: str | None = None, training: str | None = None
) -> tuple[Path, ReadPrompts]:
    """The reference's ``reward.py`` in ``checkout`` and the templates read from it (:func:`read_templates`).

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
    return path, read_templates(path, source, training=training)


def render_file(read: ReadPrompts, sha256: str = REWARD_SHA256) -> str:
    """The template file's text: a header naming where it came from, then one template per kind (YAML).

    The same templates give the same bytes wherever the checkout lies, so a log's ``prompt_template``
    sha256 identifies them.
    """
    import yaml

    header = (
        f"# Open-CLEANER's {read.what}, read from {REWARD_PATH} (sha256 {sha256[:16]}...)\n"
        f"# at commit {REFERENCE_COMMIT}, {DATASET_CLASS}: {read.origin}.\n"
        "# Written by `python -m harness prompts from-reference`. The wording is Open-CLEANER's, not this project's:\n"
        '# keep the file out of the repository. Placeholders: docs/benchmarks.md, "Prompts".\n'
    )

    class Dumper(yaml.SafeDumper):
        """Every template double-quoted on one line: exact whatever its spaces and line breaks."""

    def quoted(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"' if "\n" in text else None)

    Dumper.add_representer(str, quoted)
    body = yaml.dump(dict(read.templates), Dumper=Dumper, sort_keys=False, allow_unicode=True, width=2**31 - 1)
    return header + body


def write_templates(
    checkout: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    pinned: str | None = None,
    training: str | None = None,
) -> PromptTemplates:
    """Write the reference's templates read from ``checkout`` to ``out``; the file loaded back and checked.

    ``training`` None: the evaluation prompts; else the training prompts of a file whose first
    row's ``data_source`` it is (:func:`read_templates`).
    """
    path, read = templates_from_reference(checkout, pinned=pinned, training=training)
    target = Path(out).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_file(read, pinned or REWARD_SHA256), encoding="utf-8")
    loaded = load_prompt_templates(target)
    if dict(loaded.templates) != read.templates:  # the YAML must give back exactly what was read
        raise ReferencePromptError(f"{target}: the written file does not read back as the templates read from {path}")
    return loaded
