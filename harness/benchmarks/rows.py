"""What every loader shares: the dataset errors, reading rows from files and the hub, and checking a row's fields
(the upstream loaders in :mod:`harness.benchmarks.datasets` and the reference's in
:mod:`harness.benchmarks.reference_data` both build on it, each making a
:class:`~harness.benchmarks.problem.Problem`)."""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from harness.benchmarks.problem import Problem as Problem
from harness.core.kinds import Kind
from harness.core.prompts import PromptTemplates, default_templates

Row = dict[str, Any]

_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


class DatasetError(ValueError):
    """A dataset could not be loaded, or one of its rows is broken."""


class GatedDatasetError(DatasetError):
    """A gated hub dataset was requested without access to it."""


Row = dict[str, Any]


# --------------------------------------------------------------------------- reading


def read_file(path: Path) -> list[Row]:
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


def data_files(directory: Path, preferred: Iterable[str] = ()) -> list[Path]:
    """The data files of a directory: the preferred names if present, else every data file."""
    wanted = [directory / name for name in preferred if (directory / name).is_file()]
    if wanted:
        return wanted
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix.lower() in _SUFFIXES)
    files = [p for p in files if not any(part.startswith(".") for part in p.relative_to(directory).parts)]
    if not files:
        raise DatasetError(f"{directory}: no data file ({', '.join(_SUFFIXES)}) in this directory")
    return files


def read_local(path: str | os.PathLike[str], preferred: Iterable[str] = ()) -> list[tuple[str, int, Row]]:
    """Rows of a local file or directory, each with its file name and row index."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DatasetError(f"{p}: no such file or directory")
    files = data_files(p, preferred) if p.is_dir() else [p]
    rows: list[tuple[str, int, Row]] = []
    for f in files:
        rows.extend((str(f), i, row) for i, row in enumerate(read_file(f)))
    return rows


def load_hub(repo: str, revision: str, split: str, name: str | None = None) -> list[tuple[str, int, Row]]:
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


def check_limit(limit: int | None) -> None:
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative integer or None, got {limit!r}")


def templates_for(templates: PromptTemplates | None, kind: Kind) -> PromptTemplates:
    """``templates`` (or the project's), checked to hold the template of ``kind``."""
    chosen = default_templates() if templates is None else templates
    chosen.require([kind])
    return chosen


def row_field(row: Row, source: str, index: int, names: tuple[str, ...], *, allow_empty: bool = False) -> Any:
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


def row_text(row: Row, source: str, index: int, names: tuple[str, ...], *, allow_empty: bool = False) -> str:
    value = row_field(row, source, index, names, allow_empty=allow_empty)
    if not isinstance(value, str):
        raise DatasetError(f"{source}: row {index}: field {names[0]!r} must be text, got {type(value).__name__}")
    return value


def build_problems(
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


def aime_problem(prefix: str, templates: PromptTemplates) -> Callable[[str, int, Row], Problem]:
    """AIME rows (``Problem``/``problem``/``question`` and ``Answer``/``answer``) as math problems."""

    def make(source: str, index: int, row: Row) -> Problem:
        problem = row_text(row, source, index, ("Problem", "problem", "question"))
        answer = row_field(row, source, index, ("Answer", "answer"))
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
