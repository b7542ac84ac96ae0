"""The two tool environments, pinned by what a model's turn leads to: the program that runs and the text
the model sees next, and the response budget.

Expected values of the ``reference`` profile come from reading Open-CLEANER at commit 91e40ad (files named
in each table) and running its tool path on these inputs; the program runs here for real, in the local sandbox.
"""

from __future__ import annotations

import json
import random

import pytest

from harness.core import protocol
from harness.core.messages import Generation, Message, user
from harness.core.rollout import RolloutConfig, Trajectory, rollout
from harness.core.saar import SaarConfig
from harness.core.toolenv import PROJECT, REFERENCE, ToolEnv, get_tool_env


def call(code: str, name: str, reasoning: str = "") -> str:
    return f"{reasoning}<tool_call>\n{json.dumps({'name': name, 'arguments': {'code': code}})}\n</tool_call>"


async def first_result(env: ToolEnv, turn: str, sandbox) -> str | None:
    """The text the model sees after ``turn`` (None: the turn was the answer), SAAR off."""
    turns = iter([turn, "done"])

    async def generate(context: list[Message], *, seed: int | None = None, max_tokens: int | None = None):
        return Generation(next(turns), output_tokens=5)

    config = RolloutConfig(tool_env=env, timeout=env.timeout, output_chars=env.output_chars)
    traj = await rollout([user("q")], generate, sandbox, config, random.Random(0))
    tools = [m for m in traj.messages if m.role == "tool"]
    return tools[0].content if tools else None


# code-judge's wrapper and framing: recipe/cleaner/code_judge_utils.py (lines 143-162, 169-333),
# code-judge/app/libs/executors/python_executor.py; the cut: verl/verl/experimental/agent_loop/tool_agent_loop.py
REFERENCE_RESULTS = [
    ("print(1+1)", "Tool call success\nstdout: 2\n"),
    ("pass", "Tool call success"),
    ("x = 3\nx*2", "Tool call success\nstdout: 6\n"),  # a final expression is echoed
    ('s="hello"\ns', "Tool call success\nstdout: 'hello'\n"),  # as its repr
    ("None", "Tool call success"),
    ("x=5\nif x:\n    x", "Tool call success"),  # only a top-level final expression
    ("List", "Tool call success\nstdout: typing.List\n"),  # the wrapper's names are there
    (
        'import warnings\nwarnings.warn("w")\nprint(1)',
        "Tool call success\nstdout: 1\n\nstderr: <string>:2: UserWarning: w\n",
    ),
    ("print(y)", "Tool call failure\nreason: \nstderr: NameError at line 1: name 'y' is not defined\n  print(y)\n"),
    ("import sys\nsys.exit(3)", "Tool call failure\nreason: "),
    ('print("a")\n1/0', "Tool call failure\nreason: \nstderr: ZeroDivisionError: division by zero\n"),
    (
        "def f():\n    return 1/0\nprint(f())\nz=1",
        "Tool call failure\nreason: \nstderr: ZeroDivisionError at line 2: division by zero\n      return 1/0\n",
    ),
    (
        "x = 1\ny = x +\nprint(y)",
        "Tool call failure\nreason: \nstderr: SyntaxError at line 2: invalid syntax (<unknown>, line 2)\n  y = x +\n",
    ),
    (
        'import time\nprint("start")\ntime.sleep(10)',
        "Tool call failure\nreason: worker_timeout\nstdout: start\nSuicide from timeout.\n",
    ),
]


async def test_reference_busy_program_times_out(local_sandbox) -> None:
    # killed at its CPU limit (nothing shown) or, on a loaded machine, at its wall-clock limit first
    seen = await first_result(REFERENCE, call("while True: pass", "code_interpreter"), local_sandbox)
    assert seen in ("Tool call failure\nreason: worker_timeout", TIMEOUT_TEXT.replace("stdout: start\n", "stdout: "))


TIMEOUT_TEXT = "Tool call failure\nreason: worker_timeout\nstdout: start\nSuicide from timeout.\n"

