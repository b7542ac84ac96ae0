"""The two tool environments, pinned by what a model's turn leads to: the program that runs and the text
the model sees next, and the response budget.

Expected values of the ``reference`` profile come from reading Open-CLEANER at commit 91e40ad (files named
in each table) and running its tool path on these inputs; the program runs here for real, in the local sandbox.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import random

import pytest

from harness.core import chat, protocol
from harness.core.messages import Generation, Message, user
from harness.core.rollout import RolloutConfig, Trajectory, rollout
from harness.core.saar import SaarConfig
from harness.core.toolenv import PROJECT, REFERENCE, ToolEnv, get_tool_env
from sandboxes.base import ExecResult, Sandbox

#: ``reference`` for the reference's models (Qwen3), whose turns end with ``<|im_end|>``
QWEN3 = REFERENCE.with_turn_end("<|im_end|>")


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
]

TIMEOUT_TEXT = "Tool call failure\nreason: worker_timeout\nstdout: start\nSuicide from timeout.\n"


def cut(text: str) -> str:
    """``text`` as the reference's 256-character cut shows it."""
    return f"{text[:128]}...(truncated)...{text[-128:]}"


# code-judge's limits (code-judge/app/libs/executors/python_executor.py at 91e40ad): `alarm(timeout)` whose handler
# prints `Suicide from timeout.` flushed (lines 80-95, 109-110), 4 s by the reference's README (lines 108-109); the
# address space capped at MAX_MEMORY + 256 MiB = 512 MiB (lines 104-106, 113-114, 138-139; app/config.py line 32);
# every byte of output read, the first 1000 characters of each stream kept (app/libs/executors/executor.py line 84,
# app/worker_manager.py lines 84-87); the code runs in `globals().copy()` of the wrapper
# (recipe/cleaner/code_judge_utils.py lines 169-181, 224). Expected texts are what that code printed, run as the
# README configures it.
REFERENCE_LIMITS = [
    # the alarm ends a sleep just past 4 s, and flushes what was printed before it
    pytest.param('import time\nprint("start")\ntime.sleep(4.05)', TIMEOUT_TEXT, id="alarm-sleep"),
    # a busy program too (its CPU limit races the alarm there; here the alarm is first, see docs/benchmarks.md)
    pytest.param('print("start")\nwhile True: pass', TIMEOUT_TEXT, id="alarm-busy"),
    pytest.param(
        "import numpy as np\na = np.ones(458 * 2**20, dtype=np.uint8)\nprint(a.sum())",
        "Tool call failure\nreason: \nstderr: MemoryError: Unable to allocate 458. MiB for an array with shape "
        "(480247808,) and data type uint8\n",
        id="memory-cap",
    ),
    pytest.param(
        "import numpy as np\na = np.ones(256 * 2**20, dtype=np.uint8)\nprint(a.sum())",
        "Tool call success\nstdout: 268435456\n",
        id="memory-under-cap",
    ),
    pytest.param('print("x" * 6_000_000)', cut("Tool call success\nstdout: " + "x" * 1000), id="output-flood"),
    pytest.param(
        'print("\u00e9" * 3_000_000)', cut("Tool call success\nstdout: " + "\u00e9" * 1000), id="output-flood-multibyte"
    ),
    pytest.param(
        'import sys\nsys.stderr.write("e" * 6_000_000)',
        cut("Tool call success\nstdout: 6000000\n\nstderr: " + "e" * 1000),
        id="stderr-flood",
    ),
    pytest.param(  # what was flushed before an error is kept
        "for i in range(400_000): print(i)\n1/0",
        cut(
            "Tool call failure\nreason: \nstdout: "
            + "".join(f"{i}\n" for i in range(400))[:1000]
            + "\nstderr: ZeroDivisionError: division by zero\n"
        ),
        id="flushed-before-error",
    ),
    pytest.param(
        "io", "Tool call failure\nreason: \nstderr: NameError at line 1: name 'io' is not defined\n  io\n", id="no-io"
    ),
    pytest.param(
        "resource",
        "Tool call failure\nreason: \nstderr: NameError at line 1: name 'resource' is not defined\n  resource\n",
        id="no-resource",
    ),
    pytest.param(
        "signal",
        "Tool call failure\nreason: \nstderr: NameError at line 1: name 'signal' is not defined\n  signal\n",
        id="no-signal",
    ),
    # the reference's also holds its wrapper's own CodeExecutionError and PersistentExecutor (docs/benchmarks.md)
    pytest.param(
        "import typing\nsorted(k for k in globals() if k[0] != '_' and k not in typing.__all__ and k != 'typing')",
        "Tool call success\nstdout: ['CodeType', 'StringIO', 'annotations', 'ast', 'base64', 'linecache', 'os', "
        "'redirect_stderr', 'redirect_stdout', 'sys', 'traceback']\n",
        id="namespace",
    ),
]


