"""``python -m harness prompts from-reference``: the reference's prompts read from its source, never run.

The reference is Open-CLEANER at commit 91e40ad: ``recipe/cleaner/reward.py`` builds its evaluation
prompts in ``CustomRLHFDataset`` (module constants at lines 40-43; AIME in ``map_fn``, line 76; GPQA in
``map_fn_gpqa``, lines 88-89; LiveCodeBench in ``map_lcb``, lines 101-107, its ground-truth tests shown
as ``str(inputs)`` and ``str(outputs)`` at 103-106). Its training prompts: ``_read_files_and_tokenize``
(lines 47-69) maps each training file with one method chosen by its first row's ``data_source`` (line 53):
``map_fn2`` (lines 118-122; math_dapo, mega-science) appends to the row's first message, ``map_fn_skywork``
(lines 124-132; any other source) sets it one way for a source naming ``code`` and another for the rest. Its
text is not the project's: these tests write a stand-in file in the same shape, with wording of their own, and
compare what the command writes with the stand-in's own concatenations.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness.__main__ import main
from harness.benchmarks import reference_prompts
from harness.benchmarks.datasets import load_livecodebench
from harness.benchmarks.reference_prompts import (
    REFERENCE_COMMIT,
    REWARD_PATH,
    REWARD_SHA256,
    ReferencePromptError,
    templates_from_reference,
    write_templates,
)
from harness.core.prompts import PromptTemplates, load_prompt_templates
from trainers.core.data import CHOICE_INSTRUCTION, DataError, item_from_row, load_open_agentrl

# The stand-in's pieces (invented wording; a brace, a trailing space and quotes, as in the real file).
TAIL = "\nEnd with \\boxed{'your answer'}."
OPEN = "Work through this problem. \n\n"
TOOL = "\n\nThe python tool is there to check things."
NOTE = "\n\n**Plan first, then use tools.**"
LCB_OPEN = "Write a Python program for this task.\n\n"
LCB_IO = '\n\nRead stdin, write stdout.\n```python\n# CODE\n"'
LCB_END = "\nSubmit the code within ```python\n# CODE\n```."
GPQA_END = "\n Put the letter in \\boxed{}"
UNITS = "\nNo units in \\boxed{}."
SUBMIT = "\nTest it, then submit ```python\n# CODE\n```."
BARE = "\nOnly the number in \\boxed{}, {no units}."

STAND_IN = f'''\
import json
import datasets
from verl.utils.dataset import RLHFDataset

answer_format = {TAIL!r}
math_prompt_1 = {OPEN!r}
math_prompt_2 = {TOOL!r}
agent_prompt = {NOTE!r}


class CustomRLHFDataset(RLHFDataset):
    """A stand-in in the reference's shape."""

    def _read_files_and_tokenize(self):
        dataframes = []
        for parquet_file in self.data_files:
            dataframe = datasets.load_dataset("parquet", data_files=parquet_file)["train"]
            if "data_source" in dataframe.column_names:
                data_source = dataframe["data_source"][0]
            if data_source in ["AIME2025", "AIME2024"]:
                dataframe = dataframe.map(self.map_fn, fn_kwargs={{"data_source": data_source}})
            elif data_source in ["math_dapo", "mega-science"]:
                dataframe = dataframe.map(self.map_fn2, num_proc=16)
            elif data_source == "gpqa_diamond":
                dataframe = dataframe.map(self.map_fn_gpqa, num_proc=16)
            elif data_source == "LiveCodeBench_v6":
                dataframe = dataframe.map(self.map_lcb, num_proc=16)
            else:
                dataframe = dataframe.map(self.map_fn_skywork, num_proc=16)
            dataframes.append(dataframe)
        raise RuntimeError("never run")

    def map_fn(self, row: dict, *, data_source: str = None):
        if data_source == "AIME2024":
            problem, answer = row["Problem"], row["Answer"]
        elif data_source == "AIME2025":
            problem, answer = row["problem"], row["answer"]
        prompt = math_prompt_1 + problem + math_prompt_2 + agent_prompt + answer_format
        return {{"prompt": [{{"role": "user", "content": prompt}}]}}

    def map_fn_gpqa(self, row: dict, *, data_source: str = None):
        problem, answer, domain = row["problem"], row["solution"], row["domain"]
        prompt_1 = f"Work through this {{domain}} problem. \\n\\n"
        prompt = prompt_1 + problem + math_prompt_2 + agent_prompt + answer_format + {GPQA_END!r}
        return {{"prompt": [{{"role": "user", "content": prompt}}]}}

    def map_lcb(self, row: dict, *, data_source: str = None):
        problem = row["problem"]
        start_prompt = {LCB_OPEN!r}
        code_prompt = {LCB_IO!r}
        reward_model = json.loads(row["reward_model"])
        inputs = reward_model["ground_truth"]["inputs"]
        outputs = reward_model["ground_truth"]["outputs"]
        public_examples = "\\nExamples:\\nInput:" + str(inputs) + "\\nOutput:\\n" + str(outputs)
        prompt = start_prompt + problem + public_examples + agent_prompt + code_prompt + {LCB_END!r}
        return {{"prompt": [{{"role": "user", "content": prompt}}]}}

    def map_fn2(self, row: dict):
        content = row["prompt"][0]["content"]
        row["prompt"][0]["content"] = content + {UNITS!r}
        row["agent_name"] = "tool_agent"
        return row

    def map_fn_skywork(self, row: dict):
        content = row["prompt"][0]["content"]
        if "code" in row["data_source"]:
            row["prompt"][0]["content"] = content + agent_prompt + {SUBMIT!r}
        else:
            tail = answer_format + {BARE!r}
            row["prompt"][0]["content"] = math_prompt_1 + content + math_prompt_2 + agent_prompt + tail
        return row