PROJECT_RESULTS = [
    ("print(1+1)", "2\n"),
    ("pass", "(no output; use print() to show values)"),
    ("x = 3\nx*2", "(no output; use print() to show values)"),  # nothing echoed
    ('print("a")\n1/0', None),  # the traceback, below
]


@pytest.mark.parametrize(("code", "expected"), REFERENCE_RESULTS)
async def test_reference_results(code: str, expected: str, local_sandbox) -> None:
    assert await first_result(REFERENCE, call(code, "code_interpreter"), local_sandbox) == expected


@pytest.mark.parametrize(("code", "expected"), PROJECT_RESULTS)
async def test_project_results_are_unchanged(code: str, expected: str | None, local_sandbox) -> None:
    seen = await first_result(PROJECT, call(code, "python"), local_sandbox)
    if expected is None:
        assert seen is not None and seen.startswith("Error:\n") and "ZeroDivisionError" in seen and "a" in seen
    else:
        assert seen == expected


async def test_reference_cut_keeps_128_characters_each_side(local_sandbox) -> None:
    seen = await first_result(REFERENCE, call('print("x"*2000)', "code_interpreter"), local_sandbox)
    assert seen is not None and len(seen) == 256 + len("...(truncated)...")
    assert seen.startswith("Tool call success\nstdout: xxx") and seen.index("...(truncated)...") == 128


# verl/verl/experimental/agent_loop/tool_parser.py (lines 76-107) and tool_agent_loop.py's _call_tool (686-711)
FORMAT_ERROR = protocol.REFERENCE_FORMAT_ERROR


@pytest.mark.parametrize(
    ("turn", "expected"),
    [
        ("<tool_call>hello world</tool_call>", None),  # unreadable: no call, the turn is the answer
        ('<tool_call>{"name": "code_interpreter"}</tool_call>', None),  # no arguments: dropped
        ('<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(1)"}}', None),  # no closing tag
        (call("print(1)", "python"), FORMAT_ERROR),  # another tool's name: a failed call
        ('<tool_call>{"name": "code_interpreter", "arguments": "print(1)"}</tool_call>', FORMAT_ERROR),
        # a literal newline inside the JSON string, and a missing closing brace: repaired
        ('<tool_call>{"name": "code_interpreter", "arguments": {"code": "x = 6\nprint(x*7)"}}</tool_call>', "42"),
        ('<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(42)"}</tool_call>', "42"),
        ("<tool_call>{'name': 'code_interpreter', 'arguments': {'code': 'print(42)'}}</tool_call>", "42"),
        ('<tool_call>{"name": "code_interpreter", "arguments": {}}</tool_call>', "Tool call success"),  # no code
        ("```python\nprint(42)\n```", None),  # a bare fence is not a call
    ],
)
async def test_reference_call_parsing(turn: str, expected: str | None, local_sandbox) -> None:
    seen = await first_result(REFERENCE, turn, local_sandbox)
    if expected is None or expected in (FORMAT_ERROR, "Tool call success"):
        assert seen == expected
    else:
        assert seen == f"Tool call success\nstdout: {expected}\n"


async def test_project_parsing_is_unchanged(local_sandbox) -> None:
    bad = await first_result(PROJECT, "<tool_call>hello world</tool_call>", local_sandbox)
    assert bad is not None and bad.startswith("Error: malformed tool call: the tool call is not valid JSON")
    assert await first_result(PROJECT, "```python\nprint(42)\n```", local_sandbox) == "42\n"


def test_reference_similarity_compares_the_calls_as_written() -> None:
    turn = call("print(1)", "code_interpreter", "Let me check.\n") + "\nmore"
    parsed = protocol.parse_turn(turn, env=REFERENCE)
    assert parsed.call is not None and parsed.call.raw == turn[turn.index("<tool_call>") :]  # to the turn's end
    assert parsed.call.name == "code_interpreter" and parsed.reasoning == "Let me check.\n"


def test_unknown_profile_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown tool environment 'paper'; profiles: project, reference"):
        get_tool_env("paper")


