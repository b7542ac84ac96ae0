"""Loaders of the benchmarks: AIME 2024, AIME 2025, GPQA-Diamond, LiveCodeBench.

Each benchmark is registered once, with its loader and fixture, in :mod:`harness.benchmarks.registry`
(which also loads one by name: :func:`harness.benchmarks.registry.load`). Each loader returns a list of
:class:`Problem` and takes ``path``:

- ``None``: the real dataset from the Hugging Face hub, at a PINNED revision (the
  ``*_REVISION`` constants below), so that a score always refers to the same data;
- ``"fixture"``: the project's own small fixture in ``harness/data/`` (the ``*_FIXTURE``
  constants; same schema as upstream, problems written by the project; the GPQA fixture is invented);
- a local file (``.jsonl``, ``.json``, ``.csv``, ``.parquet``) or a directory holding
  one, for offline machines that already have the data;
- a file of the reference implementation's evaluation data (a ``.parquet`` file with a
  ``data_source`` column, or an ``hf://datasets/<owner>/<name>@<commit>/<path>`` URL), read by
  :func:`load_reference_parquet` (the layout is documented in :mod:`harness.benchmarks.reference_data`,
  which exports it; the code is here so that the loaders reach it without an import circle).

Each loader also takes ``templates``, the :class:`~harness.core.prompts.PromptTemplates` its
prompts are rendered with (``None``: the project's).

A broken row raises :class:`DatasetError` naming the file, the row and the field;
nothing is silently dropped. Plain Python on purpose: the Inspect tasks and the
training plugin build on these functions.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from harness.benchmarks.lcb import fn_name_of, parse_tests
from harness.core.problems import Kind
from harness.core.prompts import LETTERS, PromptTemplates, default_templates, gpqa_problem, shuffle_choices

# Pinned sources. The revisions are commits of the hub repositories, gathered from public
# references without hub access from this machine: someone with internet access must check
# them (see docs/benchmarks.md) before a published run.
AIME24_REPO = "Maxwell-Jia/AIME_2024"
AIME24_REVISION = "8d88b2876a82a080e2f172cc9b25d0d9d2cb4792"
AIME24_SPLIT = "train"

AIME25_REPO = "math-ai/aime25"
AIME25_REVISION = "563bb8404243c5f09de6ec262f2db674fe5bce9b"
AIME25_SPLIT = "test"

GPQA_REPO = "Idavidrein/gpqa"
GPQA_CONFIG = "gpqa_diamond"
GPQA_REVISION = "83022cefff930aea54f654c0b282e74b9eeda5c6"
GPQA_SPLIT = "train"
#: sha256 of the public GPQA-Diamond CSV (openaipublic.blob.core.windows.net/simple-evals/gpqa_diamond.csv).
GPQA_DIAMOND_CSV_SHA256 = "41d1213cd7a4998605a26c2798500652572007161b3a92817ba46b35befcd305"

LCB_REPO = "livecodebench/code_generation_lite"
LCB_REVISION = "48d36ed304dca42cf8ab20e941262ccd096518a3"
#: The JSONL files of each release of code_generation_lite (releases are cumulative).
LCB_RELEASE_FILES: dict[str, tuple[str, ...]] = {
    "release_v1": ("test.jsonl",),
    "release_v2": ("test.jsonl", "test2.jsonl"),
    "release_v3": ("test.jsonl", "test2.jsonl", "test3.jsonl"),
    "release_v4": ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl"),
    "release_v5": ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl"),
    "release_v6": ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl", "test6.jsonl"),
    "v1": ("test.jsonl",),
    "v2": ("test2.jsonl",),
    "v3": ("test3.jsonl",),
    "v4": ("test4.jsonl",),
    "v5": ("test5.jsonl",),
    "v6": ("test6.jsonl",),
}

#: The ``path`` that loads the project's fixture of a benchmark.
FIXTURE = "fixture"
DATA_DIR = Path(__file__).parents[1] / "data"
AIME24_FIXTURE = DATA_DIR / "aime24_fixture.jsonl"
AIME25_FIXTURE = DATA_DIR / "aime25_fixture.jsonl"
GPQA_FIXTURE = DATA_DIR / "gpqa_diamond_fixture.csv"
LCB_FIXTURE = DATA_DIR / "livecodebench_fixture.jsonl"

_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


@dataclass(frozen=True)
class Problem:
    """One benchmark problem, ready to prompt and to score.

    ``prompt`` is the complete user message. ``target`` is what the scorer compares
    with: the answer for math, the letter after shuffling for GPQA, empty for code
    (code is graded on the tests in ``metadata``, see :func:`harness.benchmarks.lcb.problem_tests`).
    """

    id: str
    prompt: str
    target: str
    kind: Kind
    metadata: dict[str, Any] = field(default_factory=dict)


class DatasetError(ValueError):
    """A dataset could not be loaded, or one of its rows is broken."""


class GatedDatasetError(DatasetError):
    """A gated hub dataset was requested without access to it."""


Row = dict[str, Any]


# --------------------------------------------------------------------------- reading


def _read_file(path: Path) -> list[Row]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = []
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{path}: line {number} is not valid JSON ({exc.msg})") from exc
        return rows
    if suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise DatasetError(f"{path}: expected a JSON list of rows")
        return data
    if suffix == ".csv":
        with path.open(encoding="utf-8-sig", newline="") as f:
            return list(csv.DictReader(f))
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    raise DatasetError(f"{path}: unsupported file type {suffix!r}; use one of {', '.join(_SUFFIXES)}")


def _data_files(directory: Path, preferred: Iterable[str] = ()) -> list[Path]:
    """The data files of a directory: the preferred names if present, else every data file."""
    wanted = [directory / name for name in preferred if (directory / name).is_file()]
    if wanted:
        return wanted
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix.lower() in _SUFFIXES)
    files = [p for p in files if not any(part.startswith(".") for part in p.relative_to(directory).parts)]
    if not files:
        raise DatasetError(f"{directory}: no data file ({', '.join(_SUFFIXES)}) in this directory")
    return files


def _read_local(path: str | os.PathLike[str], preferred: Iterable[str] = ()) -> list[tuple[str, int, Row]]:
    """Rows of a local file or directory, each with its file name and row index."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DatasetError(f"{p}: no such file or directory")
    files = _data_files(p, preferred) if p.is_dir() else [p]
    rows: list[tuple[str, int, Row]] = []
    for f in files:
        rows.extend((str(f), i, row) for i, row in enumerate(_read_file(f)))
    return rows


