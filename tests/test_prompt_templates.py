"""Prompt templates as data: the project's file renders today's prompts byte for byte; broken files fail at load."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.benchmarks import datasets as ds
from harness.benchmarks import registry
from harness.core import prompts
from harness.core.prompts import (
    DEFAULT_TEMPLATES_PATH,
    PromptTemplateError,
    PromptTemplates,
    load_prompt_templates,
)
from trainers.core.data import bignum_items, generated_items, item_from_row


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- the project's prompts, pinned

#: sha256 of each prompt as the string constants rendered it before the prompts became a data file.
#: Committed baselines (results/baselines) depend on these bytes: a change here is a change of every score.
PINNED = {
    "math-plain": "c7c4d4375401496167ac43c77afe9aa841cb9af6c0263012e9b99a45e1ad2140",
    "math-braces": "991e7eb973d294ab2948d69d6ec94b6c64f8ed37281ee025a5cfd4420b235770",
    "gpqa": "d46cd11bc6b77eee91b6839d47e54d1d211f24e58a5c68699fbff93fa67fc9c1",
    "code-stdin": "5f9e6e6a547ddb740f2dacd2fdab928bcfca2adfa60e74d6716d43722480d6f6",
    "code-starter": "823e4c7a860afb1845580e5a55447bf6ceb59a4e5919023a6b128f0dbfd45d54",
    "code-blank-starter": "9fc4840b156bc9c619abcc2de69be1d34ee3263fa0107cd06bb395796bf8b792",
}
MATH_BRACES = "  Find $\\frac{1}{2}$ of {x} and {problem}.\n\nThen box it.  \n"
GPQA_QUESTION, GPQA_CHOICES = "  Which is a noble gas?\n", [" Argon", "Oxygen ", "Nitrogen", "Carbon {x}"]
STARTER_QUESTION = "  Return x doubled.  "
STARTER = "class Solution:\n    def double(self, x: int) -> int:\n        \n"

#: Two prompts in full, so that a failure shows what changed.
CODE_STARTER_PROMPT = (
    "Solve the following programming problem in Python 3. You may use the python tool to run and test your "
    "code before answering. Complete the starter code below; your solution is called through it, not through "
    "standard input.\n\nReturn x doubled.\n\nUse this starter code:\n```python\nclass Solution:\n    def double("
    "self, x: int) -> int:\n```\n\nWrite your complete final solution in a single ```python code block at the end "
    "of your answer."
)
GPQA_PROMPT = (
    "Answer the following multiple-choice question. You may use the python tool for calculations. Reason step "
    "by step, then give the letter of your final answer (one of A, B, C, D) within \\boxed{}, for example "
    "\\boxed{A}.\n\nWhich is a noble gas?\n\nA) Argon\nB) Oxygen\nC) Nitrogen\nD) Carbon {x}"
)


def _wrapper_prompts() -> dict[str, str]:
    return {
        "math-plain": prompts.math_prompt("What is 1+1?"),
        "math-braces": prompts.math_prompt(MATH_BRACES),
        "gpqa": prompts.gpqa_prompt(GPQA_QUESTION, GPQA_CHOICES),
        "code-stdin": prompts.code_prompt("Read an integer n and print n+1.\n"),
        "code-starter": prompts.code_prompt(STARTER_QUESTION, STARTER),
        "code-blank-starter": prompts.code_prompt("Echo a line.", "   \n"),
    }


def test_the_prompt_functions_render_the_pinned_bytes() -> None:
    rendered = _wrapper_prompts()
    assert rendered["code-starter"] == CODE_STARTER_PROMPT
    assert rendered["gpqa"] == GPQA_PROMPT
    assert {name: _sha(text) for name, text in rendered.items()} == PINNED


def test_the_default_file_renders_what_the_functions_render() -> None:
    templates = load_prompt_templates()
    rendered = {
        "math-plain": templates.render("math", "What is 1+1?"),
        "math-braces": templates.render("math", MATH_BRACES),
        "gpqa": templates.render("gpqa", prompts.gpqa_problem(GPQA_QUESTION, GPQA_CHOICES)),
        "code-stdin": templates.render("code", "Read an integer n and print n+1.\n"),
        "code-starter": templates.render("code", STARTER_QUESTION, starter_code=STARTER),
        "code-blank-starter": templates.render("code", "Echo a line.", starter_code="   \n"),
    }
    assert rendered == _wrapper_prompts()
    assert {name: _sha(text) for name, text in rendered.items()} == PINNED
    assert templates.source == str(DEFAULT_TEMPLATES_PATH)
    assert templates.sha256 == hashlib.sha256(DEFAULT_TEMPLATES_PATH.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("benchmark", "digest"),
    [
        ("aime24", "36b19c332b3a3e9c99db493b6f2f083ad0b7abbe52598ae9f4cd7076e17c06db"),
        ("aime25", "68909138db277682bf7e5aa98c5852338618fd4c20aabd378be2a54614d3a0fe"),
        ("gpqa", "3f340992ea2fdadde8e19e5eaaaa3e232587a62ecb5e36315d19f3b4f76c6d54"),
        ("livecodebench", "4d03d2af8dc5d0823277d2c117d7f798782081f204a348f796fe435aa662dcf2"),
    ],
)
def test_fixture_prompts_are_unchanged(benchmark: str, digest: str) -> None:
    default = registry.load(benchmark, path="fixture")
    assert _sha("\x00".join(p.prompt for p in default)) == digest
    explicit = registry.load(benchmark, path="fixture", templates=load_prompt_templates(DEFAULT_TEMPLATES_PATH))
    assert explicit == default


def test_training_prompts_are_unchanged() -> None:
    rows = [
        {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": "What is 2+3?"}],
            "reward_model": {"ground_truth": "5"},
            "extra_info": {"index": 7},
        },
        {
            "data_source": "skywork_code",
            "prompt": [{"role": "user", "content": "Echo a line."}],
            "reward_model": {"ground_truth": json.dumps({"inputs": ["hi\n"], "outputs": ["hi\n"]})},
        },
        {
            "data_source": "mega-science",
            "prompt": [{"role": "user", "content": "Pick:\nA) x\nB) y\nC) z\nD) w"}],
            "reward_model": {"ground_truth": "C"},
        },
    ]
    digests = [_sha(item_from_row(row, i).prompt) for i, row in enumerate(rows)]
    assert digests == [
        "eedcebaa46c6c9b170a706087dfb8a37b7c9ff00d43681e48920643ccc9ea314",
        "9fc4840b156bc9c619abcc2de69be1d34ee3263fa0107cd06bb395796bf8b792",
        "714b801c9f905839148cab2ca179b70756f47c649759db1b388c1aa175e41a07",
    ]
    assert _sha("\x00".join(i.prompt for i in bignum_items())) == (
        "9a9b253970e84613fd48836305d0059cf078010b89f9d5cecea3c5fa4d27cd8d"
    )
    assert _sha("\x00".join(i.prompt for i in generated_items(20, seed=5))) == (
        "625e334ae4e16558bd9c58a20b4db95334cb4f52a69194feeb1795e182ee38ed"
    )


# --------------------------------------------------------------------------- other files


def _write(tmp_path: Path, text: str, name: str = "prompts.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_the_default_file_defines_every_kind_and_is_the_default() -> None:
    templates = load_prompt_templates()
    templates.require(["math", "gpqa", "code"])
    assert set(templates.templates) == {"math", "gpqa", "code"}
    assert load_prompt_templates(None) is prompts.default_templates()


def test_a_yaml_file_renders_its_own_wording(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "math: |-\n  Work it out. Box it: \\boxed{{}}.\n\n  {problem}\n"
        "gpqa: 'A {domain} question:\n\n  {problem}'\n"
        "code: |-\n  {io_rule}\n  {problem}\n  {starter}END\n",
    )
    templates = load_prompt_templates(path)
    assert templates.source == str(path)
    assert templates.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert templates.render("math", "  What is {x}?  ") == "Work it out. Box it: \\boxed{}.\n\nWhat is {x}?"
    assert templates.render("gpqa", "Q?\nA) 1", domain="Physics") == "A Physics question:\nQ?\nA) 1"
    assert templates.render("code", "Echo.") == f"{prompts.CODE_STDIN_RULE}\nEcho.\nEND"
    with_starter = templates.render("code", "Echo.", starter_code="def f():\n    pass\n")
    assert with_starter.startswith(prompts.CODE_STARTER_RULE) and "```python\ndef f():\n    pass\n```" in with_starter


def test_a_json_file_is_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps({"math": "{problem} -> \\boxed{{}}"}), "prompts.json")
    templates = load_prompt_templates(str(path))
    assert templates.render("math", "1+1") == "1+1 -> \\boxed{}"
    assert templates.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_loaders_render_with_the_given_templates(tmp_path: Path) -> None:
    templates = load_prompt_templates(
        _write(tmp_path, "math: 'M {problem}'\ngpqa: 'G[{domain}] {problem}'\ncode: 'C {problem}{starter}'\n")
    )
    (aime,) = ds.load_aime24("fixture", limit=1, templates=templates)
    assert aime.prompt == "M " + aime.metadata["problem"].strip()
    gpqa = registry.load("gpqa", path="fixture", limit=1, templates=templates)[0]
    assert gpqa.prompt == f"G[{gpqa.metadata['domain']}] " + prompts.gpqa_problem(
        gpqa.metadata["question"], gpqa.metadata["choices"]
    )
    code = ds.load_livecodebench(
        "fixture", limit=1, start_date="2020-01-01", end_date="2030-12-31", templates=templates
    )
    assert code[0].prompt.startswith("C " + code[0].metadata["question_content"].strip())
    # per-sample metadata does not depend on the templates
    assert [p.metadata for p in ds.load_aime24("fixture", templates=templates)] == [
        p.metadata for p in ds.load_aime24("fixture")
    ]


# --------------------------------------------------------------------------- broken files


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("math: [unclosed\n", r"not valid YAML"),
        ("- math\n- code\n", r"expected a mapping of kind to template .*got list"),
        ("", r"the file is empty"),
        ("{}\n", r"no template"),
        ("physics: '{problem}'\n", r"unknown kind 'physics' \(kinds: math, gpqa, code\)"),
        ("math: 'Solve it.'\n", r"template 'math': no \{problem\} placeholder"),
        ("math: '{problem} in \\boxed{}'\n", r"template 'math': unknown placeholder \{\}.*doubled"),
        ("math: '{question}'\n", r"template 'math': unknown placeholder \{question\} \(allowed: \{problem\}\)"),
        ("math: '{problem} {starter}'\n", r"template 'math': unknown placeholder \{starter\}"),
        ("gpqa: '{problem} {io_rule}'\n", r"template 'gpqa': unknown placeholder \{io_rule\}"),
        ("math: '{problem} }'\n", r"template 'math': unbalanced brace"),
        ("math: '{problem!r}'\n", r"template 'math': placeholder \{problem\} has a conversion"),
        ("math: 3\n", r"template 'math' must be text, got int"),
        ("math:\n  text: '{problem}'\n", r"template 'math' must be text, got dict"),
    ],
)
def test_broken_files_fail_at_load_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(PromptTemplateError, match=message) as info:
        load_prompt_templates(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_missing_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(PromptTemplateError, match=r"missing.yaml: no such file"):
        load_prompt_templates(tmp_path / "missing.yaml")
    with pytest.raises(PromptTemplateError, match=r"is a directory"):
        load_prompt_templates(tmp_path)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"math: '\xff{problem}'\n")
    with pytest.raises(PromptTemplateError, match=r"binary.yaml: not UTF-8 text"):
        load_prompt_templates(binary)
    broken_json = _write(tmp_path, "{'math': 1}", "p.json")
    with pytest.raises(PromptTemplateError, match=r"p.json: not valid JSON"):
        load_prompt_templates(broken_json)


def test_a_kind_the_file_lacks_fails_before_any_problem_is_built(tmp_path: Path) -> None:
    path = _write(tmp_path, "math: '{problem}'\n")
    templates = load_prompt_templates(path)
    with pytest.raises(PromptTemplateError, match=rf"{path}: no template for kind 'code'.*defines: math\)"):
        templates.require(["math", "code"])
    with pytest.raises(PromptTemplateError, match="no template for kind 'gpqa'"):
        ds.load_gpqa("fixture", templates=templates)
    with pytest.raises(PromptTemplateError, match="no template for kind 'code'"):
        templates.render("code", "x")


def test_a_domain_template_refuses_a_question_without_domain(tmp_path: Path) -> None:
    templates = load_prompt_templates(_write(tmp_path, "gpqa: 'A {domain} question: {problem}'\n"))
    with pytest.raises(PromptTemplateError, match=r"uses \{domain\}, but this question has no domain"):
        templates.render("gpqa", "Q?")


def test_a_code_template_shows_the_tests_as_python_prints_their_lists(tmp_path: Path) -> None:
    templates = load_prompt_templates(_write(tmp_path, "code: '{problem} In:{test_inputs} Out:{test_outputs}'\n"))
    assert templates.shows_tests() and not load_prompt_templates().shows_tests()
    shown = templates.render("code", "Add.", tests=(["1 2\n", "it's"], ["3\n", '"q"']))
    assert shown == "Add. In:['1 2\\n', \"it's\"] Out:['3\\n', '\"q\"']"
    with pytest.raises(PromptTemplateError, match=r"shows the problem's tests .* but this problem has none"):
        templates.render("code", "Add.")
    with pytest.raises(ValueError, match="2 inputs but 1 outputs"):
        templates.render("code", "Add.", tests=(["1", "2"], ["3"]))
    with pytest.raises(PromptTemplateError, match=r"template 'math': unknown placeholder \{test_inputs\}"):
        load_prompt_templates(_write(tmp_path, "math: '{problem} {test_inputs}'\n", "m.yaml"))


def test_templates_built_in_code_are_checked_too() -> None:
    with pytest.raises(PromptTemplateError, match=r"here: template 'code': no \{problem\}"):
        PromptTemplates(templates={"code": "{starter}"}, source="here", sha256="0" * 64)
    built = PromptTemplates(templates={"math": "{problem}"}, source="here", sha256="0" * 64)
    assert hash(built) == hash(PromptTemplates(templates={"math": "{problem}"}, source="here", sha256="0" * 64))
    with pytest.raises(TypeError):
        built.templates["math"] = "changed"  # type: ignore[index]


# --------------------------------------------------------------------------- training data


def _verl_rows(path: Path) -> Path:
    rows = [
        {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": "What is 2+3?"}],
            "reward_model": {"ground_truth": "5"},
            "extra_info": {"index": 0},
        },
        {
            "data_source": "skywork_code",
            "prompt": [{"role": "user", "content": "Echo a line."}],
            "reward_model": {"ground_truth": json.dumps({"inputs": ["hi\n"], "outputs": ["hi\n"]})},
            "extra_info": {"index": 1},
        },
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _prepare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainers", "prepare-data", *args], capture_output=True, text=True, timeout=300
    )


def test_prepare_data_takes_a_prompt_template(tmp_path: Path) -> None:
    source = _verl_rows(tmp_path / "rows.jsonl")
    default_out, custom_out = tmp_path / "default.jsonl", tmp_path / "custom.jsonl"
    done = _prepare("--source", str(source), "--out", str(default_out))
    assert done.returncode == 0, done.stderr
    assert f"prompts: {DEFAULT_TEMPLATES_PATH}" in done.stdout
    default = [json.loads(line)["prompt"] for line in default_out.read_text().splitlines()]
    assert default == [prompts.math_prompt("What is 2+3?"), prompts.code_prompt("Echo a line.")]

    template = _write(tmp_path, "math: 'MATH {problem}'\ncode: 'CODE {problem}'\n")
    done = _prepare("--source", str(source), "--out", str(custom_out), "--prompt-template", str(template))
    assert done.returncode == 0, done.stderr
    custom = [json.loads(line)["prompt"] for line in custom_out.read_text().splitlines()]
    assert custom == ["MATH What is 2+3?", "CODE Echo a line."]

    broken = _write(tmp_path, "math: 'no placeholder'\n", "broken.yaml")
    done = _prepare("--source", str(source), "--out", str(tmp_path / "x.jsonl"), "--prompt-template", str(broken))
    assert done.returncode == 2 and "broken.yaml" in done.stderr and "{problem}" in done.stderr
    assert not (tmp_path / "x.jsonl").exists()
