"""The reference's evaluation parquet files: each benchmark's layout, the loaders' routing, and every error.

The fixtures are written here with pyarrow in the reference's layout (recipe/cleaner/reward.py's
CustomRLHFDataset); the problems are the project's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.benchmarks import datasets as ds
from harness.benchmarks import reference_data as ref
from harness.benchmarks import registry
from harness.benchmarks.datasets import DatasetError
from harness.benchmarks.lcb import fn_name_of, grade_completion
from harness.benchmarks.lcb_cases import problem_tests
from harness.core.prompts import load_prompt_templates

GPQA_TEXT = "Which gas is noble?\n\nA) Oxygen\nB) Argon\nC) Nitrogen\nD) Hydrogen"


def _parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _aime24_rows() -> list[dict[str, Any]]:
    return [
        {"data_source": "AIME2024", "Problem": "What is 6 * 7?", "Answer": 42},
        {"data_source": "AIME2024", "Problem": "What is 2 ** 10 modulo 1000?", "Answer": 24},
    ]


def _aime25_rows() -> list[dict[str, Any]]:
    return [
        {"data_source": "AIME2025", "id": "fx-25-1", "problem": "What is 9 + 10?", "answer": "19"},
        {"data_source": "AIME2025", "id": "fx-25-2", "problem": "What is 100 - 1?", "answer": "099"},
    ]


def _gpqa_rows() -> list[dict[str, Any]]:
    return [
        {"data_source": "gpqa_diamond", "problem": GPQA_TEXT, "solution": "B", "domain": "Chemistry"},
        {
            "data_source": "gpqa_diamond",
            "problem": "How many legs has an insect?\n\nA) 4\nB) 8\nC) 6\nD) 10",
            "solution": " C ",
            "domain": "Biology",
        },
    ]


def _truth(inputs: list[Any], outputs: list[Any], fn_name: str | None = None) -> str:
    truth: dict[str, Any] = {"inputs": inputs, "outputs": outputs}
    if fn_name:
        truth["fn_name"] = fn_name
    return json.dumps({"ground_truth": truth, "style": "rule"})


def _lcb_rows() -> list[dict[str, Any]]:
    return [
        {
            "data_source": "LiveCodeBench_v6",
            "problem": "Read two integers and print their sum.",
            "ability": "code",
            "reward_model": _truth(["1 2\n", "10 -3\n"], ["3\n", "7\n"]),
            "extra_info": json.dumps({"question_id": "fx_sum", "index": 0}),
        },
        {
            "data_source": "LiveCodeBench_v6",
            "problem": "Return the list doubled, element by element.",
            "ability": "code",
            "reward_model": _truth(["[1, 2]"], ["[2, 4]"], fn_name="double"),
            "extra_info": json.dumps({"index": 1}),
        },
    ]


ROWS = {"aime24": _aime24_rows, "aime25": _aime25_rows, "gpqa": _gpqa_rows, "livecodebench": _lcb_rows}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {name: _parquet(tmp_path / f"{name}.parquet", rows()) for name, rows in ROWS.items()}


# --------------------------------------------------------------------------- each benchmark


def test_aime_files(files: dict[str, Path]) -> None:
    templates = load_prompt_templates()
    first, second = ref.load_reference_parquet(files["aime24"], "aime24")
    assert (first.id, first.target, first.kind) == ("AIME2024-0", "42", "math")
    assert first.prompt == templates.render("math", "What is 6 * 7?")
    assert first.metadata["data_source"] == "AIME2024" and first.metadata["row"] == 0
    assert second.target == "24"
    problems = ref.load_reference_parquet(files["aime25"], "aime25")
    assert [(p.id, p.target) for p in problems] == [("fx-25-1", "19"), ("fx-25-2", "099")]
    assert [p.id for p in ref.load_reference_parquet(files["aime25"], "math")] == ["fx-25-1", "fx-25-2"]


def test_gpqa_file_keeps_its_problem_text_and_takes_the_solution_letter(files: dict[str, Path]) -> None:
    first, second = ref.load_reference_parquet(files["gpqa"], "gpqa")
    assert (first.id, first.target, first.kind) == ("gpqa_diamond-0", "B", "gpqa")
    assert first.prompt == load_prompt_templates().render("gpqa", GPQA_TEXT)
    assert GPQA_TEXT in first.prompt
    assert first.metadata["domain"] == "Chemistry" and second.target == "C"


def test_gpqa_domain_fills_a_template_that_asks_for_it(files: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("gpqa: 'A {domain} problem.\n\n  {problem}'\n", encoding="utf-8")
    (first, _) = ref.load_reference_parquet(files["gpqa"], "gpqa", templates=load_prompt_templates(path))
    assert first.prompt == f"A Chemistry problem.\n{GPQA_TEXT}"


def test_livecodebench_file_becomes_gradable_tests(files: dict[str, Path]) -> None:
    stdin, functional = ref.load_reference_parquet(files["livecodebench"], "livecodebench")
    assert (stdin.id, stdin.kind, stdin.target) == ("fx_sum", "code", "")
    assert functional.id == "LiveCodeBench_v6-1"
    assert stdin.prompt == load_prompt_templates().render("code", "Read two integers and print their sum.")
    assert problem_tests(stdin.metadata) == [
        {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
        {"input": "10 -3\n", "output": "7\n", "testtype": "stdin"},
    ]
    assert fn_name_of(stdin.metadata) is None and fn_name_of(functional.metadata) == "double"
    assert problem_tests(functional.metadata) == [{"input": "[1, 2]", "output": "[2, 4]", "testtype": "functional"}]


def test_a_template_that_shows_the_tests_gets_the_ground_truth_as_the_reference_prints_it(
    files: dict[str, Path], tmp_path: Path
) -> None:
    # reward.py:103-106 (Open-CLEANER @91e40ad): str() of reward_model's ground_truth inputs and outputs
    path = tmp_path / "mine.yaml"
    path.write_text("code: |-\n  {problem}\n  In: {test_inputs}\n  Out: {test_outputs}\n", encoding="utf-8")
    stdin, functional = ref.load_reference_parquet(
        files["livecodebench"], "code", templates=load_prompt_templates(path)
    )
    assert stdin.prompt == "Read two integers and print their sum.\nIn: ['1 2\\n', '10 -3\\n']\nOut: ['3\\n', '7\\n']"
    assert functional.prompt.endswith("In: ['[1, 2]']\nOut: ['[2, 4]']")


async def test_livecodebench_problems_grade_in_a_sandbox(files: dict[str, Path], local_sandbox) -> None:
    stdin, functional = ref.load_reference_parquet(files["livecodebench"], "code")
    right = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert (await grade_completion(local_sandbox, right, stdin.metadata)).all_passed
    wrong = right.replace("a + b", "a - b")
    assert (await grade_completion(local_sandbox, wrong, stdin.metadata)).passed == 0
    method = "```python\nclass Solution:\n    def double(self, xs):\n        return [2 * x for x in xs]\n```"
    assert (await grade_completion(local_sandbox, method, functional.metadata)).all_passed


def test_limit_and_reference_data_through_every_loader(files: dict[str, Path]) -> None:
    assert len(ref.load_reference_parquet(files["aime24"], "aime24", limit=1)) == 1
    assert [p.id for p in ds.load_aime24(files["aime24"])] == ["AIME2024-0", "AIME2024-1"]
    assert [p.id for p in ds.load_aime25(str(files["aime25"]), limit=1)] == ["fx-25-1"]
    assert [p.target for p in ds.load_gpqa(files["gpqa"])] == ["B", "C"]  # no sha256 check, no shuffle
    assert [p.id for p in ds.load_livecodebench(files["livecodebench"])] == ["fx_sum", "LiveCodeBench_v6-1"]
    assert [p.id for p in registry.load("aime25", path=files["aime25"])] == ["fx-25-1", "fx-25-2"]


def test_upstream_schema_parquet_still_reads_as_upstream(tmp_path: Path) -> None:
    path = _parquet(tmp_path / "aime_2024_problems.parquet", [{"ID": "2024-I-1", "Problem": "1+1?", "Answer": 2}])
    assert not ref.is_reference_source(path)
    assert [(p.id, p.target) for p in ds.load_aime24(path)] == [("2024-I-1", "2")]
    assert ref.is_reference_source("hf://datasets/o/n@" + "0" * 40 + "/a.parquet")


def test_hub_files_are_fetched_at_the_pinned_commit(files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    calls = []

    def download(repo_id: str, filename: str, **kwargs: Any) -> str:
        calls.append((repo_id, filename, kwargs))
        return str(files["aime24"])

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    commit = "0123456789abcdef0123456789abcdef01234567"
    url = f"hf://datasets/{ref.REFERENCE_HUB_REPO}@{commit}/aime2024/aime_2024_problems.parquet"
    problems = ds.load_aime24(url)
    assert [p.target for p in problems] == ["42", "24"] and problems[0].metadata["source"] == url
    assert calls == [
        (ref.REFERENCE_HUB_REPO, "aime2024/aime_2024_problems.parquet", {"repo_type": "dataset", "revision": commit})
    ]


# --------------------------------------------------------------------------- errors


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"nope.parquet: no such file"):
        ref.load_reference_parquet(tmp_path / "nope.parquet", "aime24")
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet", encoding="utf-8")
    assert ref.is_reference_source(bad)
    with pytest.raises(DatasetError, match=r"bad.parquet: not a readable parquet file"):
        ds.load_aime24(bad)
    with pytest.raises(DatasetError, match=r"not a file"):
        ref.load_reference_parquet(tmp_path, "aime24")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("hf://datasets/Gen-Verse/Open-AgentRL-Eval/aime2024/a.parquet", r"not a pinned hub file"),
        ("hf://datasets/Gen-Verse/Open-AgentRL-Eval@main/aime2024/a.parquet", r"revision 'main' is not a commit"),
        ("hf://models/x/y@" + "0" * 40 + "/a.parquet", r"not a pinned hub file"),
    ],
)
def test_hub_urls_must_pin_a_commit(url: str, message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        ref.load_reference_parquet(url, "aime24")


def test_missing_columns_are_listed_with_the_ones_present(tmp_path: Path) -> None:
    path = _parquet(tmp_path / "g.parquet", [{"data_source": "gpqa_diamond", "problem": GPQA_TEXT, "answer": "B"}])
    with pytest.raises(DatasetError) as info:
        ds.load_gpqa(path)
    message = str(info.value)
    assert "g.parquet" in message and "missing column(s) solution, domain" in message
    assert "the file has columns: data_source, problem, answer" in message
    no_source = _parquet(tmp_path / "n.parquet", [{"problem": "x"}])
    with pytest.raises(DatasetError, match=r"missing column 'data_source'.*the file has columns: problem"):
        ref.load_reference_parquet(no_source, "aime25")
    empty = tmp_path / "e.parquet"
    pq.write_table(pa.table({"data_source": pa.array([], pa.string()), "problem": pa.array([], pa.string())}), empty)
    with pytest.raises(DatasetError, match=r"e.parquet: the file has no rows"):
        ref.load_reference_parquet(empty, "aime25")


@pytest.mark.parametrize(
    ("benchmark", "row", "message"),
    [
        ("aime24", {"data_source": "AIME2024", "Problem": "  ", "Answer": 1}, r"row 1: field 'Problem' is empty"),
        ("aime24", {"data_source": "AIME2024", "Problem": "p", "Answer": None}, r"row 1: missing field 'Answer'"),
        ("aime25", {"data_source": "AIME2025", "id": "z", "problem": "p", "answer": ""}, r"row 1: field 'answer' is"),
        ("gpqa", {"data_source": "gpqa_diamond", "problem": "", "solution": "A", "domain": "X"}, r"row 1: field 'prob"),
        ("gpqa", {"data_source": "gpqa_diamond", "problem": "q", "solution": "", "domain": "X"}, r"row 1: field 'solu"),
        ("gpqa", {"data_source": "gpqa_diamond", "problem": "q", "solution": "B) Argon", "domain": "X"}, r"letter"),
        ("livecodebench", {**_lcb_rows()[0], "problem": " "}, r"row 1: field 'problem' is empty"),
        ("livecodebench", {**_lcb_rows()[0], "reward_model": "{not json"}, r"row 1: field 'reward_model' is not valid"),
        ("livecodebench", {**_lcb_rows()[0], "reward_model": _truth(["1"], [])}, r"row 1: code ground_truth needs"),
        ("livecodebench", {**_lcb_rows()[0], "reward_model": json.dumps({"style": "rule"})}, r"with 'ground_truth'"),
        ("aime25", {"data_source": "AIME2025", "id": "fx-25-1", "problem": "p", "answer": "1"}, r"duplicate id"),
    ],
)
def test_broken_rows_are_named(tmp_path: Path, benchmark: str, row: dict[str, Any], message: str) -> None:
    first = ROWS[benchmark]()[0]
    path = _parquet(tmp_path / "broken.parquet", [first, {**first, **row}])
    with pytest.raises(DatasetError, match=message) as info:
        registry.load(benchmark, path=path)
    assert "broken.parquet" in str(info.value)


def test_a_data_source_of_another_benchmark_is_refused(files: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"row 0: data_source 'AIME2025' does not match.*aime24.*aime25 data"):
        ds.load_aime24(files["aime25"])
    with pytest.raises(DatasetError, match=r"data_source 'gpqa_diamond'.*livecodebench.*the reference's gpqa data"):
        ds.load_livecodebench(files["gpqa"])
    with pytest.raises(DatasetError, match=r"'math_dapo'.*not a benchmark of the reference's evaluation"):
        ref.load_reference_parquet(_parquet(tmp_path / "t.parquet", [{"data_source": "math_dapo"}]), "math")
    mixed = _parquet(tmp_path / "mixed.parquet", [_aime24_rows()[0], {**_aime24_rows()[1], "data_source": "AIME2025"}])
    with pytest.raises(DatasetError, match=r"row 1: data_source 'AIME2025'"):
        ds.load_aime24(mixed)
    with pytest.raises(ValueError, match=r"kind must be one of"):
        ref.load_reference_parquet(files["aime24"], "aime23")
