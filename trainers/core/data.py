"""Training data: Open-AgentRL-30K (the reference's RL set) and the project's small set.

Open-AgentRL-30K (hub id ``Gen-Verse/Open-AgentRL-30K``) is one parquet file in
verl's RL layout, one row per problem:

* ``data_source``: where the problem comes from (``math_dapo``, ``mega-science``, code
  sources whose name contains ``code``, ...);
* ``prompt``: a chat, a list of ``{"role", "content"}`` whose user message is the problem;
* ``ability``: a domain label (``MATH``, ...);
* ``reward_model``: ``{"ground_truth": ..., "style": "rule"}``, the answer string for
  math and choice problems, and for code a JSON object of tests
  (``{"inputs": [...], "outputs": [...], "fn_name"?: ...}``), sometimes as a string;
* ``extra_info``: ``{"index": ...}`` and more.

:func:`load_open_agentrl` reads it from the hub or from a local parquet / JSONL file or
directory and turns each row into a :class:`Problem`, its prompt rendered with a
:class:`~harness.core.prompts.PromptTemplates` (the project's by default; ``python -m trainers
prepare-data --prompt-template FILE`` passes a user's file, such as the reference's training
prompts written by ``python -m harness prompts from-reference --training``).
:func:`export_openrlhf` writes items as the JSONL OpenRLHF reads (``--data.input_key prompt
--data.label_key label``): the label carries everything the agent executor needs to score a
trajectory.

:func:`bignum_items` is the small set written for the CPU trainer and the tests:
arithmetic on big numbers, which a 135M model gets wrong by hand and can get right
by calling the python tool (``trainers/data/bignum.jsonl`` holds it).

:func:`generated_items` turns problems of the project's generators
(:mod:`harness.benchmarks.generators`: big numbers, modular arithmetic, counting, AIME-style
computations, stdin programs) into training items. The RL set the CPU recipes train on,
``trainers/data/tools-rl.jsonl``, is drawn with :data:`RL_SEED`, a seed that neither the
warm model's SFT (seeds from 0) nor its held-out measurement (seeds from 1000) uses.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.benchmarks.datasets import DatasetError, tests_from_ground_truth
from harness.benchmarks.problem import Problem
from harness.core import prompts
from harness.core.kinds import Kind
from harness.core.prompts import PromptTemplateError, PromptTemplates

HUB_ID = "Gen-Verse/Open-AgentRL-30K"
DATA_DIR = Path(__file__).parents[1] / "data"
RL_PATH = DATA_DIR / "tools-rl.jsonl"
RL_SEED = 2000  #: seed of the CPU RL set (the warm SFT draws from 0, its held-out measurement from 1000)
RL_SIZE = 64


class DataError(ValueError):
    """A training record is malformed; the message names the source and the record."""


#: The fields of a label, in the order it is written (a problem's ``metadata`` stays out of it).
LABEL_FIELDS: tuple[str, ...] = ("id", "prompt", "target", "kind", "tests", "fn_name", "source")


def checked(problem: Problem) -> Problem:
    """``problem`` if it can be trained on (a code problem has tests, any other a target), else a :class:`DataError`."""
    if problem.kind == "code" and not problem.tests:
        raise DataError(f"item {problem.id!r}: a code item needs at least one test")
    if problem.kind != "code" and not str(problem.target).strip():
        raise DataError(f"item {problem.id!r}: a {problem.kind} item needs a non-empty target")
    return problem


def label(problem: Problem) -> str:
    """The problem as a JSON label string (what OpenRLHF hands the executor back): :data:`LABEL_FIELDS`."""
    return json.dumps({name: getattr(problem, name) for name in LABEL_FIELDS}, ensure_ascii=False)


def from_label(text: str | dict[str, Any]) -> Problem:
    """Parse a label written by :func:`label` (or the same fields as a dict); a :class:`DataError` saying what is
    wrong."""
    try:
        data = json.loads(text) if isinstance(text, str) else dict(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"label is not JSON ({exc.msg}); write labels with trainers.core.data.label()") from exc
    if not isinstance(data, dict) or "id" not in data or "prompt" not in data:
        raise DataError("label must be a JSON object with at least 'id' and 'prompt'")
    unknown = set(data) - set(LABEL_FIELDS)
    if unknown:
        raise DataError(f"label of item {data['id']!r} has unknown fields {sorted(unknown)}")
    try:
        problem = Problem(**data)
    except ValueError as exc:
        raise DataError(str(exc)) from exc
    return checked(problem)


# --------------------------------------------------------------------------- Open-AgentRL-30K

_CHOICE = re.compile(r"(^|\n)\s*\(?[A-D][).:]\s", re.MULTILINE)
#: Appended to the math prompt of a choice question (the training set's choices are in its text).
CHOICE_INSTRUCTION = "\nPut only the letter of your choice in the box."


def _plain(obj: Any) -> Any:
    """numpy / arrow values from parquet as plain Python."""
    if hasattr(obj, "tolist"):
        return _plain(obj.tolist())
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj


def _json_or(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def choice_prompt(templates: PromptTemplates, question: str, where: str) -> str:
    """The prompt of a choice question of the training set (a letter answer, its choices in its text).

    The file's ``gpqa`` template renders it (a training file of the reference's prompts has one:
    ``python -m harness prompts from-reference --training``). The project's file, and a file
    without a ``gpqa`` template, render it with ``math`` followed by :data:`CHOICE_INSTRUCTION`
    (the project's ``gpqa`` template is its evaluation's).
    """
    if "gpqa" not in templates.templates or templates.templates == prompts.default_templates().templates:
        return templates.render("math", question) + CHOICE_INSTRUCTION
    try:
        return templates.render("gpqa", question)
    except PromptTemplateError as exc:
        raise DataError(
            f"{where}: a choice question of the training set: {exc} (a training file of the reference's prompts: "
            "python -m harness prompts from-reference --training)"
        ) from exc


def item_from_row(
    row: dict[str, Any], index: int, source: str = HUB_ID, *, templates: PromptTemplates | None = None
) -> Problem:
    """One Open-AgentRL-30K row as a :class:`Problem` (raises :class:`DataError` saying what is wrong).

    The prompt is rendered with ``templates`` (``None``: the project's): code with the ``code``
    template, math with ``math``, and a choice question as :func:`choice_prompt` says.
    """
    templates = prompts.default_templates() if templates is None else templates
    row = _plain(row)
    where = f"{source} row {index}"
    chat = _json_or(row.get("prompt"))
    if isinstance(chat, list):
        users = [m.get("content", "") for m in chat if isinstance(m, dict) and m.get("role") == "user"]
        question = users[-1] if users else ""
    else:
        question = chat if isinstance(chat, str) else ""
    if not question.strip():
        raise DataError(f"{where}: 'prompt' holds no user message")
    rm = _json_or(row.get("reward_model"))
    if not isinstance(rm, dict) or "ground_truth" not in rm:
        raise DataError(f"{where}: 'reward_model' must be a mapping with 'ground_truth'")
    truth = _json_or(rm["ground_truth"])
    data_source = str(row.get("data_source", ""))
    extra = _json_or(row.get("extra_info")) or {}
    item_id = f"{data_source or 'row'}-{extra.get('index', index) if isinstance(extra, dict) else index}"
    if "code" in data_source.lower() or (isinstance(truth, dict) and "inputs" in truth):
        if not isinstance(truth, dict):
            raise DataError(f"{where}: code ground_truth must be a JSON object of tests")
        try:
            tests, fn_name = tests_from_ground_truth(truth, where)
        except DatasetError as exc:
            raise DataError(str(exc)) from exc
        prompt = templates.render("code", question, tests=(truth["inputs"], truth["outputs"]))
        return checked(Problem(item_id, prompt, "", "code", tests, fn_name, data_source))
    target = str(truth).strip()
    if re.fullmatch(r"[A-D]", target) and _CHOICE.search(question):
        return checked(Problem(item_id, choice_prompt(templates, question, where), target, "gpqa", source=data_source))
    return checked(Problem(item_id, templates.render("math", question), target, "math", source=data_source))


def _read_rows(path: Path) -> Iterable[dict[str, Any]]:
    if path.is_dir():
        files = sorted([*path.glob("*.parquet"), *path.glob("*.jsonl")])
        if not files:
            raise DataError(f"{path}: the directory holds no .parquet or .jsonl file")
        for f in files:
            yield from _read_rows(f)
        return
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise DataError(f"{path}:{n}: not JSON ({exc.msg})") from exc
        return
    if path.suffix == ".parquet":
        import datasets  # noqa: PLC0415

        yield from datasets.load_dataset("parquet", data_files=str(path), split="train")
        return
    raise DataError(f"{path}: expected a .parquet or .jsonl file or a directory of them")


def load_open_agentrl(
    source: str | Path = HUB_ID,
    *,
    limit: int | None = None,
    kinds: Sequence[Kind] | None = None,
    templates: PromptTemplates | None = None,
) -> list[Problem]:
    """Open-AgentRL-30K as training items, from the hub id or a local file or directory.

    Prompts are rendered with ``templates`` (``None``: the project's); rows of the project's own
    JSONL (:func:`label` fields) keep the prompts they were written with.
    """
    path = Path(source)
    if path.exists():
        rows: Iterable[dict[str, Any]] = _read_rows(path)
    elif str(source) == HUB_ID or "/" in str(source) and not str(source).startswith((".", "/")):
        import datasets  # noqa: PLC0415

        rows = datasets.load_dataset(str(source), split="train")
    else:
        raise DataError(f"training data {source}: no such file or directory, and not a hub dataset id")
    items: list[Problem] = []
    for i, row in enumerate(rows):
        if row.get("id") is not None and row.get("kind") is not None:  # our own JSONL (label fields)
            item = from_label(row)
        else:
            item = item_from_row(row, i, str(source), templates=templates)
        if kinds is None or item.kind in kinds:
            items.append(item)
        if limit is not None and len(items) >= limit:
            break
    return items


def load_items(path: str | Path) -> list[Problem]:
    """Items from a JSONL file of :func:`label` fields (e.g. ``trainers/data/bignum.jsonl``)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"training data {path} does not exist")
    items = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                items.append(from_label(line))
            except DataError as exc:
                raise DataError(f"{path}:{n}: {exc}") from exc
    return items


def export_openrlhf(items: Iterable[Problem], path: str | Path) -> Path:
    """Write items as OpenRLHF prompt data: ``{"prompt": <user text>, "label": <the problem's label>}`` per line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps({"prompt": item.prompt, "label": label(item)}, ensure_ascii=False) + "\n")
    return path


# --------------------------------------------------------------------------- the small set


def bignum_items(n: int = 48, seed: int = 1234) -> list[Problem]:
    """Arithmetic on big numbers: exact answers that the python tool makes easy."""
    rng = random.Random(seed)
    items: list[Problem] = []
    makers = [
        lambda a, b: (f"What is {a} * {b}?", a * b),
        lambda a, b: (f"What is {a} + {b}?", a + b),
        lambda a, b: (f"What is {a} - {b}?", a - b),
        lambda a, b: (f"What is the remainder when {a} is divided by {b % 9973 + 7}?", a % (b % 9973 + 7)),
        lambda a, b: (f"What is the sum of the digits of {a} * {b}?", sum(int(d) for d in str(a * b))),
        lambda a, b: (f"What is {a % 50 + 2} to the power {b % 25 + 10}?", (a % 50 + 2) ** (b % 25 + 10)),
    ]
    for i in range(n):
        a = rng.randrange(10**8, 10**12)
        b = rng.randrange(10**6, 10**10)
        question, answer = makers[i % len(makers)](a, b)
        items.append(Problem(f"bignum-{i:03d}", prompts.math_prompt(question), str(answer), "math", source="bignum"))
    return items


# --------------------------------------------------------------------------- generated problems


def generated_items(n: int = RL_SIZE, seed: int = RL_SEED, prefix: str = "rl") -> list[Problem]:
    """``n`` problems of :func:`harness.benchmarks.generators.generate` (every kind, equal weights) as training items.

    Math kinds keep their integer answer as the target (strict boxed reward); stdin
    programs become code items graded by their tests (reward: the fraction passed).
    """
    from harness.benchmarks.generators import generate  # noqa: PLC0415

    return generate(n, seed=seed, prefix=prefix)


def write_generated(path: str | Path = RL_PATH, n: int = RL_SIZE, seed: int = RL_SEED) -> Path:
    """Write :func:`generated_items` as JSONL (``trainers/data/tools-rl.jsonl`` with the defaults)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(label(item) + "\n" for item in generated_items(n, seed)), encoding="utf-8")
    return path
