"""Dataset loaders: fixtures, local files, broken rows, GPQA's shuffle and sha256, LCB's window."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from harness.benchmarks import datasets as ds
from harness.benchmarks import registry
from harness.benchmarks.datasets import DatasetError, GatedDatasetError, Problem
from harness.benchmarks.lcb_cases import problem_tests
from harness.benchmarks.registry import BENCHMARKS, Benchmark
from harness.core.prompts import LETTERS, shuffle_choices


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _gpqa_rows() -> list[dict[str, str]]:
    with BENCHMARKS["gpqa"].fixture.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


# --------------------------------------------------------------------------- fixtures


@pytest.mark.parametrize("bench", BENCHMARKS.values(), ids=list(BENCHMARKS))
def test_fixtures_load(bench: Benchmark) -> None:
    """Every registered benchmark's fixture loads through its loader, as problems of its kind read from that file."""
    problems = bench.loader("fixture")
    count = len(problems)
    assert count >= 2
    assert all(isinstance(p, Problem) and p.kind == bench.kind and p.prompt for p in problems)
    assert {p.metadata["source"] for p in problems} == {str(bench.fixture)}  # "fixture" is the registered file
    assert len({p.id for p in problems}) == count
    assert len(bench.loader("fixture", limit=2)) == 2
    assert bench.loader("fixture", limit=0) == []


def test_the_fixtures_hold_the_problems_the_tests_expect() -> None:
    expected = {"aime24": 4, "aime25": 3, "gpqa": 4, "livecodebench": 3}
    assert {name: len(registry.load(name, path="fixture")) for name in expected} == expected


def test_aime_fixture_keeps_leading_zero_target_and_prompts_for_a_box() -> None:
    problems = {p.id: p for p in ds.load_aime24("fixture")}
    first = problems["fixture-2024-I-1"]
    assert first.target == "025"
    assert first.metadata["answer_int"] == 25
    assert "2^4 \\cdot 3^4" in first.prompt and "\\boxed{}" in first.prompt and "python" in first.prompt
    assert problems["fixture-2024-I-2"].target == "210"  # an integer Answer becomes text


def test_load_dispatch_and_bad_arguments() -> None:
    assert [p.id for p in registry.load("aime25", path="fixture")] == ["0", "1", "2"]
    with pytest.raises(ValueError, match="unknown benchmark 'aime23'"):
        registry.load("aime23")
    with pytest.raises(ValueError, match="limit"):
        ds.load_aime24("fixture", limit=-1)
    with pytest.raises(DatasetError, match="no such file"):
        ds.load_aime24("/nonexistent/aime.jsonl")


# --------------------------------------------------------------------------- local files


def test_local_file_directory_and_parquet(tmp_path: Path) -> None:
    rows = [{"ID": "x-1", "Problem": "What is 1+1?", "Solution": "", "Answer": 2}]
    single = _write_jsonl(tmp_path / "one.jsonl", rows)
    assert [p.target for p in ds.load_aime24(single)] == ["2"]

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "aime"
    folder.mkdir()
    pq.write_table(
        pa.Table.from_pylist(rows + [{"ID": "x-2", "Problem": "2+2?", "Solution": "", "Answer": 4}]),
        folder / "aime_2024_problems.parquet",
    )
    assert [p.id for p in ds.load_aime24(folder)] == ["x-1", "x-2"]


def test_aime25_other_schema_fields(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "aime25.jsonl", [{"question": "Compute 6*7.", "answer": "42"}])
    (problem,) = ds.load_aime25(path)
    assert problem.id == "aime25-0" and problem.target == "42"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"ID": "b", "Problem": "p"}, r"row 1: missing field 'Answer' or 'answer'"),
        ({"ID": "b", "Problem": "p", "Answer": "twelve"}, r"row 1: field 'Answer' must be an AIME answer"),
        ({"ID": "b", "Problem": "p", "Answer": 1234}, r"row 1: field 'Answer' must be an AIME answer"),
        ({"ID": "b", "Problem": "   ", "Answer": 1}, r"row 1: field 'Problem' is empty"),
        ({"ID": "b", "Problem": 7, "Answer": 1}, r"row 1: field 'Problem' must be text"),
        ({"ID": "a", "Problem": "p", "Answer": 1}, r"row 1: duplicate id 'a'"),
    ],
)
def test_broken_aime_rows_name_file_row_and_field(tmp_path: Path, row: dict, message: str) -> None:
    path = _write_jsonl(tmp_path / "broken.jsonl", [{"ID": "a", "Problem": "p", "Answer": 1}, row])
    with pytest.raises(DatasetError, match=message) as info:
        ds.load_aime24(path)
    assert "broken.jsonl" in str(info.value)


