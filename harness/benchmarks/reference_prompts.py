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

from harness.benchmarks.reference_reader import (
    DATASET_CLASS,
    REFERENCE_COMMIT,
    DataValue,
    PromptReader,
    ReferencePromptError,
    module_constants,
    subscript_keys,
)
from harness.core.kinds import KINDS
from harness.core.prompts import PromptTemplates, load_prompt_templates

#: The reference's file that builds the prompts, and its sha256 at :data:`REFERENCE_COMMIT`.
REWARD_PATH = Path("recipe/cleaner/reward.py")
REWARD_SHA256 = "ae50eeab374830c6b68bedae807cabb4807e0969fe7b16bff632f087efe27a9d"


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
    return classes[0], methods, module_constants(tree)


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
            templates[kind] = PromptReader(path, constants, method, kind, data).evaluation_template()
        origin = ", ".join(f"{kind} <- {METHODS[kind][0]}" for kind in templates)
        return ReadPrompts(templates, "evaluation prompts", origin)
    dispatch = _method(path, cls, methods, DISPATCH_METHOD, "the choice of a file's method")
    name = training_method(path, dispatch, training)
    method = _method(path, cls, methods, name, f"the training prompts of data_source {training!r}")
    reader = PromptReader(path, constants, method, f"training, first data_source {training!r}", TRAINING_DATA)
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
    return isinstance(node, ast.Assign) and any(subscript_keys(t) == MESSAGE for t in node.targets)


def _training_templates(reader: PromptReader) -> dict[str, str]:
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
