"""The tool-call protocol: lenient parsing, strict execution, clear errors, middle-cut output."""

from __future__ import annotations

import pytest

from harness.core.messages import Generation, Message, to_openai
from harness.core.protocol import format_result, parse_turn, serialize_call, truncate_middle
from harness.core.rollout import to_assistant
from harness.core.toolenv import PROJECT


def test_hermes_call_is_split_into_reasoning_and_code():
    turn = parse_turn(
        'Let me check.\n<tool_call>\n{"name": "python", "arguments": {"code": "print(2)"}}\n</tool_call>', env=PROJECT
    )
    assert turn.reasoning == "Let me check.\n" and turn.call is not None and turn.call.code == "print(2)"
    assert turn.form == "hermes" and turn.error is None
    assert turn.call.raw.startswith("<tool_call>") and turn.call.raw.endswith("</tool_call>")


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(2)"}}</tool_call>',
        '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"print(2)\\"}"}</tool_call>',
        '<tool_call>\n```json\n{"name": "python", "arguments": {"code": "print(2)"}}\n```\n</tool_call>',
        'Run:\n```json\n{"name": "python", "arguments": {"code": "print(2)"}}\n```',
        "Run:\n```python\nprint(2)\n```",
        '<tool_call>{"name": "python", "arguments": {"code": "print(2)"}}',  # closing tag cut by a stop string
    ],
)
def test_near_misses_are_accepted(text):
    turn = parse_turn(text, env=PROJECT)
    assert turn.call is not None and turn.call.code.strip() == "print(2)" and turn.error is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('<tool_call>{"name": "python", "arguments": {"code": "x"</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "bash", "arguments": {"code": "ls"}}</tool_call>', "unknown tool 'bash'"),
        ('<tool_call>{"name": "python", "arguments": {"src": "1"}}</tool_call>', "string field 'code'"),
        ('<tool_call>{"name": "python", "arguments": {"code": "  "}}</tool_call>', "'code' is empty"),
        ("<tool_call>[1, 2]</tool_call>", "JSON object"),
        ('<tool_call>{"name": "python", "arguments": "not json"}</tool_call>', "string that is not valid JSON"),
        ('<tool_call>{"name": "python", "arguments": {"code": "x"', "missing its closing"),
    ],
)
def test_malformed_calls_get_a_clear_error_and_no_code(text, message):
    turn = parse_turn(text, env=PROJECT)
    assert turn.call is None and turn.error is not None and message in turn.error


def test_python_fence_is_not_a_call_when_disabled():
    assert parse_turn("```python\nprint(1)\n```", accept_python_fence=False, env=PROJECT).call is None


def test_only_first_call_runs_and_extra_calls_are_counted():
    one = serialize_call("print(1)")
    turn = parse_turn(f"a {one} b {serialize_call('print(2)')}", env=PROJECT)
    assert turn.call is not None and turn.call.code == "print(1)" and turn.extra_calls == 1


def test_text_without_call_is_an_answer():
    turn = parse_turn("The answer is \\boxed{42}.", env=PROJECT)
    assert turn.call is None and turn.error is None and not turn.attempted_call


def test_truncate_middle_keeps_head_and_tail():
    text = "HEAD" + "x" * 1000 + "TAIL"
    cut = truncate_middle(text, 256)
    assert cut.startswith("HEAD") and cut.endswith("TAIL") and "[752 characters truncated]" in cut
    assert truncate_middle("short", 256) == "short" and truncate_middle(text, 0) == text


def test_format_result_for_success_failure_and_silence():
    assert format_result(ok=True, stdout="42\n", stderr="", error_kind=None, env=PROJECT) == "42\n"
    assert "print()" in format_result(ok=True, stdout="", stderr="", error_kind=None, env=PROJECT)
    err = format_result(
        ok=False, stdout="", stderr="Traceback...\nNameError: name 'x'", error_kind="NameError", env=PROJECT
    )
    assert err.startswith("Error:\n") and "NameError" in err
    assert "Timeout" in format_result(ok=False, stdout="", stderr="", error_kind="Timeout", env=PROJECT)


def test_native_and_text_calls_render_identically():
    native = to_assistant(
        Generation(text="Think.\n", tool_calls=[parse_turn(serialize_call("print(1)"), env=PROJECT).call]), env=PROJECT
    )
    textual = to_assistant(Generation(text="Think.\n" + serialize_call("print(1)")), env=PROJECT)
    assert native.text == textual.text and native.call.code == textual.call.code
    assert to_openai([native], inline_calls=True) == to_openai([textual], inline_calls=True)


def test_openai_shape_of_a_trajectory():
    call = parse_turn(serialize_call("print(1)"), env=PROJECT).call
    msgs = [Message("user", "q"), Message("assistant", "r", call=call), Message("tool", "1", tool_call_id=call.id)]
    native = to_openai(msgs)
    assert native[1]["tool_calls"][0]["function"] == {"name": "python", "arguments": {"code": "print(1)"}}
    assert native[2] == {"role": "tool", "content": "1", "tool_call_id": call.id, "name": "python"}
    inline = to_openai(msgs, inline_calls=True)
    assert inline[1]["content"].startswith("r\n<tool_call>") and inline[2]["role"] == "user"
    assert inline[2]["content"] == "<tool_response>\n1\n</tool_response>"


# --------------------------------------------------------------------------- a history a strict server accepts


def _check_strict_history(messages: list[dict]) -> None:
    """What a strict OpenAI-compatible server checks: the schema, and that every tool message
    answers a call of the assistant message before it (ids unique within the conversation)."""
    from openai.types.chat import ChatCompletionMessageParam
    from pydantic import TypeAdapter

    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(messages)
    seen: set[str] = set()
    open_ids: list[str] = []
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            open_ids = [c["id"] for c in m.get("tool_calls") or []]
            assert not set(open_ids) & seen, f"message {i}: call id reused: {open_ids}"
            seen.update(open_ids)
        elif m["role"] == "tool":
            assert m.get("tool_call_id") in open_ids, f"message {i}: tool message answers no open call: {m}"
            open_ids.remove(m["tool_call_id"])
        else:
            open_ids = []


async def test_a_history_with_a_malformed_call_is_one_a_strict_server_accepts(local_sandbox):
    from inspect_ai.model import messages_to_openai

    from harness.core.messages import user
    from harness.core.rollout import RolloutConfig, rollout
    from harness.evals.convert import to_inspect

    bad = '<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"\n</tool_call>'
    turns = [bad, serialize_call("print(1)"), serialize_call("print(2)"), "Done: \\boxed{2}"]

    async def generate(messages, *, seed=None):
        return Generation(turns.pop(0), output_tokens=3)

    traj = await rollout([user("q")], generate, local_sandbox, RolloutConfig(tool_env=PROJECT))
    assert "malformed tool call" in traj.messages[2].content
    _check_strict_history(to_openai(traj.messages))
    inspect_openai = await messages_to_openai(to_inspect(traj.messages))
    _check_strict_history([dict(m) for m in inspect_openai])