def _load_hub(repo: str, revision: str, split: str, name: str | None = None) -> list[tuple[str, int, Row]]:
    """Rows of a hub dataset at a pinned revision (through ``datasets.load_dataset``)."""
    import datasets

    source = f"{repo}{'/' + name if name else ''}@{revision[:12]}"
    try:
        data = datasets.load_dataset(repo, name, split=split, revision=revision)
    except Exception as exc:
        raise DatasetError(
            f"could not load {repo} ({name or 'default'}, split {split}) at revision {revision} from the "
            f"Hugging Face hub: {type(exc).__name__}: {exc}. Offline? Pass path= a local copy of the data."
        ) from exc
    return [(source, i, dict(row)) for i, row in enumerate(data)]


def _check_limit(limit: int | None) -> None:
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative integer or None, got {limit!r}")


def _templates(templates: PromptTemplates | None, kind: Kind) -> PromptTemplates:
    """``templates`` (or the project's), checked to hold the template of ``kind``."""
    chosen = default_templates() if templates is None else templates
    chosen.require([kind])
    return chosen


def _reference(
    benchmark: str, path: str | os.PathLike[str] | None, templates: PromptTemplates | None, limit: int | None
) -> list[Problem] | None:
    """The problems of a reference-layout file (see the module docstring), or None for any other ``path``."""
    if path is None or not is_reference_source(path):
        return None
    return load_reference_parquet(path, benchmark, templates=templates, limit=limit)


def _field(row: Row, source: str, index: int, names: tuple[str, ...], *, allow_empty: bool = False) -> Any:
    """The first present field of ``names``; a clear error naming the row when none is."""
    if not isinstance(row, dict):
        raise DatasetError(f"{source}: row {index}: expected an object, got {type(row).__name__}")
    for name in names:
        value = row.get(name)
        if value is None:
            continue
        if isinstance(value, str) and not value.strip() and not allow_empty:
            raise DatasetError(f"{source}: row {index}: field {name!r} is empty")
        return value
    raise DatasetError(f"{source}: row {index}: missing field {' or '.join(repr(n) for n in names)}")


def _text(row: Row, source: str, index: int, names: tuple[str, ...], *, allow_empty: bool = False) -> str:
    value = _field(row, source, index, names, allow_empty=allow_empty)
    if not isinstance(value, str):
        raise DatasetError(f"{source}: row {index}: field {names[0]!r} must be text, got {type(value).__name__}")
    return value


