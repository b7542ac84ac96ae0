"""Conversion between the harness trajectory and Inspect chat messages (both directions)."""

from __future__ import annotations

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    ModelOutput,
)
from inspect_ai.tool import ToolCall as InspectToolCall
from inspect_ai.tool import ToolInfo, ToolParams

from harness import protocol
from harness.messages import Generation, Message

#: The python tool as Inspect describes tools to providers that call tools natively.
PYTHON_TOOL = ToolInfo(
    name=protocol.TOOL_NAME,
    description=protocol.TOOL_DESCRIPTION,
    parameters=ToolParams(**protocol.TOOL_SCHEMA["function"]["parameters"]),
)


def to_inspect(messages: list[Message]) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for m in messages:
        if m.role == "system":
            out.append(ChatMessageSystem(content=m.content))
        elif m.role == "user":
            out.append(ChatMessageUser(content=m.content))
        elif m.role == "tool":
            error_kind = m.meta.get("error_kind")
            out.append(
                ChatMessageTool(
                    content=m.content,
                    tool_call_id=m.tool_call_id,
                    function=protocol.TOOL_NAME,
                    metadata={"ok": m.meta.get("ok", True), "error_kind": error_kind} if m.meta else None,
                )
            )
        elif m.call is not None:
            call = InspectToolCall(id=m.call.id, function=protocol.TOOL_NAME, arguments=m.call.arguments())
            out.append(ChatMessageAssistant(content=m.content, tool_calls=[call], metadata=_public(m.meta)))
        else:
            out.append(ChatMessageAssistant(content=m.text, metadata=_public(m.meta)))
    return out


def from_inspect(messages: list[ChatMessage]) -> list[Message]:
    """Inspect chat messages as harness messages (the inverse of the solver's conversion).

    An assistant message with a native tool call becomes a turn with that call; if its
    text also holds the call as written (``<tool_call>...``), only the reasoning before it
    is kept, so the call is not rendered twice.
    """
    out: list[Message] = []
    for index, m in enumerate(messages):
        if isinstance(m, ChatMessageSystem):
            out.append(Message("system", m.text))
        elif isinstance(m, ChatMessageUser):
            out.append(Message("user", m.text))
        elif isinstance(m, ChatMessageAssistant):
            out.append(_assistant(index, m))
        elif isinstance(m, ChatMessageTool):
            content = m.text if m.text or m.error is None else f"Error: {m.error.message}"
            out.append(Message("tool", content, tool_call_id=m.tool_call_id))
        else:
            raise ValueError(f"message {index}: unsupported chat message role {m.role!r}")
    return out


def _assistant(index: int, m: ChatMessageAssistant) -> Message:
    text = m.text
    if not m.tool_calls:
        return Message("assistant", text)
    if len(m.tool_calls) > 1:
        raise ValueError(
            f"message {index}: assistant message has {len(m.tool_calls)} tool calls; the protocol executes "
            "one call per turn"
        )
    tc = m.tool_calls[0]
    code = tc.arguments.get("code") if isinstance(tc.arguments, dict) else None
    if not isinstance(code, str):
        raise ValueError(
            f"message {index}: tool call {tc.id!r} to {tc.function!r} has no string argument 'code' "
            f"(arguments: {tc.arguments!r})"
        )
    if protocol.CALL_OPEN in text:
        text = protocol.parse_turn(text).reasoning
    return Message("assistant", text, call=protocol.ToolCall(code=code, raw=protocol.serialize_call(code), id=tc.id))


def to_generation(output: ModelOutput) -> Generation:
    """A provider's output as the rollout core sees it (natively parsed calls kept)."""
    message = output.message
    calls = None
    if message.tool_calls:
        calls = []
        for tc in message.tool_calls:
            code = tc.arguments.get("code") if isinstance(tc.arguments, dict) else None
            if isinstance(code, str) and tc.function in protocol.TOOL_ALIASES:
                calls.append(protocol.ToolCall(code=code, raw=protocol.serialize_call(code), id=tc.id))
        calls = calls or None
    text = message.text
    if message.tool_calls and calls is None:  # a native call we cannot execute: let the text parser judge it
        tc = message.tool_calls[0]
        text = text + protocol.serialize_object({"name": tc.function, "arguments": tc.arguments})
    tokens = output.usage.output_tokens if output.usage else 0
    return Generation(text=text, tool_calls=calls, truncated=output.stop_reason == "max_tokens", output_tokens=tokens)


def _public(meta: dict) -> dict | None:
    keep = {k: v for k, v in meta.items() if k in ("form", "tokens")}
    return keep or None
