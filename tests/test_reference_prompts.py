"""``python -m harness prompts from-reference``: the reference's prompts read from its source, never run.

The reference is Open-CLEANER at commit 91e40ad: ``recipe/cleaner/reward.py`` builds its evaluation
prompts in ``CustomRLHFDataset`` (module constants at lines 40-43; AIME in ``map_fn``, line 76; GPQA in
``map_fn_gpqa``, lines 88-89; LiveCodeBench in ``map_lcb``, lines 101-107, its ground-truth tests shown
as ``str(inputs)`` and ``str(outputs)`` at 103-106). Its text is not the project's: these tests write a
stand-in file in the same shape, with wording of their own, and compare what the command writes with
the stand-in's own concatenations.
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
from harness.core.prompts import load_prompt_templates
from trainers.core.data import item_from_row

# The stand-in's pieces (invented wording; a brace, a trailing space and quotes, as in the real file).
TAIL = "\nEnd with \\boxed{'your answer'}."
OPEN = "Work through this problem. \n\n"
TOOL = "\n\nThe python tool is there to check things."
NOTE = "\n\n**Plan first, then use tools.**"
LCB_OPEN = "Write a Python program for this task.\n\n"
LCB_IO = '\n\nRead stdin, write stdout.\n```python\n# CODE\n"'
LCB_END = "\nSubmit the code within ```python\n# CODE\n```."
GPQA_END = "\n Put the letter in \\boxed{}"

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