@pytest.mark.parametrize(("code", "expected"), REFERENCE_LIMITS)
async def test_reference_limits(code: str, expected: str, local_sandbox) -> None:
    assert await first_result(REFERENCE, call(code, "code_interpreter"), local_sandbox) == expected


PROJECT_LIMITS = [
    # the sandbox's own limits: a 458 MiB array fits, 6 MB of output is more than a stream may hold
    pytest.param(
        "import numpy as np\na = np.ones(458 * 2**20, dtype=np.uint8)\nprint(a.sum())", "480247808\n", id="memory"
    ),
    pytest.param('print("x" * 6_000_000)', None, id="output-flood"),
]


@pytest.mark.parametrize(("code", "expected"), PROJECT_LIMITS)
async def test_project_limits_are_unchanged(code: str, expected: str | None, local_sandbox) -> None:
    seen = await first_result(PROJECT, call(code, "python"), local_sandbox)
    if expected is None:
        assert seen is not None and seen.startswith("Error:\nOutputLimitExceeded"), seen
    else:
        assert seen == expected


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
        # every pair is read, those the parser drops are left out, the first one left runs (lines 94-101)
        ("<tool_call>hello</tool_call>\n" + call("print(42)", "code_interpreter"), "42"),
        (call("print(42)", "code_interpreter") + call("print(7)", "code_interpreter"), "42"),
        (call("print(42)", "python") + call("print(7)", "code_interpreter"), FORMAT_ERROR),
        # FunctionCall.name is a str (tool_parser.py line 40): another type is dropped
        ('<tool_call>{"name": 5, "arguments": {"code": "print(1)"}}</tool_call>', None),
        # code that is not a string: .encode() fails in code_judge_utils.py line 416, a format error (lines 695-701)
        ('<tool_call>{"name": "code_interpreter", "arguments": {"code": 123}}</tool_call>', FORMAT_ERROR),
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
    parsed = protocol.parse_turn(turn, env=QWEN3, call_id="call_0")
    # to the turn's end, its end-of-turn token included (tool_agent_loop.py lines 1040-1114)
    assert parsed.call is not None and parsed.call.raw == turn[turn.index("<tool_call>") :] + "<|im_end|>"
    assert parsed.call.name == "code_interpreter" and parsed.reasoning == "Let me check.\n"


# ---------------------------------------------------------------------------- SAAR as the reference decides


def reference_span(turn: str) -> str:
    """The call span Open-CLEANER's SAAR compares (verl/verl/experimental/agent_loop/tool_agent_loop.py, 91e40ad,
    lines 1040-1114): the turn's tokens from the one that holds ``<tool_call>`` to the last, its end-of-turn
    token (Qwen3: ``<|im_end|>``) included, decoded with special tokens; compared by difflib at line 908."""
    return turn[turn.index("<tool_call>") :] + "<|im_end|>"


def reference_ratio(old: str, new: str) -> float:
    return difflib.SequenceMatcher(None, reference_span(old), reference_span(new)).ratio()