def test_invalid_json_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"ID": "a", "Problem": "p", "Answer": 1}\n{not json\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad.jsonl: line 2 is not valid JSON"):
        ds.load_aime24(path)


# --------------------------------------------------------------------------- GPQA


def test_gpqa_target_follows_the_correct_answer() -> None:
    for problem in ds.load_gpqa("fixture"):
        choices = problem.metadata["choices"]
        assert len(set(choices)) == 4 and problem.metadata["correct_answer"] in choices
        assert choices[LETTERS.index(problem.target)] == problem.metadata["correct_answer"]
        assert f"{problem.target}) {problem.metadata['correct_answer']}" in problem.prompt
        assert "\\boxed{}" in problem.prompt


def test_gpqa_shuffle_is_stable_and_depends_on_seed_and_id() -> None:
    first = [(p.metadata["choices"], p.target) for p in ds.load_gpqa("fixture", seed=0)]
    again = [(p.metadata["choices"], p.target) for p in ds.load_gpqa("fixture", seed=0)]
    assert first == again
    layouts = {tuple(shuffle_choices("right", ["w1", "w2", "w3"], seed=s, sample_id="rec1")[0]) for s in range(40)}
    assert len(layouts) > 10  # the seed matters
    targets = {shuffle_choices("right", ["w1", "w2", "w3"], seed=0, sample_id=f"rec{i}")[1] for i in range(40)}
    assert targets == set(LETTERS)  # the id matters, and the correct answer lands everywhere
    # known values pin the derivation (sha256 of "seed:id"), so a layout cannot drift between versions
    assert shuffle_choices("right", ["w1", "w2", "w3"], seed=0, sample_id="rec1") == (["w1", "w3", "w2", "right"], "D")
    assert shuffle_choices("right", ["w1", "w2", "w3"], seed=1, sample_id="rec1") == (["w1", "w3", "right", "w2"], "C")


def test_gpqa_local_csv_requires_the_pinned_sha256(tmp_path: Path) -> None:
    copy = shutil.copy(BENCHMARKS["gpqa"].fixture, tmp_path / "gpqa_diamond.csv")
    with pytest.raises(DatasetError, match=r"sha256 .* is not the expected 41d1213c"):
        ds.load_gpqa(copy)
    assert len(ds.load_gpqa(copy, sha256=None)) == 4
    assert len(ds.load_gpqa(tmp_path, sha256=ds.sha256_of(copy))) == 4  # a directory holding gpqa_diamond.csv


def test_gpqa_broken_row(tmp_path: Path) -> None:
    rows = _gpqa_rows()
    rows[2]["Incorrect Answer 2"] = ""
    path = _write_csv(tmp_path / "gpqa.csv", rows)
    with pytest.raises(DatasetError, match=r"gpqa.csv: row 2: field 'Incorrect Answer 2' is empty"):
        ds.load_gpqa(path, sha256=None)
    for row in rows:
        del row["Question"]
    with pytest.raises(DatasetError, match=r"row 0: missing field 'Question'"):
        ds.load_gpqa(_write_csv(tmp_path / "gpqa2.csv", rows), sha256=None)


def test_gpqa_without_access_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(ds, "_has_hf_token", lambda: False)

    def unreachable(*args, **kwargs):
        raise DatasetError("hub unreachable") from ConnectionError("offline")

    monkeypatch.setattr(ds, "_load_hub", unreachable)
    with pytest.raises(GatedDatasetError) as info:
        ds.load_gpqa()
    message = str(info.value)
    assert "HF_TOKEN" in message and "accept its terms" in message and "gpqa_diamond.csv" in message


# --------------------------------------------------------------------------- LiveCodeBench


def test_lcb_date_window_and_metadata() -> None:
    default = ds.load_livecodebench("fixture")
    assert [p.id for p in default] == ["fx_abc001_a", "fx_9001", "fx_abc002_b"]
    wide = ds.load_livecodebench("fixture", start_date="2024-01-01", end_date="2025-12-31")
    assert len(wide) == 4
    march = ds.load_livecodebench("fixture", start_date="2025-03-08", end_date="2025-03-08")
    assert [p.id for p in march] == ["fx_9001"]  # both ends inclusive
    functional = march[0]
    assert functional.metadata["fn_name"] == "addToEvery"
    assert "class Solution" in functional.prompt and "```python" in functional.prompt
    assert default[0].metadata["fn_name"] is None
    assert "standard input" in default[0].prompt
    for problem in wide:
        tests = problem_tests(problem.metadata)
        assert len(tests) >= 3 and all(t["output"] for t in tests)


def test_lcb_bad_arguments() -> None:
    with pytest.raises(ValueError, match="release must be one of"):
        ds.load_livecodebench("fixture", release="release_v9")
    with pytest.raises(ValueError, match="start_date must be a date"):
        ds.load_livecodebench("fixture", start_date="Feb 2025")
    with pytest.raises(ValueError, match="is after end_date"):
        ds.load_livecodebench("fixture", start_date="2025-06-01", end_date="2025-05-01")


def test_lcb_directory_uses_the_release_files(tmp_path: Path) -> None:
    shutil.copy(BENCHMARKS["livecodebench"].fixture, tmp_path / "test6.jsonl")
    (tmp_path / "notes.jsonl").write_text('{"not": "a problem"}\n', encoding="utf-8")
    assert len(ds.load_livecodebench(tmp_path, release="v6")) == 3
    with pytest.raises(DatasetError, match="notes.jsonl: row 0: missing field 'question_id'"):
        ds.load_livecodebench(tmp_path, release="v5")  # no test5.jsonl: every data file is read


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("public_test_cases", "[{broken", r"row 0: field public_test_cases: not valid JSON"),
        ("public_test_cases", '[{"input": "1"}]', r"row 0: field public_test_cases\[0\]: field 'output'"),
        ("contest_date", "someday", r"row 0: field 'contest_date' is not an ISO date"),
        ("metadata", "{nope", r"row 0: field 'metadata' is not a JSON object"),
        ("question_content", "", r"row 0: field 'question_content' is empty"),
    ],
)
def test_lcb_broken_rows(tmp_path: Path, field: str, value: str, message: str) -> None:
    row = json.loads(BENCHMARKS["livecodebench"].fixture.read_text(encoding="utf-8").splitlines()[0])
    row[field] = value
    path = _write_jsonl(tmp_path / "lcb.jsonl", [row])
    with pytest.raises(DatasetError, match=message) as info:
        ds.load_livecodebench(path)
    assert "lcb.jsonl" in str(info.value)
