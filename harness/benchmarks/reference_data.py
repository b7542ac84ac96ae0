"""The reference implementation's evaluation data: Open-CLEANER's parquet files, as problems.

Open-CLEANER's evaluation scripts (``recipe/cleaner/eval/*.sh``) hand verl one parquet file
per benchmark, and ``CustomRLHFDataset`` in ``recipe/cleaner/reward.py`` (lines 45-116 at
commit 91e40ad70b48320ea8db5716bb86292b4e187f4c) reads them. Its README (line 72) names the
hub dataset they come from, ``Gen-Verse/Open-AgentRL-Eval``. The layout, per that code:

* every file has a ``data_source`` column; the reference dispatches on the value of its
  first row (reward.py lines 52-65): ``AIME2024``, ``AIME2025``, ``gpqa_diamond``,
  ``LiveCodeBench_v6``;
* AIME 2024: ``Problem`` and ``Answer`` (line 73); AIME 2025: ``problem`` and ``answer``
  (line 75);
* GPQA-Diamond: ``problem`` (the question with its choices already in the text), ``solution``
  and ``domain`` (line 87). The ground truth is ``str(solution)`` (line 94), compared as it is
  with the content of the answer's last ``\\boxed{}`` (``math_dapo`` with
  ``strict_box_verify=True``, line 229): ``solution`` is the letter itself, nothing is extracted;
* LiveCodeBench: ``problem`` and ``reward_model``, a JSON string whose ``ground_truth`` holds
  the tests as ``{"inputs": [...], "outputs": [...]}`` (lines 100-105), scored on all of them
  (``code_math.compute_score``, line 227).

:func:`load_reference_parquet` reads such a file, local or on the hub, and checks it whole
before any sample runs. Prompts are rendered from ``problem`` with the run's templates (the
reference's own wording, with LiveCodeBench's tests, is a template file that
:mod:`harness.benchmarks.reference_prompts` writes from a checkout of the reference).
The loaders of :mod:`harness.benchmarks.datasets` route such a file (their ``path``) to it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.benchmarks.rows import (
    DatasetError,
    Problem,
    Row,
    aime_problem,
    build_problems,
    check_limit,
    row_field,
    row_text,
)
from harness.core.kinds import Kind
from harness.core.prompts import LETTERS, PromptTemplates, default_templates

# --------------------------------------------------------------------------- the reference's evaluation files
# The reference implementation's layout, and where in its code each rule comes from: harness.benchmarks.reference_data.
# (Its code lives here: the loaders above route reference files to load_reference_parquet.)

HF_PREFIX = "hf://"
#: ``hf://datasets/<owner>/<name>@<commit>/<path in the repository>``.
HF_URL = re.compile(r"^hf://datasets/(?P<repo>[^/@]+/[^/@]+)@(?P<revision>[^/]+)/(?P<path>.+)$")
#: The hub dataset the reference's README names for its evaluation files.
REFERENCE_HUB_REPO = "Gen-Verse/Open-AgentRL-Eval"
#: Columns holding a problem's id, where a file has one (else: ``<data_source>-<row index>``).
ID_COLUMNS = ("id", "ID", "question_id")


@dataclass(frozen=True)
class ReferenceLayout:
    """How the reference lays out one benchmark's file."""

    benchmark: str  #: the project's benchmark name
    data_source: str  #: the file's ``data_source`` value
    kind: Kind
    columns: tuple[str, ...]  #: the columns the reference reads, ``data_source`` aside


LAYOUTS: dict[str, ReferenceLayout] = {
    "aime24": ReferenceLayout("aime24", "AIME2024", "math", ("Problem", "Answer")),
    "aime25": ReferenceLayout("aime25", "AIME2025", "math", ("problem", "answer")),
    "gpqa": ReferenceLayout("gpqa", "gpqa_diamond", "gpqa", ("problem", "solution", "domain")),
    "livecodebench": ReferenceLayout("livecodebench", "LiveCodeBench_v6", "code", ("problem", "reward_model")),
}


def layouts_for(kind: str) -> tuple[ReferenceLayout, ...]:
    """The layouts a task of ``kind`` accepts: a benchmark name, or a problem kind (``math``: either AIME)."""
    if kind in LAYOUTS:
        return (LAYOUTS[kind],)
    matching = tuple(layout for layout in LAYOUTS.values() if layout.kind == kind)
    if not matching:
        choices = ", ".join([*LAYOUTS, *sorted({layout.kind for layout in LAYOUTS.values()})])
        raise ValueError(f"kind must be one of {choices}, got {kind!r}")
    return matching


def is_reference_source(source: str | os.PathLike[str]) -> bool:
    """Whether a loader's ``path`` is reference data: an ``hf://`` URL, or a parquet file with a ``data_source`` column.

    A parquet file without that column is in the upstream dataset's own schema and is read as
    such; one whose schema cannot be read is left to :func:`load_reference_parquet`, which says
    what is wrong with it.
    """
    if str(source).startswith(HF_PREFIX):
        return True
    path = Path(source).expanduser()
    if path.suffix.lower() != ".parquet" or not path.is_file():
        return False
    import pyarrow.parquet as pq

    try:
        return "data_source" in pq.read_schema(path).names
    except Exception:
        return True