async def saar_run(turns: list[str], sandbox, *, max_turns: int = 16, env: ToolEnv = QWEN3, **saar):
    it = iter(turns)

    async def generate(context: list[Message], *, seed: int | None = None, max_tokens: int | None = None):
        return Generation(next(it), output_tokens=10)

    cfg = RolloutConfig(
        tool_env=env, max_turns=max_turns, timeout=4.0, saar=SaarConfig(enabled=True, similarity=env.similarity, **saar)
    )
    return await rollout([user("q")], generate, sandbox, cfg, random.Random(0))


# pairs whose ratio is on the other side of 0.5 without the end-of-turn token (difflib's blocks move with it)
FLIPS = [
    (  # 0.463 without it: deep; the reference's 0.501: shallow
        "import math\nfrom sympy import isprime\nprint(math.comb(10, 3))\na = np.arange(10)",
        "a = np.arange(10)\nfor k in range(1, n + 1):\nx = [p for p in range(100) if isprime(p)]\nprint(total)\n"
        "    total += k * k",
        "shallow",
    ),
    (  # 0.717 without it: shallow; the reference's 0.499: deep
        "total = 0\nimport math\nfor k in range(1, n + 1):\nprint(total)\n    total += k * k",
        "print(total)\nfor k in range(1, n + 1):\nfrom sympy import isprime\n    return m * (m + 1) // 2\n"
        "a = np.arange(10)",
        "deep",
    ),
]


@pytest.mark.parametrize(("failed", "regenerated", "action"), FLIPS)
async def test_reference_similarity_runs_to_the_end_of_the_turn(failed, regenerated, action, local_sandbox) -> None:
    old, new = call(failed, "code_interpreter", "A.\n"), call(regenerated, "code_interpreter", "B.\n")
    expected = reference_ratio(old, new)
    assert (expected >= 0.5) == (action == "shallow")  # tool_agent_loop.py line 914: deep below 0.5
    traj = await saar_run([old, new, "done"], local_sandbox, max_retries=1)
    event = traj.events[0]
    assert event.action == action and event.similarity == pytest.approx(expected)


async def test_a_regeneration_naming_another_tool_is_compared(local_sandbox) -> None:
    """A regenerated call of another tool is still a call the reference's SAAR compares (its tokens hold
    ``<tool_call>``: tool_agent_loop.py lines 896-908), so a similar one is a shallow replacement: the failed
    turn keeps its reasoning and takes the call as written, which then fails as a format error."""
    failed = call("print(sum(range(101))", "code_interpreter", "Sum it.\n")
    other = call("print(sum(range(101)))", "python", "Again.\n")
    fixed = call("print(sum(range(101)))", "code_interpreter", "Once more.\n")
    traj = await saar_run([failed, other, fixed, "\\boxed{5050}"], local_sandbox)
    first, second = traj.events
    assert (first.action, first.ok, second.action, second.ok) == ("shallow", False, "shallow", True)
    assert first.similarity == pytest.approx(reference_ratio(failed, other))
    assert second.similarity == pytest.approx(reference_ratio(other, fixed))
    installed = traj.messages[1]
    assert installed.content == "Sum it.\n" and installed.call.code == "print(sum(range(101)))"
    assert traj.tool_calls == 3 and traj.stop_reason == "answer"


async def test_a_regeneration_at_the_turn_limit_ends_the_trajectory(local_sandbox) -> None:
    """Under the reference a regeneration is an assistant turn (tool_agent_loop.py lines 391-397): one that
    reaches the limit restores the state before the error and ends the trajectory (lines 846-852), with the
    failed turn last: no answer. The project regenerates and answers in the next turn."""
    for env, stop, roles in (
        (QWEN3, "max_turns", ["user", "assistant", "tool", "assistant"]),
        (PROJECT, "answer", ["user", "assistant", "tool", "assistant", "tool", "assistant"]),
    ):
        turns = [call("print(1)", env.tool_name), call("print(x)", env.tool_name), call("print(2)", env.tool_name)]
        traj = await saar_run([*turns, "\\boxed{2}"], local_sandbox, max_turns=3, env=env)
        assert traj.stop_reason == stop and [m.role for m in traj.messages] == roles
        if env is QWEN3:
            assert [e.action for e in traj.events] == ["max_turns"] and traj.final_text == ""
            assert traj.messages[-1].call.code == "print(x)" and traj.tokens_generated == 30


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