def _build(
    rows: list[tuple[str, int, Row]], make: Callable[[str, int, Row], Problem], limit: int | None
) -> list[Problem]:
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for source, index, row in rows:
        problem = make(source, index, row)
        if problem.id in seen:
            raise DatasetError(f"{source}: row {index}: duplicate id {problem.id!r} (also in {seen[problem.id]})")
        seen[problem.id] = f"{source} row {index}"
        problems.append(problem)
    return problems if limit is None else problems[:limit]


# --------------------------------------------------------------------------- AIME


def _aime_problem(prefix: str, templates: PromptTemplates) -> Callable[[str, int, Row], Problem]:
    """AIME rows (``Problem``/``problem``/``question`` and ``Answer``/``answer``) as math problems."""

    def make(source: str, index: int, row: Row) -> Problem:
        problem = _text(row, source, index, ("Problem", "problem", "question"))
        answer = _field(row, source, index, ("Answer", "answer"))
        if isinstance(answer, bool) or not isinstance(answer, (int, str)):
            raise DatasetError(f"{source}: row {index}: field 'Answer' must be an integer, got {answer!r}")
        target = str(answer).strip()
        if not re.fullmatch(r"\d{1,3}", target):
            raise DatasetError(f"{source}: row {index}: field 'Answer' must be an AIME answer 0-999, got {answer!r}")
        raw_id = row.get("ID", row.get("id"))
        pid = str(raw_id) if raw_id not in (None, "") else f"{prefix}-{index}"
        solution = row.get("Solution", row.get("solution"))
        metadata = {"problem": problem, "source": source, "row": index, "answer_int": int(target)}
        if solution:
            metadata["solution"] = solution
        prompt = templates.render("math", problem)
        return Problem(id=pid, prompt=prompt, target=target, kind="math", metadata=metadata)

    return make


def _load_aime(
    name: str,
    repo: str,
    revision: str,
    split: str,
    fixture: Path,
    path: str | os.PathLike[str] | None,
    limit: int | None,
    templates: PromptTemplates | None,
) -> list[Problem]:
    _check_limit(limit)
    chosen = _templates(templates, "math")
    reference = _reference(name, path, chosen, limit)
    if reference is not None:
        return reference
    if path is None:
        rows = _load_hub(repo, revision, split)
    else:
        rows = _read_local(fixture if str(path) == FIXTURE else path)
    return _build(rows, _aime_problem(name, chosen), limit)


def load_aime24(
    path: str | os.PathLike[str] | None = None, limit: int | None = None, *, templates: PromptTemplates | None = None
) -> list[Problem]:
    """AIME 2024 (30 problems; Maxwell-Jia/AIME_2024 schema: ID, Problem, Solution, Answer)."""
    return _load_aime("aime24", AIME24_REPO, AIME24_REVISION, AIME24_SPLIT, AIME24_FIXTURE, path, limit, templates)


def load_aime25(
    path: str | os.PathLike[str] | None = None, limit: int | None = None, *, templates: PromptTemplates | None = None
) -> list[Problem]:
    """AIME 2025 (30 problems; math-ai/aime25 schema: problem, answer, id)."""
    return _load_aime("aime25", AIME25_REPO, AIME25_REVISION, AIME25_SPLIT, AIME25_FIXTURE, path, limit, templates)


# --------------------------------------------------------------------------- GPQA


def _has_hf_token() -> bool:
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return True
    try:
        from huggingface_hub import get_token

        return get_token() is not None
    except Exception:
        return False


def _gpqa_hub_rows() -> list[tuple[str, int, Row]]:
    how = (
        "GPQA is a gated dataset: accept its terms on https://huggingface.co/datasets/Idavidrein/gpqa "
        "while logged in, create an access token (https://huggingface.co/settings/tokens) and set "
        "HF_TOKEN=<token>; or pass path= the public gpqa_diamond.csv (checked by sha256)"
    )
    try:
        return _load_hub(GPQA_REPO, GPQA_REVISION, GPQA_SPLIT, GPQA_CONFIG)
    except DatasetError as exc:
        cause = exc.__cause__
        gated = type(cause).__name__ in ("GatedRepoError", "DatasetNotFoundError") or "gated" in str(cause).lower()
        if gated or not _has_hf_token():
            token_note = "" if _has_hf_token() else " (no Hugging Face token is set)"
            raise GatedDatasetError(f"cannot load GPQA-Diamond{token_note}: {how}. Cause: {cause}") from cause
        raise