def _hub_file(url: str) -> Path:
    """The local copy of an ``hf://datasets/<repo>@<commit>/<path>`` file, downloaded at that commit."""
    match = HF_URL.match(url)
    if match is None:
        raise DatasetError(
            f"{url}: not a pinned hub file; write hf://datasets/<owner>/<name>@<commit>/<path>, e.g. "
            f"hf://datasets/{REFERENCE_HUB_REPO}@<commit>/aime2024/aime_2024_problems.parquet"
        )
    repo, revision, path = match["repo"], match["revision"], match["path"]
    if not re.fullmatch(r"[0-9a-f]{40}", revision):
        raise DatasetError(
            f"{url}: revision {revision!r} is not a commit; pin the file to a full 40-hex commit of {repo} "
            "so that a score always refers to the same data"
        )
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo, path, repo_type="dataset", revision=revision))
    except Exception as exc:
        raise DatasetError(
            f"{url}: could not fetch {path} of {repo} at {revision}: {type(exc).__name__}: {exc}. "
            "Offline? Download the file and pass its local path."
        ) from exc


def _read_table(source: str | os.PathLike[str]) -> tuple[str, list[str], list[Row]]:
    """``(label, column names, rows)`` of a local or hub parquet file."""
    label = str(source)
    if label.startswith(HF_PREFIX):
        path = _hub_file(label)
    else:
        path = Path(source).expanduser()
        label = str(path)
        if not path.exists():
            raise DatasetError(f"{path}: no such file")
        if not path.is_file():
            raise DatasetError(f"{path}: not a file (pass the benchmark's .parquet file itself)")
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise DatasetError(f"{label}: not a readable parquet file ({type(exc).__name__}: {exc})") from exc
    return label, list(table.column_names), table.to_pylist()


def _layout_of(label: str, columns: list[str], rows: list[Row], kind: str) -> ReferenceLayout:
    """The file's layout, from its ``data_source`` values; every row must name the task's benchmark."""
    accepted = layouts_for(kind)
    if "data_source" not in columns:
        raise DatasetError(
            f"{label}: missing column 'data_source' (the reference's layout names each row's benchmark there); "
            f"the file has columns: {', '.join(columns) or 'none'}"
        )
    if not rows:
        raise DatasetError(f"{label}: the file has no rows")
    by_source = {layout.data_source: layout for layout in accepted}
    wanted = " or ".join(repr(s) for s in by_source)
    first = rows[0].get("data_source")
    for index, row in enumerate(rows):
        value = row.get("data_source")
        if value in by_source and value == first:
            continue
        other = next((layout.benchmark for layout in LAYOUTS.values() if layout.data_source == value), None)
        what = f"the reference's {other} data" if other else "not a benchmark of the reference's evaluation"
        if value in by_source:
            what = f"a different benchmark than row 0 ({first!r})"
        raise DatasetError(
            f"{label}: row {index}: data_source {value!r} does not match this task's benchmark "
            f"({kind}: data_source {wanted}); it is {what}"
        )
    layout = by_source[first]
    missing = [c for c in layout.columns if c not in columns]
    if missing:
        raise DatasetError(
            f"{label}: not the reference's {layout.data_source} layout: missing column(s) {', '.join(missing)}; "
            f"the file has columns: {', '.join(columns)}"
        )
    return layout


def _json_value(value: Any, where: str, what: str) -> Any:
    """``value``, JSON-decoded when it is a string."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: field {what!r} is not valid JSON ({exc.msg})") from exc


def _row_id(row: Row, layout: ReferenceLayout, index: int) -> str:
    """The row's id column (also looked up in ``extra_info``), else ``<data_source>-<row index>``."""
    extra = row.get("extra_info")
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except json.JSONDecodeError:
            extra = None
    for holder in (row, extra if isinstance(extra, dict) else {}):
        for name in ID_COLUMNS:
            value = holder.get(name)
            if value not in (None, ""):
                return str(value).strip()
    return f"{layout.data_source}-{index}"


def tests_from_ground_truth(truth: Mapping[str, Any], where: str) -> tuple[list[dict[str, str]], str | None]:
    """verl's code ground truth (``{"inputs", "outputs", "fn_name"?}``) as LiveCodeBench tests and a function name.

    Each input/output pair becomes one test (``input``, ``output``, ``testtype``), a non-string
    value as its JSON text; with a ``fn_name`` the tests are functional, else stdin tests
    (:mod:`harness.benchmarks.lcb` grades both).
    """
    inputs, outputs = truth.get("inputs"), truth.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs) or not inputs:
        raise DatasetError(f"{where}: code ground_truth needs equal non-empty lists 'inputs' and 'outputs'")
    fn_name = truth.get("fn_name") or None
    testtype = "functional" if fn_name else "stdin"
    tests = [
        {
            "input": i if isinstance(i, str) else json.dumps(i),
            "output": o if isinstance(o, str) else json.dumps(o),
            "testtype": testtype,
        }
        for i, o in zip(inputs, outputs, strict=True)
    ]
    return tests, fn_name


