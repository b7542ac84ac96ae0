"""Loaders for the four benchmarks: AIME 2024, AIME 2025, GPQA-Diamond, LiveCodeBench.

Each loader returns a list of :class:`Problem` and takes ``path``:

- ``None``: the real dataset from the Hugging Face hub, at a PINNED revision (the
  ``*_REVISION`` constants below), so that a score always refers to the same data;
- ``"fixture"``: the project's own small fixture in ``harness/data/`` (same schema as
  upstream, problems written by the project; the GPQA fixture is invented);
- a local file (``.jsonl``, ``.json``, ``.csv``, ``.parquet``) or a directory holding
  one, for offline machines that already have the data.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from harness.benchmarks.lcb import fn_name_of, parse_tests
from harness.core.problems import Kind
from harness.core.prompts import code_prompt, gpqa_prompt, math_prompt, shuffle_choices

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

FIXTURE = "fixture"
DATA_DIR = Path(__file__).parents[1] / "data"
FIXTURES = {
    "aime24": DATA_DIR / "aime24_fixture.jsonl",
    "aime25": DATA_DIR / "aime25_fixture.jsonl",
    "gpqa": DATA_DIR / "gpqa_diamond_fixture.csv",
    "livecodebench": DATA_DIR / "livecodebench_fixture.jsonl",
}

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


def _aime_problem(prefix: str) -> Callable[[str, int, Row], Problem]:
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
        return Problem(id=pid, prompt=math_prompt(problem), target=target, kind="math", metadata=metadata)

    return make


def _load_aime(
    name: str, repo: str, revision: str, split: str, path: str | os.PathLike[str] | None, limit: int | None
) -> list[Problem]:
    _check_limit(limit)
    if path is None:
        rows = _load_hub(repo, revision, split)
    else:
        rows = _read_local(FIXTURES[name] if str(path) == FIXTURE else path)
    return _build(rows, _aime_problem(name), limit)


def load_aime24(path: str | os.PathLike[str] | None = None, limit: int | None = None) -> list[Problem]:
    """AIME 2024 (30 problems; Maxwell-Jia/AIME_2024 schema: ID, Problem, Solution, Answer)."""
    return _load_aime("aime24", AIME24_REPO, AIME24_REVISION, AIME24_SPLIT, path, limit)


def load_aime25(path: str | os.PathLike[str] | None = None, limit: int | None = None) -> list[Problem]:
    """AIME 2025 (30 problems; math-ai/aime25 schema: problem, answer, id)."""
    return _load_aime("aime25", AIME25_REPO, AIME25_REVISION, AIME25_SPLIT, path, limit)


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


def _gpqa_problem(seed: int) -> Callable[[str, int, Row], Problem]:
    def make(source: str, index: int, row: Row) -> Problem:
        question = _text(row, source, index, ("Question",))
        correct = _text(row, source, index, ("Correct Answer",)).strip()
        incorrect = [_text(row, source, index, (f"Incorrect Answer {k}",)).strip() for k in (1, 2, 3)]
        raw_id = row.get("Record ID")
        pid = str(raw_id).strip() if raw_id not in (None, "") else f"gpqa-{index}"
        choices, letter = shuffle_choices(correct, incorrect, seed=seed, sample_id=pid)
        metadata = {
            "question": question,
            "choices": choices,
            "correct_answer": correct,
            "record_id": pid,
            "domain": row.get("High-level domain"),
            "subdomain": row.get("Subdomain"),
            "seed": seed,
            "source": source,
            "row": index,
        }
        return Problem(id=pid, prompt=gpqa_prompt(question, choices), target=letter, kind="gpqa", metadata=metadata)

    return make


def load_gpqa(
    path: str | os.PathLike[str] | None = None,
    limit: int | None = None,
    seed: int = 0,
    sha256: str | None = GPQA_DIAMOND_CSV_SHA256,
) -> list[Problem]:
    """GPQA-Diamond (198 questions) with choices shuffled per sample, stable across runs.

    The shuffle of each question depends only on ``seed`` and its ``Record ID``; the
    target is the letter under which the correct answer landed. A local file (or the
    ``gpqa_diamond.csv`` of a directory) must have the sha256 ``sha256`` (by default that
    of the public CSV); pass ``sha256=None`` to accept another copy knowingly.
    """
    _check_limit(limit)
    if path is None:
        rows = _gpqa_hub_rows()
    elif str(path) == FIXTURE:
        rows = _read_local(FIXTURES["gpqa"])
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
    return _build(rows, _gpqa_problem(seed), limit)


# --------------------------------------------------------------------------- LiveCodeBench


def _parse_day(value: str, what: str) -> date:
    try:
        return date.fromisoformat(str(value)[:10])
    except ValueError as exc:
        raise ValueError(f"{what} must be a date YYYY-MM-DD, got {value!r}") from exc


def _lcb_problem(source: str, index: int, row: Row) -> Problem:
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
    return Problem(id=qid, prompt=code_prompt(content, starter), target="", kind="code", metadata=metadata)


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
) -> list[Problem]:
    """LiveCodeBench code generation (code_generation_lite), problems dated in [start_date, end_date].

    Both dates are inclusive and compared with the contest date. ``release`` selects the
    files of a release (cumulative ``release_vN`` or a single ``vN``); for a local
    directory the release's files are used when present, else every data file in it.
    """
    _check_limit(limit)
    if release not in LCB_RELEASE_FILES:
        raise ValueError(f"release must be one of {', '.join(LCB_RELEASE_FILES)}, got {release!r}")
    start, end = _parse_day(start_date, "start_date"), _parse_day(end_date, "end_date")
    if start > end:
        raise ValueError(f"start_date {start_date} is after end_date {end_date}")
    if path is None:
        rows = _lcb_hub_rows(release)
    else:
        rows = _read_local(FIXTURES["livecodebench"] if str(path) == FIXTURE else path, LCB_RELEASE_FILES[release])
    problems = _build(rows, _lcb_problem, None)
    in_window = [p for p in problems if start <= date.fromisoformat(p.metadata["contest_date"]) <= end]
    return in_window if limit is None else in_window[:limit]


LOADERS: dict[str, Callable[..., list[Problem]]] = {
    "aime24": load_aime24,
    "aime25": load_aime25,
    "gpqa": load_gpqa,
    "livecodebench": load_livecodebench,
}


def load(benchmark: str, **kwargs: Any) -> list[Problem]:
    """Load a benchmark by name (``aime24``, ``aime25``, ``gpqa``, ``livecodebench``)."""
    try:
        loader = LOADERS[benchmark]
    except KeyError:
        raise ValueError(f"unknown benchmark {benchmark!r}; choose one of {', '.join(LOADERS)}") from None
    return loader(**kwargs)