# ---------------------------------------------------------------------------- code-judge's reason for a slow failure


class SlowClock(Sandbox):
    """The local sandbox, with a run's duration reported as ``seconds`` (the one stand-in: no real program can be
    made to fail at a chosen time after its interpreter starts and before its alarm on a loaded machine)."""

    def __init__(self, inner: Sandbox, seconds: float) -> None:
        self.inner, self.seconds = inner, seconds

    async def run_python(self, code, *, timeout=10.0, stdin=b"", files=None) -> ExecResult:
        result = await self.inner.run_python(code, timeout=timeout, stdin=stdin, files=files)
        return dataclasses.replace(result, duration=self.seconds)


# code-judge (Open-CLEANER 91e40ad) gives `worker_timeout` twice: app/worker_manager.py lines 88-89 to a run its
# alarm ended (TIMEOUT_EXIT_CODE), and app/judge.py lines 27-28 to any run that did not succeed and whose cost is
# MAX_EXECUTION_TIME (4 s, the reference's README lines 108-109) or more; a success keeps an empty reason (it
# has none: recipe/cleaner/code_judge_utils.py lines 143-162).
LATE_ERROR = "stderr: ZeroDivisionError: division by zero\n"
SLOW_FAILURES = [
    (3.9, 'print("a")\n1/0', "Tool call failure\nreason: \n" + LATE_ERROR),
    (4.0, 'print("a")\n1/0', "Tool call failure\nreason: worker_timeout\n" + LATE_ERROR),
    (4.6, "import sys\nsys.exit(2)", "Tool call failure\nreason: worker_timeout"),
    (4.6, "print(7)", "Tool call success\nstdout: 7\n"),
]


@pytest.mark.parametrize(("seconds", "code", "expected"), SLOW_FAILURES)
async def test_reference_failure_that_ran_4_s_is_a_worker_timeout(seconds, code, expected, local_sandbox) -> None:
    seen = await first_result(REFERENCE, call(code, "code_interpreter"), SlowClock(local_sandbox, seconds))
    assert seen == expected


async def test_project_results_do_not_depend_on_how_long_a_run_took(local_sandbox) -> None:
    turn = call("1/0", "python")
    fast = await first_result(PROJECT, turn, local_sandbox)
    assert fast is not None and fast.startswith("Error:\n")
    assert await first_result(PROJECT, turn, SlowClock(local_sandbox, 9.9)) == fast


# ---------------------------------------------------------------------------- the model's end of turn


@pytest.fixture(scope="module")
def smollm2():
    from trainers.core._compat import load_tokenizer

    return load_tokenizer()


def test_the_end_of_turn_is_read_from_each_shipped_template(smollm2) -> None:
    from qwen_artifacts import qwen_tokenizer

    for tok in (smollm2, qwen_tokenizer("qwen2.5"), qwen_tokenizer("qwen3")):
        assert chat.end_of_turn(tok) == "<|im_end|>"
        assert chat.tool_env_for(tok, REFERENCE).turn_end == "<|im_end|>"


def test_the_reference_span_ends_with_the_models_own_end_of_turn(smollm2) -> None:
    """A template that ends an assistant turn with another special token: the span SAAR compares ends with that
    token (the reference decodes the turn's own last token: tool_agent_loop.py lines 1040-1114)."""
    tok = copy.deepcopy(smollm2)
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|endoftext|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    env = chat.tool_env_for(tok, REFERENCE)
    turn = call("print(1)", "code_interpreter", "Check.\n")
    parsed = env.read_turn(turn, call_id="call_0")
    assert parsed.call is not None and parsed.call.raw == turn[turn.index("<tool_call>") :] + "<|endoftext|>"
    assert env.to_dict() == {**REFERENCE.to_dict(), "turn_end": "<|endoftext|>"}
    assert chat.tool_env_for(tok, PROJECT) is PROJECT  # the project's span ends with the call: no token needed


