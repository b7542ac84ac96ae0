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
  :func:`harness.benchmarks.reference_data.load_reference_parquet`, where the layout is documented.

Each loader also takes ``templates``, the :class:`~harness.core.prompts.PromptTemplates` its
prompts are rendered with (``None``: the project's).

A broken row raises :class:`DatasetError` naming the file, the row and the field;
nothing is silently dropped. Plain Python on purpose: the Inspect tasks and the
training plugin build on these functions.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from datetime import date
from pathlib import Path

from harness.benchmarks.lcb import fn_name_of
from harness.benchmarks.lcb_cases import parse_tests, problem_tests
from harness.benchmarks.reference_data import is_reference_source, load_reference_parquet
from harness.benchmarks.reference_data import tests_from_ground_truth as tests_from_ground_truth
from harness.benchmarks.rows import DatasetError as DatasetError
from harness.benchmarks.rows import GatedDatasetError as GatedDatasetError
from harness.benchmarks.rows import Problem as Problem
from harness.benchmarks.rows import (
    Row,
    aime_problem,
    build_problems,
    check_limit,
    data_files,
    read_file,
    read_local,
    row_field,
    row_text,
    templates_for,
)
from harness.benchmarks.rows import load_hub as _load_hub  # a name tests stand in for
from harness.core.prompts import PromptTemplates, gpqa_problem, shuffle_choices

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


def _reference(
    benchmark: str, path: str | os.PathLike[str] | None, templates: PromptTemplates | None, limit: int | None
) -> list[Problem] | None:
    """The problems of a reference-layout file (see the module docstring), or None for any other ``path``."""
    if path is None or not is_reference_source(path):
        return None
    return load_reference_parquet(path, benchmark, templates=templates, limit=limit)


# --------------------------------------------------------------------------- AIME


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
    check_limit(limit)
    chosen = templates_for(templates, "math")
    reference = _reference(name, path, chosen, limit)
    if reference is not None:
        return reference
    if path is None:
        rows = _load_hub(repo, revision, split)
    else:
        rows = read_local(fixture if str(path) == FIXTURE else path)
    return build_problems(rows, aime_problem(name, chosen), limit)


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
        question = row_text(row, source, index, ("Question",))
        correct = row_text(row, source, index, ("Correct Answer",)).strip()
        incorrect = [row_text(row, source, index, (f"Incorrect Answer {k}",)).strip() for k in (1, 2, 3)]
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
    check_limit(limit)
    chosen = templates_for(templates, "gpqa")
    reference = _reference("gpqa", path, chosen, limit)
    if reference is not None:
        return reference
    if path is None:
        rows = _gpqa_hub_rows()
    elif str(path) == FIXTURE:
        rows = read_local(GPQA_FIXTURE)
    else:
        p = Path(path).expanduser()
        if p.is_dir():
            files = data_files(p, ("gpqa_diamond.csv",))
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
        rows = read_local(p)
    return build_problems(rows, _gpqa_problem(seed, chosen), limit)


# --------------------------------------------------------------------------- LiveCodeBench


def _parse_day(value: str, what: str) -> date:
    try:
        return date.fromisoformat(str(value)[:10])
    except ValueError as exc:
        raise ValueError(f"{what} must be a date YYYY-MM-DD, got {value!r}") from exc


def _lcb_problem(source: str, index: int, row: Row, templates: PromptTemplates) -> Problem:
    qid = str(row_field(row, source, index, ("question_id",)))
    content = row_text(row, source, index, ("question_content",))
    starter = row_text(row, source, index, ("starter_code",), allow_empty=True) if "starter_code" in row else ""
    contest_date = row_text(row, source, index, ("contest_date",))
    try:
        day = date.fromisoformat(contest_date[:10])
    except ValueError as exc:
        raise DatasetError(f"{source}: row {index}: field 'contest_date' is not an ISO date: {contest_date!r}") from exc
    public = row_text(row, source, index, ("public_test_cases",), allow_empty=True)
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
    tests = None
    if templates.shows_tests():  # every test it is graded on, public then private (decoded only then)
        try:
            graded = problem_tests(metadata, where=qid)
        except ValueError as exc:
            raise DatasetError(f"{source}: row {index}: {exc}") from exc
        tests = ([t["input"] for t in graded], [t["output"] for t in graded])
    prompt = templates.render("code", content, starter_code=starter, tests=tests)
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
        rows.extend((f"{LCB_REPO}/{name}", i, row) for i, row in enumerate(read_file(Path(local))))
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
    check_limit(limit)
    if release not in LCB_RELEASE_FILES:
        raise ValueError(f"release must be one of {', '.join(LCB_RELEASE_FILES)}, got {release!r}")
    start, end = _parse_day(start_date, "start_date"), _parse_day(end_date, "end_date")
    if start > end:
        raise ValueError(f"start_date {start_date} is after end_date {end_date}")
    chosen = templates_for(templates, "code")
    reference = _reference("livecodebench", path, chosen, limit)
    if reference is not None:
        return reference
    if path is None:
        rows = _lcb_hub_rows(release)
    else:
        rows = read_local(LCB_FIXTURE if str(path) == FIXTURE else path, LCB_RELEASE_FILES[release])
    problems = build_problems(rows, lambda source, index, row: _lcb_problem(source, index, row, chosen), None)
    in_window = [p for p in problems if start <= date.fromisoformat(p.metadata["contest_date"]) <= end]
    return in_window if limit is None else in_window[:limit]