# ---------------------------------------------------------------------------- the response budget


def counting(text: str) -> int:
    """A stand-in tokenizer: a tool result costs one token per character of its content, plus 10."""
    return len(text) + 10


async def budget_run(turns: list[tuple[str, int]], budget: int, sandbox, **saar) -> tuple[Trajectory, list]:
    it, limits = iter(turns), []

    async def generate(context: list[Message], *, seed: int | None = None, max_tokens: int | None = None):
        limits.append(max_tokens)
        text, tokens = next(it)
        tokens = min(tokens, max_tokens) if max_tokens is not None else tokens
        return Generation(text, output_tokens=tokens, truncated=max_tokens is not None and tokens >= max_tokens)

    config = RolloutConfig(
        tool_env=REFERENCE, max_total_tokens=budget, timeout=4.0, saar=SaarConfig(enabled=bool(saar), **saar)
    )
    traj = await rollout([user("q")], generate, sandbox, config, random.Random(0), count_tokens=counting)
    return traj, limits


async def test_each_generation_gets_what_is_left(local_sandbox) -> None:
    ok = call("print(7)", "code_interpreter")
    traj, limits = await budget_run([(ok, 100), ("\\boxed{7}", 20)], 1000, local_sandbox)
    tool_tokens = counting("Tool call success\nstdout: 7\n")
    assert limits == [1000, 1000 - 100 - tool_tokens]
    assert traj.stop_reason == "answer" and traj.response_tokens == 100 + tool_tokens + 20


async def test_a_tool_result_that_reaches_the_budget_is_not_kept(local_sandbox) -> None:
    ok = call('print("y" * 200)', "code_interpreter")
    traj, _ = await budget_run([(ok, 100), ("never", 1)], 300, local_sandbox)  # 100 + ~280 >= 300
    assert traj.stop_reason == "token_budget" and [m.role for m in traj.messages] == ["user", "assistant"]
    assert traj.final_text == ""  # it ended on a call: no answer for the lenient judge


async def test_a_final_answer_past_the_budget_is_cut(local_sandbox) -> None:
    ok = call("print(7)", "code_interpreter")
    traj, limits = await budget_run([(ok, 100), ("long answer \\boxed{7}", 500)], 200, local_sandbox)
    assert limits[1] == 200 - 100 - counting("Tool call success\nstdout: 7\n")
    assert traj.stop_reason == "length" and traj.response_tokens == 200


async def test_the_last_turns_call_does_not_run_under_the_reference(local_sandbox) -> None:
    turns = iter([call("print(1)", "code_interpreter")] * 3)

    async def generate(context: list[Message], *, seed: int | None = None, max_tokens: int | None = None):
        return Generation(next(turns), output_tokens=1)

    for env, tools in ((REFERENCE, 1), (PROJECT, 2)):
        turns = iter([call("print(1)", env.tool_name)] * 3)
        config = RolloutConfig(tool_env=env, max_turns=2, timeout=4.0)
        traj = await rollout([user("q")], generate, local_sandbox, config, random.Random(0))
        assert traj.stop_reason == "max_turns" and traj.tool_calls == tools


async def test_a_response_budget_needs_a_token_count(local_sandbox) -> None:
    async def generate(context: list[Message], *, seed: int | None = None, max_tokens: int | None = None):
        return Generation("x", output_tokens=1)

    config = RolloutConfig(tool_env=REFERENCE, max_total_tokens=100)
    with pytest.raises(ValueError, match="needs count_tokens"):
        await rollout([user("q")], generate, local_sandbox, config, random.Random(0))


def test_qwen_tool_result_tokens_are_the_references_frame(qwen3_tokenizer_dir: str) -> None:
    from transformers import AutoTokenizer

    from harness.core.chat import tool_result_tokens

    tok = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir)
    content = "Tool call success\nstdout: 2\n"
    frame = f"<|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert tool_result_tokens(tok, content) == len(tok(frame, add_special_tokens=False)["input_ids"])