def test_a_template_whose_end_of_turn_cannot_be_known_is_refused(smollm2) -> None:
    tok = copy.deepcopy(smollm2)
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n\n{% endfor %}"
    with pytest.raises(ValueError, match=r"chat template ends an assistant turn with '\\n\\n', not a special token"):
        chat.tool_env_for(tok, REFERENCE)
    tok.chat_template = None
    with pytest.raises(ValueError, match="has no chat template"):
        chat.tool_env_for(tok, REFERENCE)


def test_the_inspect_eval_takes_the_end_of_turn_from_the_tokenizer_it_is_given(tmp_path, qwen3_tokenizer_dir) -> None:
    """The Inspect path binds the profile to ``-T tokenizer`` as the trainers bind it to theirs: a template ending
    assistant turns with ``<|endoftext|>`` moves the similarity of aime24's shallow repair to that span's."""
    import os
    import re
    from pathlib import Path

    import yaml
    from inspect_ai import eval as inspect_eval
    from transformers import AutoTokenizer

    root = Path(__file__).resolve().parents[1]
    tok = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir)
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|endoftext|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    tok.save_pretrained(tmp_path / "tokenizer")
    text = (
        (root / "harness/data/replay/aime24.yaml").read_text().replace('"name": "python"', '"name": "code_interpreter"')
    )
    text = text.replace("import sympy\\nprint(sympy.divisor_count(2**4 * 3**4)", "print(len(range(25))")
    script = tmp_path / "aime24.yaml"
    script.write_text(text)
    failed, repaired = yaml.safe_load(text)["samples"][0]["turns"][:2]
    span = lambda turn, end: turn[turn.index("<tool_call>") :] + end  # noqa: E731
    expected = difflib.SequenceMatcher(None, span(failed, "<|endoftext|>"), span(repaired, "<|endoftext|>")).ratio()
    qwens = difflib.SequenceMatcher(None, span(failed, "<|im_end|>"), span(repaired, "<|im_end|>")).ratio()
    assert expected != qwens
    cwd = os.getcwd()
    os.chdir(root)
    try:
        [log] = inspect_eval(
            "tasks/aime24.py",
            model=f"replay/{script}",
            task_args={
                "preset": "cleaner-paper",
                "data": "fixture",
                "epochs": 1,
                "sandbox": "local",
                "tokenizer": str(tmp_path / "tokenizer"),
            },
            limit=1,
            log_dir=str(tmp_path / "logs"),
            display="none",
        )
    finally:
        os.chdir(cwd)
    assert log.status == "success" and log.samples
    sample = log.samples[0]
    assert re.search(
        r"positive divisors of \$2\^4", sample.input if isinstance(sample.input, str) else str(sample.input)
    )
    [event] = sample.metadata["trajectory"]["saar_events"]
    assert event["action"] == "shallow" and event["similarity"] == pytest.approx(expected)


async def test_a_reference_rollout_whose_saar_compares_spans_needs_the_models_end_of_turn_token(local_sandbox):
    """Nothing guesses the token a ``reference`` call span ends with: without it (no tokenizer said) a rollout
    whose SAAR compares spans refuses to start; one with SAAR off, or comparing programs, runs."""
    assert REFERENCE.turn_end is None and QWEN3.turn_end == "<|im_end|>"
    with pytest.raises(ValueError, match="end-of-turn token, which is not known"):
        await saar_run(["\\boxed{1}"], local_sandbox, env=REFERENCE)
    for saar in (SaarConfig(enabled=False), SaarConfig(enabled=True, similarity="code")):
        config = RolloutConfig(tool_env=REFERENCE, saar=saar)
        traj = await rollout([user("q")], _answer, local_sandbox, config, random.Random(0))
        assert traj.final_text == "\\boxed{1}"


async def _answer(context: list[Message], *, seed: int | None = None, max_tokens: int | None = None) -> Generation:
    return Generation("\\boxed{1}", output_tokens=1)