def _reference_math(layout: ReferenceLayout, templates: PromptTemplates) -> Callable[[str, int, Row], Problem]:
    aime = aime_problem(layout.data_source, templates)

    def make(source: str, index: int, row: Row) -> Problem:
        problem = aime(source, index, row)
        return replace(
            problem, id=_row_id(row, layout, index), metadata={**problem.metadata, "data_source": layout.data_source}
        )

    return make


def _reference_gpqa(layout: ReferenceLayout, templates: PromptTemplates) -> Callable[[str, int, Row], Problem]:
    def make(source: str, index: int, row: Row) -> Problem:
        question = row_text(row, source, index, ("problem",))
        domain = row_text(row, source, index, ("domain",))
        solution = str(row_field(row, source, index, ("solution",))).strip()
        if len(solution) != 1 or solution not in LETTERS:
            raise DatasetError(
                f"{source}: row {index}: field 'solution' must be the letter of the correct choice "
                f"(one of {', '.join(LETTERS)}; the reference compares it as it is with the boxed answer), "
                f"got {solution!r}"
            )
        pid = _row_id(row, layout, index)
        metadata = {
            "question": question,
            "record_id": pid,
            "domain": domain,
            "data_source": layout.data_source,
            "source": source,
            "row": index,
        }
        prompt = templates.render("gpqa", question, domain=domain)
        return Problem(id=pid, prompt=prompt, target=solution, kind="gpqa", metadata=metadata)

    return make


def _reference_code(layout: ReferenceLayout, templates: PromptTemplates) -> Callable[[str, int, Row], Problem]:
    def make(source: str, index: int, row: Row) -> Problem:
        where = f"{source}: row {index}"
        content = row_text(row, source, index, ("problem",))
        reward_model = _json_value(row_field(row, source, index, ("reward_model",)), where, "reward_model")
        if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
            raise DatasetError(f"{where}: field 'reward_model' must be an object with 'ground_truth'")
        truth = _json_value(reward_model["ground_truth"], where, "reward_model.ground_truth")
        if not isinstance(truth, dict):
            raise DatasetError(f"{where}: reward_model's ground_truth must be an object of tests")
        tests, fn_name = tests_from_ground_truth(truth, where)
        pid = _row_id(row, layout, index)
        metadata = {
            "question_id": pid,
            "question_content": content,
            "starter_code": "",
            "fn_name": fn_name,
            # the reference grades on every test of ground_truth (a template may show them: {test_inputs})
            "public_test_cases": "[]",
            "private_test_cases": json.dumps(tests),
            "data_source": layout.data_source,
            "source": source,
            "row": index,
        }
        prompt = templates.render("code", content, tests=(truth["inputs"], truth["outputs"]))
        return Problem(id=pid, prompt=prompt, target="", kind="code", metadata=metadata)

    return make


_REFERENCE_MAKERS: dict[Kind, Callable[[ReferenceLayout, PromptTemplates], Callable[[str, int, Row], Problem]]] = {
    "math": _reference_math,
    "gpqa": _reference_gpqa,
    "code": _reference_code,
}


def load_reference_parquet(
    source: str | os.PathLike[str],
    kind: str,
    *,
    templates: PromptTemplates | None = None,
    limit: int | None = None,
) -> list[Problem]:
    """The problems of one of the reference's evaluation files, for a task of ``kind``.

    ``source`` is a local parquet file or ``hf://datasets/<owner>/<name>@<commit>/<path>``
    (fetched through ``huggingface_hub`` at that commit). ``kind`` is the task's benchmark
    (``aime24``, ``aime25``, ``gpqa``, ``livecodebench``) or a problem kind (``math`` accepts
    either AIME file). Prompts are rendered from the ``problem`` text with ``templates``
    (``None``: the project's); GPQA's problem text already holds its choices and is used as
    it is, its target is ``solution``; LiveCodeBench's tests come from ``reward_model``.
    Problem ids are the file's id column, else ``<data_source>-<row index>``.

    Raises :class:`~harness.benchmarks.datasets.DatasetError` naming the file (and the row)
    for a missing or unreadable file, missing columns, a ``data_source`` of another benchmark,
    an empty problem or answer, or broken tests.
    """
    check_limit(limit)
    label, columns, rows = _read_table(source)
    layout = _layout_of(label, columns, rows, kind)
    chosen = default_templates() if templates is None else templates
    chosen.require([layout.kind])
    make = _REFERENCE_MAKERS[layout.kind](layout, chosen)
    return build_problems([(label, index, row) for index, row in enumerate(rows)], make, limit)