def sha256_of(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _gpqa_problem(seed: int, templates: PromptTemplates) -> Callable[[str, int, Row], Problem]:
    def make(source: str, index: int, row: Row) -> Problem:
        question = _text(row, source, index, ("Question",))
        correct = _text(row, source, index, ("Correct Answer",)).strip()
        incorrect = [_text(row, source, index, (f"Incorrect Answer {k}",)).strip() for k in (1, 2, 3)]
        raw_id = row.get("Record ID")
        pid = str(raw_id).strip() if raw_id not in (None, "") else f"gpqa-{index}"
        choices, letter = shuffle_choices(correct, incorrect, seed=seed, sample_id=pid)
        domain = row.get("High-level domain")
        metadata = {
            "question": question,
            "choices": choices,
            "correct_answer": correct,
            "record_id": pid,
            "domain": domain,
            "subdomain": row.get("Subdomain"),
            "seed": seed,
            "source": source,
            "row": index,
        }
        prompt = templates.render("gpqa", gpqa_problem(question, choices), domain=str(domain or ""))
        return Problem(id=pid, prompt=prompt, target=letter, kind="gpqa", metadata=metadata)

    return make


def load_gpqa(
    path: str | os.PathLike[str] | None = None,
    limit: int | None = None,
    seed: int = 0,
    sha256: str | None = GPQA_DIAMOND_CSV_SHA256,
    *,
    templates: PromptTemplates | None = None,
) -> list[Problem]:
    """GPQA-Diamond (198 questions) with choices shuffled per sample, stable across runs.

    The shuffle of each question depends only on ``seed`` and its ``Record ID``; the
    target is the letter under which the correct answer landed. A local file (or the
    ``gpqa_diamond.csv`` of a directory) must have the sha256 ``sha256`` (by default that
    of the public CSV); pass ``sha256=None`` to accept another copy knowingly. A reference-layout
    file is read as it is: its questions hold their choices, so ``seed`` and ``sha256`` do not apply.
    """
    _check_limit(limit)
    chosen = _templates(templates, "gpqa")
    reference = _reference("gpqa", path, chosen, limit)
    if reference is not None:
        return reference
    if path is None:
        rows = _gpqa_hub_rows()
    elif str(path) == FIXTURE:
        rows = _read_local(GPQA_FIXTURE)
    else:
        p = Path(path).expanduser()
        if p.is_dir():
            files = _data_files(p, ("gpqa_diamond.csv",))
            if len(files) != 1:
                raise DatasetError(f"{p}: expected gpqa_diamond.csv or a single data file, found {len(files)}")
            p = files[0]
        if not p.exists():
            raise DatasetError(f"{p}: no such file or directory")
        if sha256 is not None:
            actual = sha256_of(p)
            if actual != sha256.lower():
                raise DatasetError(
                    f"{p}: sha256 {actual} is not the expected {sha256} of the GPQA-Diamond CSV; "
                    "use the public file, or pass sha256=None to accept this copy knowingly"
                )
        rows = _read_local(p)
    return _build(rows, _gpqa_problem(seed, chosen), limit)


# --------------------------------------------------------------------------- LiveCodeBench


def _parse_day(value: str, what: str) -> date:
    try:
        return date.fromisoformat(str(value)[:10])
    except ValueError as exc:
        raise ValueError(f"{what} must be a date YYYY-MM-DD, got {value!r}") from exc


def _lcb_problem(source: str, index: int, row: Row, templates: PromptTemplates) -> Problem:
    qid = str(_field(row, source, index, ("question_id",)))
    content = _text(row, source, index, ("question_content",))
    starter = _text(row, source, index, ("starter_code",), allow_empty=True) if "starter_code" in row else ""
    contest_date = _text(row, source, index, ("contest_date",))
    try:
        day = date.fromisoformat(contest_date[:10])
    except ValueError as exc:
        raise DatasetError(f"{source}: row {index}: field 'contest_date' is not an ISO date: {contest_date!r}") from exc
    public = _text(row, source, index, ("public_test_cases",), allow_empty=True)
    try:
        parse_tests(public, where="public_test_cases")
    except ValueError as exc:
        raise DatasetError(f"{source}: row {index}: field {exc}") from exc
    private = row.get("private_test_cases", "")
    if not isinstance(private, str):
        raise DatasetError(f"{source}: row {index}: field 'private_test_cases' must be text")
    meta_raw = row.get("metadata", "{}") or "{}"
    try:
        meta = json.loads(meta_raw) if isinstance(meta_raw, str) else dict(meta_raw)
    except (json.JSONDecodeError, TypeError, ValueError) as exc:
        raise DatasetError(f"{source}: row {index}: field 'metadata' is not a JSON object: {exc}") from exc
    if not isinstance(meta, dict):
        raise DatasetError(f"{source}: row {index}: field 'metadata' is not a JSON object")
    metadata = {
        "question_id": qid,
        "question_title": row.get("question_title", ""),
        "question_content": content,
        "platform": row.get("platform", ""),
        "contest_id": row.get("contest_id", ""),
        "contest_date": day.isoformat(),
        "difficulty": row.get("difficulty", ""),
        "starter_code": starter,
        "fn_name": fn_name_of({"metadata": meta}),
        "public_test_cases": public,
        "private_test_cases": private,
        "source": source,
        "row": index,
    }
    prompt = templates.render("code", content, starter_code=starter)
    return Problem(id=qid, prompt=prompt, target="", kind="code", metadata=metadata)


def _lcb_hub_rows(release: str) -> list[tuple[str, int, Row]]:
    """code_generation_lite is a script dataset (unsupported by datasets >= 4): fetch its JSONL files."""
    from huggingface_hub import hf_hub_download

    rows: list[tuple[str, int, Row]] = []
    for name in LCB_RELEASE_FILES[release]:
        try:
            local = hf_hub_download(LCB_REPO, name, repo_type="dataset", revision=LCB_REVISION)
        except Exception as exc:
            raise DatasetError(
                f"could not fetch {name} of {LCB_REPO} at revision {LCB_REVISION}: {type(exc).__name__}: {exc}. "
                "Offline? Pass path= a local copy (a clone of the dataset repository or its JSONL files)."
            ) from exc
        rows.extend((f"{LCB_REPO}/{name}", i, row) for i, row in enumerate(_read_file(Path(local))))
    return rows


def load_livecodebench(
    path: str | os.PathLike[str] | None = None,
    limit: int | None = None,
    start_date: str = "2025-02-01",
    end_date: str = "2025-05-31",
    release: str = "release_v6",
    *,
    templates: PromptTemplates | None = None,
) -> list[Problem]:
    """LiveCodeBench code generation (code_generation_lite), problems dated in [start_date, end_date].

    Both dates are inclusive and compared with the contest date. ``release`` selects the
    files of a release (cumulative ``release_vN`` or a single ``vN``); for a local
    directory the release's files are used when present, else every data file in it. A
    reference-layout file is the selection itself: the window and the release do not apply to it.
    """
    _check_limit(limit)
    if release not in LCB_RELEASE_FILES:
        raise ValueError(f"release must be one of {', '.join(LCB_RELEASE_FILES)}, got {release!r}")
    start, end = _parse_day(start_date, "start_date"), _parse_day(end_date, "end_date")
    if start > end:
        raise ValueError(f"start_date {start_date} is after end_date {end_date}")
    chosen = _templates(templates, "code")
    reference = _reference("livecodebench", path, chosen, limit)
    if reference is not None:
        return reference
    if path is None:
        rows = _lcb_hub_rows(release)
    else:
        rows = _read_local(LCB_FIXTURE if str(path) == FIXTURE else path, LCB_RELEASE_FILES[release])
    problems = _build(rows, lambda source, index, row: _lcb_problem(source, index, row, chosen), None)
    in_window = [p for p in problems if start <= date.fromisoformat(p.metadata["contest_date"]) <= end]
    return in_window if limit is None else in_window[:limit]


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
    aime = _aime_problem(layout.data_source, templates)

    def make(source: str, index: int, row: Row) -> Problem:
        problem = aime(source, index, row)
        return replace(
            problem, id=_row_id(row, layout, index), metadata={**problem.metadata, "data_source": layout.data_source}
        )

    return make


def _reference_gpqa(layout: ReferenceLayout, templates: PromptTemplates) -> Callable[[str, int, Row], Problem]:
    def make(source: str, index: int, row: Row) -> Problem:
        question = _text(row, source, index, ("problem",))
        domain = _text(row, source, index, ("domain",))
        solution = str(_field(row, source, index, ("solution",))).strip()
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
        content = _text(row, source, index, ("problem",))
        reward_model = _json_value(_field(row, source, index, ("reward_model",)), where, "reward_model")
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
            # the reference grades on every test of ground_truth; the prompt shows none of them
            "public_test_cases": "[]",
            "private_test_cases": json.dumps(tests),
            "data_source": layout.data_source,
            "source": source,
            "row": index,
        }
        prompt = templates.render("code", content)
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
    _check_limit(limit)
    label, columns, rows = _read_table(source)
    layout = _layout_of(label, columns, rows, kind)
    chosen = default_templates() if templates is None else templates
    chosen.require([layout.kind])
    make = _REFERENCE_MAKERS[layout.kind](layout, chosen)
    return _build([(label, index, row) for index, row in enumerate(rows)], make, limit)
