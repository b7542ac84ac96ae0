"""The reference's judge: its strict box check on the whole decoded response, next to the lenient judge.

Reference files are Open-CLEANER's (commit 91e40ad), cited as path:line:

- ``recipe/cleaner/reward.py:226-229``: every data source without ``code`` in its name is
  judged by ``math_dapo.compute_score(..., strict_box_verify=True)``; AIME's ground truth is
  ``str(answer)`` (``:81``), GPQA's ``str(row['solution'])`` (``:93``), the letter its prompt
  asks to box (``:89``).
- ``verl/verl/utils/reward_score/math_dapo.py``: ``compute_score`` keeps the last 300
  characters (``:260``), the strict check the last 100 of those (``:211``), takes the last
  ``\\boxed{`` (``:29``), matches its braces or finds no answer (``:37-47``) and compares the
  content with the ground truth as strings (``:217``); ``acc`` is that comparison (``:266``).
- ``verl/verl/workers/reward_manager/dapo.py:82`` (and the reward loop's
  ``verl/verl/experimental/reward_loop/reward_manager/dapo.py:59-61``): the response is
  decoded with ``skip_special_tokens=True``; the eval scripts use this manager
  (``recipe/cleaner/eval/eval_qwen3_4b_aime_gpqa.sh:38``) and report ``acc``
  (``verl/verl/trainer/ppo/ray_trainer.py:1158``).
- ``verl/verl/experimental/agent_loop/tool_agent_loop.py``: the response is every id after
  the prompt (``:293``): each generation (``:380-382``) and each turn's tool results,
  ``apply_chat_template(tool_messages, add_generation_prompt=True)`` minus the default system
  prompt (``:603-607``, ``:620-621``; the system prompt is ``apply_chat_template([{}])``,
  ``verl/verl/utils/chat_template.py:23``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai import score as inspect_score
from inspect_ai.log import EvalLog, read_eval_log
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import Target
from inspect_ai.solver import TaskState

from harness.benchmarks import scoring
from harness.benchmarks.scoring import STRICT_WINDOW, reference_verdict
from harness.core import protocol
from harness.core.messages import Message, tool
from harness.core.response import QWEN_SPECIAL_TOKENS, response_text
from harness.evals.convert import from_inspect, to_inspect
from harness.evals.scorers import gpqa_scorer, math_scorer

ROOT = Path(__file__).resolve().parents[1]

PROMPT = [Message("system", "Solve it."), Message("user", "What is 5 * 5?")]


def assistant(content: str, code: str | None = None) -> Message:
    call = None if code is None else protocol.ToolCall(code=code, raw=protocol.serialize_call(code), id="c1")
    return Message("assistant", content, call=call)


def final_text(messages: list[Message]) -> str:
    """What the lenient judge reads (the solver's ``state.output``): the last assistant turn, if it made no call."""
    last = [m for m in messages if m.role == "assistant"][-1]
    return "" if last.call is not None else last.text


def run_scorer(messages: list[Message], target: str, kind: str, judge: str) -> dict[str, float]:
    """The Inspect scorer of ``kind`` on a sample holding ``messages``, as the solver leaves it."""
    state = TaskState(
        model="replay/x",  # type: ignore[arg-type]
        sample_id="s1",
        epoch=1,
        input="What is 5 * 5?",
        messages=to_inspect(messages),
        output=ModelOutput.from_content(model="replay/x", content=final_text(messages)),
    )
    make = math_scorer if kind == "math" else gpqa_scorer
    result = asyncio.run(make(judge=judge)(state, Target(target)))
    assert result.metadata is not None and result.metadata["judge"] == judge
    return result.value  # type: ignore[return-value]


@dataclass(frozen=True)
class Case:
    name: str
    messages: list[Message]
    target: str
    kind: str
    lenient: bool
    reference: bool


TOOL_CALL = assistant("Let me check.\n", "print(5 * 5)")
CASES = [
    # math_dapo.py:211, :29, :217: the box is in the last 100 characters and equals "25"
    Case(
        "box in the final answer",
        [TOOL_CALL, tool("25\n", "c1"), assistant("So \\boxed{25}.")],
        "25",
        "math",
        True,
        True,
    ),
    # math_dapo.py:217 compares strings ("025" != "25"); reward.py:81 leaves the ground truth as str(answer)
    Case("leading zero", [assistant("So \\boxed{025}.")], "25", "math", True, False),
    # math_dapo.py:211: only the last 100 characters are read
    Case("box then long text", [assistant("So \\boxed{25}. " + "Checking once more. " * 6)], "25", "math", True, False),
    # tool_agent_loop.py:603-607, :620-621 and dapo.py:82: the tool result is in the decoded response;
    # the trajectory stopped on it (a budget), so the lenient judge has no final answer
    Case(
        "ends on a tool output with a box",
        [TOOL_CALL, tool("\\boxed{25}", "c1")],
        "25",
        "math",
        False,
        True,
    ),
    # reward.py:89, :93, :229: GPQA is the same strict box on the letter
    Case("gpqa box", [assistant("The answer is \\boxed{C}")], "C", "gpqa", True, True),
    Case("gpqa parenthesized box", [assistant("The answer is \\boxed{(C)}")], "C", "gpqa", True, False),
    Case("gpqa phrase without box", [assistant("The answer is C.")], "C", "gpqa", True, False),
    # math_dapo.py:211 then :29 and :37-47: the window starts inside the box, so no "\boxed{" is read
    Case("box cut by the window", [assistant("So \\boxed{25}" + "." * (STRICT_WINDOW - 5))], "25", "math", True, False),
    # math_dapo.py:29, :37-47: the last "\boxed{" never closes: no answer, the complete box before it is ignored
    # (the lenient judge reads the last complete box)
    Case("unclosed last box", [assistant("So \\boxed{25}, or \\boxed{2")], "25", "math", True, False),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_verdicts_of_both_judges(case: Case) -> None:
    response = response_text([*PROMPT, *case.messages])
    assert reference_verdict(response, case.target, case.kind) is case.reference  # type: ignore[arg-type]
    lenient = run_scorer([*PROMPT, *case.messages], case.target, case.kind, "lenient")
    reference = run_scorer([*PROMPT, *case.messages], case.target, case.kind, "reference")
    assert lenient["accuracy"] == float(case.lenient)
    assert reference["accuracy"] == float(case.reference)
    assert reference["accuracy_lenient"] == float(case.lenient)
    assert "accuracy_lenient" not in lenient


def test_lenient_mode_keeps_the_value_keys() -> None:
    """The lenient judge's value: today's keys, plus ``judge_timeout`` for math (math-verify can time out)."""
    counters = {"tool_failure_rate", "tool_calls", "failures_kept", "saar_shallow", "saar_deep", "saar_purified"}
    base = {"accuracy", "tokens_generated", *counters}
    messages = [*PROMPT, assistant("\\boxed{25}")]
    assert set(run_scorer(messages, "25", "gpqa", "lenient")) == base
    assert set(run_scorer(messages, "25", "math", "lenient")) == base | {"judge_timeout"}
    assert set(run_scorer(messages, "25", "math", "reference")) == base | {"judge_timeout", "accuracy_lenient"}


def test_an_unknown_judge_is_refused() -> None:
    with pytest.raises(ValueError, match="judge must be one of"):
        math_scorer(judge="strict")


def test_response_text_frames_tool_results_as_qwen_decodes_them() -> None:
    messages = [*PROMPT, TOOL_CALL, tool("25", "c1"), assistant("\\boxed{25}")]
    call = protocol.serialize_call("print(5 * 5)")
    assert response_text(messages) == (
        f"Let me check.\n{call}user\n<tool_response>\n25\n</tool_response>\nassistant\n\\boxed{{25}}"
    )
    assert response_text(PROMPT) == ""
    # a trajectory stopped on a tool result ends with the next turn's header, as the reference's ids do
    assert response_text([*PROMPT, TOOL_CALL, tool("7", "c1")]).endswith("</tool_response>\nassistant\n")


def test_the_dropped_tokens_are_qwens_special_added_tokens() -> None:
    from qwen_artifacts import QWEN3_ADDED, QWEN25_ADDED

    for added in (QWEN25_ADDED, QWEN3_ADDED):
        assert set(QWEN_SPECIAL_TOKENS) == {text for text, special in added if special}
    assert "<tool_call>" not in QWEN_SPECIAL_TOKENS and "<tool_response>" not in QWEN_SPECIAL_TOKENS


def verl_decoded_response(tok, messages: list[Message]) -> str:
    """The reference's pipeline on Qwen's tokenizer: the agent loop's response ids, decoded as its reward manager does.

    The assistant turns are encoded (a model samples them; their text is NFC here, so the ids
    decode back to it), each followed by the stop token; the tool results of a turn are the
    chat template's rendering without the default system prompt (tool_agent_loop.py:603-607).
    """
    start = next(i for i, m in enumerate(messages) if m.role == "assistant")
    system_prompt = tok.encode(tok.apply_chat_template([{}], tokenize=False), add_special_tokens=False)
    ids: list[int] = []
    pending: list[dict[str, str]] = []

    def flush() -> None:
        if pending:
            text = tok.apply_chat_template(pending, add_generation_prompt=True, tokenize=False)
            ids.extend(tok.encode(text, add_special_tokens=False)[len(system_prompt) :])
            pending.clear()

    for m in messages[start:]:
        if m.role == "assistant":
            flush()
            ids.extend(tok.encode(m.text + "<|im_end|>", add_special_tokens=False))
        else:
            pending.append({"role": m.role, "content": m.content})
    flush()
    return tok.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("family", ["qwen2.5", "qwen3"])
def test_response_text_is_the_references_decoded_response(family: str) -> None:
    """Exact on Qwen2.5-7B-Instruct's and Qwen3-4B-Instruct-2507's tokenizer and chat template."""
    from qwen_artifacts import qwen_tokenizer

    tok = qwen_tokenizer(family)  # type: ignore[arg-type]
    messages = [
        *PROMPT,
        assistant("Compute it. Ünïcode ∑ 😊\n", "x = 5\nprint(x * x, '<tool_call>')"),
        tool("25 <tool_call>\nTraceback: e\u0301 <|im_end|> stray", "c1"),  # raw marker: a special token, dropped
        assistant("Check again.", "print(25)"),
        tool("25", "c2"),
        tool("a second result of the same turn", "c3"),
        assistant("So the answer is \\boxed{25}."),
    ]
    assert response_text(messages) == verl_decoded_response(tok, messages)
    stopped = messages[:4]  # stopped on a tool result
    assert response_text(stopped) == verl_decoded_response(tok, stopped)


# --------------------------------------------------------------------------- Inspect logs, scored again


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EvalLog]:
    tmp = tmp_path_factory.mktemp("logs")
    cwd = os.getcwd()
    os.chdir(ROOT)  # this Inspect version resolves task files only by paths relative to the working directory
    try:
        out = {}
        for task in ("aime24", "gpqa"):
            [log] = inspect_eval(
                f"tasks/{task}.py",
                model=f"replay/{task}.yaml",
                task_args={"saar": True, "data": "fixture", "sandbox": "local"},
                log_dir=str(tmp),
                display="none",
            )
            assert log.status == "success", log.error
            out[task] = log
        return out
    finally:
        os.chdir(cwd)


def values(log: EvalLog) -> list[dict[str, float]]:
    return [next(iter(s.scores.values())).value for s in log.samples or []]  # type: ignore[misc, union-attr]


def metric(log: EvalLog, name: str) -> float:
    assert log.results is not None
    [score] = [s for s in log.results.scores if s.name == name]
    return score.metrics["mean"].value


#: The replayed answers under the reference's judge: aime24's first target is the fixture's string "025" and the
#: model boxed 25 (math_dapo.py:217 compares strings); gpqa's first sample is cut inside a tool call (no box)
#: and its third answers "Answer: (A)" without a box. The lenient judge counts 4/4 and 3/4.
REFERENCE_ACCURACY = {"aime24": [0.0, 1.0, 1.0, 1.0], "gpqa": [0.0, 1.0, 0.0, 1.0]}


@pytest.mark.parametrize(("task", "make"), [("aime24", math_scorer), ("gpqa", gpqa_scorer)])
def test_a_log_scored_again_with_the_reference_judge(logs, task, make) -> None:
    log = logs[task]
    rescored = inspect_score(log, make(judge="reference"), action="overwrite", display="none")
    assert [v["accuracy"] for v in values(rescored)] == REFERENCE_ACCURACY[task]
    assert [v["accuracy_lenient"] for v in values(rescored)] == [v["accuracy"] for v in values(log)]
    for sample in rescored.samples or []:
        response = response_text(from_inspect(sample.messages))
        score = next(iter(sample.scores.values()))  # type: ignore[union-attr]
        assert score.metadata is not None and score.metadata["judge"] == "reference"
        assert score.answer == scoring.reference_answer(response)
    assert metric(rescored, "accuracy") == pytest.approx(sum(REFERENCE_ACCURACY[task]) / 4)
    assert metric(rescored, "accuracy_lenient") == pytest.approx(metric(log, "accuracy"))


@pytest.mark.parametrize("spec", ["math_scorer", "harness/evals/scorers.py@math_scorer"])
def test_inspect_score_cli_runs_the_reference_judge(logs, spec, tmp_path: Path) -> None:
    out = tmp_path / "rescored.eval"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "inspect_ai",
            "score",
            logs["aime24"].location,
            "--scorer",
            spec,
            "-S",
            "judge=reference",
            "--action",
            "overwrite",
            "--output-file",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rescored = read_eval_log(str(out))
    scores = [next(iter(s.scores.values())) for s in rescored.samples or []]  # type: ignore[union-attr]
    assert scores and all(s.metadata and s.metadata["judge"] == "reference" for s in scores)
    assert [s.value["accuracy"] for s in scores] == REFERENCE_ACCURACY["aime24"]  # type: ignore[index]
    assert all("accuracy_lenient" in s.value for s in scores)  # type: ignore[operator]


def test_a_judge_timeout_is_counted_wrong_and_flagged_in_a_rescored_log(logs, monkeypatch) -> None:
    """An answer math-verify gives up on: not correct, ``judge_timeout`` 1, the reason in the explanation."""
    monkeypatch.setattr(scoring, "VERIFY_TIMEOUT", 1)
    log = logs["aime24"].model_copy(deep=True)
    sample = log.samples[0]  # type: ignore[index]
    tower = "So \\boxed{9^{9^{9^{9^{9}}}}}"
    sample.output = ModelOutput.from_content(model=sample.output.model, content=tower)
    sample.target = "1"
    rescored = inspect_score(log, math_scorer(), action="overwrite", display="none")
    first = next(iter(rescored.samples[0].scores.values()))  # type: ignore[index]
    assert first.value["accuracy"] == 0.0 and first.value["judge_timeout"] == 1.0  # type: ignore[index]
    assert "timed out" in (first.explanation or "")
    assert all(v["judge_timeout"] == 0.0 for v in values(rescored)[1:])
    assert metric(rescored, "judge_timeout") == pytest.approx(1 / len(values(rescored)))