'''


def math_prompt(problem: str) -> str:
    return OPEN + problem + TOOL + NOTE + TAIL


def gpqa_prompt(problem: str, domain: str) -> str:
    return f"Work through this {domain} problem. \n\n" + problem + TOOL + NOTE + TAIL + GPQA_END


def code_prompt(problem: str, inputs: list, outputs: list) -> str:
    examples = "\nExamples:\nInput:" + str(inputs) + "\nOutput:\n" + str(outputs)
    return LCB_OPEN + problem + examples + NOTE + LCB_IO + LCB_END


def checkout(root: Path, source: str = STAND_IN) -> tuple[Path, str]:
    """A plain directory laid out as the reference's checkout, and its reward.py's sha256."""
    path = root / REWARD_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    return root, hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_stand_in_prompts_come_back_exactly(tmp_path: Path) -> None:
    root, sha = checkout(tmp_path / "cleaner")
    templates = write_templates(root, tmp_path / "out" / "reference.yaml", pinned=sha)
    problem = "Find {x} with x + 1 = 3."  # braces in the data stay as they are
    assert templates.render("math", problem) == math_prompt(problem)
    assert templates.render("gpqa", problem, domain="Chemistry") == gpqa_prompt(problem, "Chemistry")
    inputs, outputs = ["3 5\n", 'it\'s "quoted"\n'], ["8\n", "{}\n"]
    assert templates.render("code", problem, tests=(inputs, outputs)) == code_prompt(problem, inputs, outputs)
    assert templates.shows_tests()


def test_the_file_itself_is_accepted_and_the_output_does_not_depend_on_where_it_lies(tmp_path: Path) -> None:
    one, sha = checkout(tmp_path / "one")
    two, _ = checkout(tmp_path / "elsewhere" / "two")
    first = write_templates(one, tmp_path / "a.yaml", pinned=sha)
    second = write_templates(two / REWARD_PATH, tmp_path / "b.yaml", pinned=sha)
    assert first.sha256 == second.sha256  # a log's prompt_template hash names the prompts, not the path


def test_another_commit_is_refused_with_both_hashes(tmp_path: Path) -> None:
    root, sha = checkout(tmp_path / "cleaner")
    with pytest.raises(ReferencePromptError) as caught:
        templates_from_reference(root)  # the stand-in is not the pinned commit's file
    message = str(caught.value)
    assert sha in message and REWARD_SHA256 in message and REFERENCE_COMMIT in message
    assert str(root / REWARD_PATH) in message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ReferencePromptError, match="no recipe/cleaner/reward.py in this directory"):
        templates_from_reference(tmp_path)
    with pytest.raises(ReferencePromptError, match="no such file or directory"):
        templates_from_reference(tmp_path / "absent")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        # a call in the prompt (the problem stripped, say)
        ("prompt = start_prompt + problem +", "prompt = start_prompt + problem.strip() +", "a call in the prompt"),
        # the tests read from another field: not the ground truth it grades with
        ('reward_model["ground_truth"]["inputs"]', 'row["public_inputs"]', "'inputs' is read from"),
        # the tests shown otherwise than by str()
        ('"\\nExamples:\\nInput:" + str(inputs)', '"\\nExamples:\\nInput:" + repr(inputs)', "a call in the prompt"),
        # a method renamed
        ("def map_fn_gpqa(", "def map_gpqa(", "has no method map_fn_gpqa"),
        # the domain no longer in the prompt
        ('f"Work through this {domain} problem. \\n\\n"', '"Work through this problem. \\n\\n"', "does not use"),
        # a constant that is not a string
        ("agent_prompt = ", "agent_prompt = 3 or ", "unexpected expression"),
        # the class renamed
        ("class CustomRLHFDataset(", "class OtherDataset(", "expected one class CustomRLHFDataset"),
    ],
)
def test_a_changed_shape_is_refused_naming_the_file_and_line(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert old in STAND_IN
    root, sha = checkout(tmp_path / "cleaner", STAND_IN.replace(old, new))
    with pytest.raises(ReferencePromptError, match=message) as caught:
        templates_from_reference(root, pinned=sha)
    assert f"{root / REWARD_PATH}:" in str(caught.value)
    assert "shape is not that of commit" in str(caught.value)


def test_the_command_writes_the_file_and_refuses_another_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root, sha = checkout(tmp_path / "cleaner")
    out = tmp_path / "reference.yaml"
    assert main(["prompts", "from-reference", str(root), "--out", str(out)]) == 2
    assert "is not that of recipe/cleaner/reward.py at Open-CLEANER commit" in capsys.readouterr().err
    assert not out.exists()
    monkeypatch.setattr(reference_prompts, "REWARD_SHA256", sha)  # the stand-in pinned as the commit's file
    assert main(["prompts", "from-reference", str(root), "--out", str(out)]) == 0
    assert f"-T prompt_template={out}" in capsys.readouterr().out
    assert load_prompt_templates(out).render("math", "1+1?") == math_prompt("1+1?")


def test_the_file_shows_livecodebench_tests_in_evaluation_and_training(tmp_path: Path) -> None:
    root, sha = checkout(tmp_path / "cleaner")
    templates = write_templates(root, tmp_path / "reference.yaml", pinned=sha)
    problems = load_livecodebench("fixture", start_date="2020-01-01", end_date="2030-12-31", templates=templates)
    add = next(p for p in problems if p.id == "fx_abc001_a")
    graded = ["3 5\n", "0 0\n", "-7 10\n", "1000000000 1000000000\n"]  # public, then private: every graded test
    answers = ["8\n", "0\n", "3\n", "2000000000\n"]
    assert add.prompt == code_prompt(add.metadata["question_content"], graded, answers)
    truth = {"inputs": ["1\n"], "outputs": ["2\n"]}
    row = {
        "prompt": [{"role": "user", "content": "Add one."}],
        "reward_model": {"ground_truth": json.dumps(truth)},
        "data_source": "code_stand_in",
    }
    assert item_from_row(row, 0, templates=templates).prompt == code_prompt("Add one.", ["1\n"], ["2\n"])


# --------------------------------------------------------------------------- training prompts


def training_rows() -> list[dict]:
    """Rows of Open-AgentRL-30K's layout: a math, a code and a choice question (braces in the data kept)."""
    truth = json.dumps({"inputs": ["hi\n"], "outputs": ["hi\n"]})
    return [
        {"data_source": "math_dapo", "prompt": [{"role": "user", "content": "Find {x}: x+1=3."}],
         "reward_model": {"ground_truth": "2"}},
        {"data_source": "train-code-taco-easy", "prompt": [{"role": "user", "content": "Echo a line."}],
         "reward_model": {"ground_truth": truth}},
        {"data_source": "mega-science", "prompt": [{"role": "user", "content": "Pick:\nA) x\nB) y\nC) z\nD) w"}],
         "reward_model": {"ground_truth": "C"}},
    ]  # fmt: skip


def skywork_math(content: str) -> str:
    return OPEN + content + TOOL + NOTE + TAIL + BARE


@pytest.mark.parametrize(
    ("first_source", "expected"),
    [
        # a file whose first row is math_dapo or mega-science: map_fn2's suffix on every row, code included
        ("math_dapo", lambda c, kind: c + UNITS),
        ("mega-science", lambda c, kind: c + UNITS),
        # any other source: map_fn_skywork, its code side for a source naming code, its other side for the rest
        ("train-code-taco-easy", lambda c, kind: c + NOTE + SUBMIT if kind == "code" else skywork_math(c)),
        ("train-math-deepscaler", lambda c, kind: c + NOTE + SUBMIT if kind == "code" else skywork_math(c)),
    ],
)
def test_the_stand_in_training_prompts_come_back_exactly(tmp_path: Path, first_source: str, expected) -> None:
    root, sha = checkout(tmp_path / "cleaner")
    templates = write_templates(root, tmp_path / "training.yaml", pinned=sha, training=first_source)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(row) + "\n" for row in training_rows()), encoding="utf-8")
    items = load_open_agentrl(rows, templates=templates)  # what prepare-data --prompt-template does
    assert [item.kind for item in items] == ["math", "code", "gpqa"]
    for item, row in zip(items, training_rows(), strict=True):
        assert item.prompt == expected(row["prompt"][0]["content"], item.kind)
    text = (tmp_path / "training.yaml").read_text(encoding="utf-8")
    assert f"first row's data_source is {first_source!r}" in text.splitlines()[1]


def test_an_evaluation_source_is_refused_for_training_and_an_evaluation_file_names_the_training_one(
    tmp_path: Path,
) -> None:
    root, sha = checkout(tmp_path / "cleaner")
    with pytest.raises(ReferencePromptError, match="'LiveCodeBench_v6' is mapped with map_lcb.*without --training"):
        templates_from_reference(root, pinned=sha, training="LiveCodeBench_v6")
    evaluation = write_templates(root, tmp_path / "reference.yaml", pinned=sha)
    with pytest.raises(DataError, match=r"row 2: a choice question.*\{domain\}.*from-reference --training"):
        item_from_row(training_rows()[2], 2, templates=evaluation)
    # a file without a gpqa template renders a choice question as the project's file does
    plain = PromptTemplates({"math": "M {problem}", "code": "C {problem}"}, source="plain", sha256="")
    choice = training_rows()[2]["prompt"][0]["content"]
    assert item_from_row(training_rows()[2], 2, templates=plain).prompt == "M " + choice + CHOICE_INSTRUCTION


@pytest.mark.parametrize(
    ("old", "new", "first_source", "message"),
    [
        # map_fn_skywork chooses the code prompt by another field
        ('if "code" in row["data_source"]:', 'if "code" in row["ability"]:', "other", "the message is chosen by"),
        # map_fn2 reads another message of the chat
        ('content = row["prompt"][0]["content"]\n        row["prompt"][0]["content"] = content + ',
         'content = row["prompt"][1]["content"]\n        row["prompt"][0]["content"] = content + ',
         "math_dapo", "'content' is read from"),
        # a call in a training prompt
        ("content + agent_prompt", "content.strip() + agent_prompt", "other", "a call in the prompt"),
        # map_fn2 sets the message twice
        ('        row["agent_name"] = "tool_agent"\n        return row\n\n    def map_fn_skywork',
         '        row["prompt"][0]["content"] = content\n        return row\n\n    def map_fn_skywork',
         "math_dapo", "it is set 2 times"),
        # the dispatch maps a file otherwise than with one of its methods
        ("dataframe.map(self.map_fn2, num_proc=16)", "dataframe.map(lambda r: r, num_proc=16)", "math_dapo",
         r"expected one dataframe.map\(self.<method>\)"),
        # the dispatch has no else (a source it does not name would keep its own prompt)
        ("            else:\n                dataframe = dataframe.map(self.map_fn_skywork",
         "            elif data_source == 'x':\n                dataframe = dataframe.map(self.map_fn_skywork",
         "other", "has no else"),
        # the dispatch method renamed
        ("def _read_files_and_tokenize(", "def _read_files(", "other", "has no method _read_files_and_tokenize"),
    ],
)  # fmt: skip
def test_a_changed_training_shape_is_refused_naming_the_file_and_line(
    tmp_path: Path, old: str, new: str, first_source: str, message: str
) -> None:
    assert STAND_IN.count(old) == 1
    root, sha = checkout(tmp_path / "cleaner", STAND_IN.replace(old, new))
    assert templates_from_reference(root, pinned=sha)  # the evaluation prompts are still read
    with pytest.raises(ReferencePromptError, match=message) as caught:
        templates_from_reference(root, pinned=sha, training=first_source)
    assert f"{root / REWARD_PATH}:" in str(caught.value)
    assert "shape is not that of commit" in str(caught.value)


def test_the_command_writes_the_training_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root, sha = checkout(tmp_path / "cleaner")
    monkeypatch.setattr(reference_prompts, "REWARD_SHA256", sha)
    out = tmp_path / "training.yaml"
    assert main(["prompts", "from-reference", str(root), "--training", "--out", str(out)]) == 0
    assert f"prepare-data --prompt-template {out}" in capsys.readouterr().out
    assert load_prompt_templates(out).render("code", "Echo.") == "Echo." + UNITS  # Open-AgentRL-30K's first source
    assert main(["prompts", "from-reference", str(root), "--training", "other", "--out", str(out)]) == 0
    assert load_prompt_templates(out).render("code", "Echo.") == "Echo." + NOTE + SUBMIT
    assert main(["prompts", "from-reference", str(root), "--training", "gpqa_diamond", "--out", str(out)]) == 2
    assert "mapped with map_fn_gpqa" in capsys.readouterr().err
