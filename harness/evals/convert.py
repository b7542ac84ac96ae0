"""Conversion between the harness trajectory and Inspect chat messages (both directions)."""

from __future__ import annotations

from typing import get_args

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    ModelOutput,
    StopReason,
)
from inspect_ai.tool import ToolCall as InspectToolCall
from inspect_ai.tool import ToolInfo, ToolParams

from harness.core import protocol
from harness.core.messages import Generation, Message, tool_response_content, tool_response_text
from harness.core.toolenv import PROJECT, ToolEnv

#: Every stop reason Inspect reports, and whether it means the turn was cut short (so it is
#: no answer and the rollout ends with ``length``): the output limit (``max_tokens``), the
#: model's context (``model_length``) and a provider's filter (``content_filter``) cut it;
#: ``stop`` and ``tool_calls`` end it; ``unknown`` (a provider that does not say) counts as
#: ended, since nothing says it was cut.
CUT_SHORT: dict[str, bool] = {
    "stop": False,
    "tool_calls": False,
    "max_tokens": True,
    "model_length": True,
    "content_filter": True,
    "unknown": False,
}
if set(CUT_SHORT) != set(get_args(StopReason)):  # pragma: no cover - an Inspect upgrade added or dropped one
    raise ImportError(
        f"harness.evals.convert: map every Inspect stop reason; mapped {sorted(CUT_SHORT)}, "
        f"Inspect has {sorted(get_args(StopReason))}"
    )


def tool_info(env: ToolEnv) -> ToolInfo:
    """The python tool of ``env`` as Inspect describes tools to providers that call tools natively."""
    function = env.schema()["function"]
    return ToolInfo(
        name=function["name"], description=function["description"], parameters=ToolParams(**function["parameters"])
    )


#: The project's python tool.
PYTHON_TOOL = tool_info(PROJECT)


def to_inspect(messages: list[Message]) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for m in messages:
        if m.role == "system":
            out.append(ChatMessageSystem(content=m.content))
        elif m.role == "user":  # data: its control strings neutralized (harness.core.protocol.as_data)
            out.append(ChatMessageUser(content=protocol.as_data(m.content)))
        elif m.role == "tool" and m.tool_call_id is None:
            # the answer to a malformed call: no call to answer, so not a tool message (see to_openai)
            meta = {"ok": m.meta.get("ok", False), "error_kind": m.meta.get("error_kind")} if m.meta else None
            out.append(ChatMessageUser(content=tool_response_text(m.content), metadata=meta))
        elif m.role == "tool":
            error_kind = m.meta.get("error_kind")
            out.append(
                ChatMessageTool(
                    content=m.content,
                    tool_call_id=m.tool_call_id,
                    function=_answered_name(out, m.tool_call_id),
                    metadata={"ok": m.meta.get("ok", True), "error_kind": error_kind} if m.meta else None,
                )
            )
        elif m.call is not None:
            call = InspectToolCall(id=m.call.id, function=m.call.name, arguments=m.call.arguments())
            out.append(ChatMessageAssistant(content=m.content_before_call, tool_calls=[call], metadata=_public(m.meta)))
        else:
            out.append(ChatMessageAssistant(content=m.text, metadata=_public(m.meta)))
    return out


def _answered_name(converted: list[ChatMessage], call_id: str | None) -> str:
    """The function name of the call (among the messages converted so far) that a tool result answers."""
    for m in reversed(converted):
        if isinstance(m, ChatMessageAssistant):
            for tc in m.tool_calls or []:
                if tc.id == call_id:
                    return tc.function
            break
    return protocol.TOOL_NAME


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
            inner = tool_response_content(m.text)  # the answer to a malformed call, sent as a user turn
            out.append(Message("user", m.text) if inner is None else Message("tool", inner))
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
    if protocol.CALL_OPEN in text:  # the reasoning before the call as written (every profile's)
        text = text[: text.index(protocol.CALL_OPEN)]
    raw = protocol.serialize_call(code, tc.function)
    return Message("assistant", text, call=protocol.ToolCall(code=code, raw=raw, id=tc.id, name=tc.function))


def to_generation(output: ModelOutput, env: ToolEnv) -> Generation:
    """A provider's output as the rollout core sees it (natively parsed calls of ``env``'s tool kept)."""
    message = output.message
    calls = None
    if message.tool_calls:
        calls = []
        for tc in message.tool_calls:
            code = tc.arguments.get("code") if isinstance(tc.arguments, dict) else None
            if isinstance(code, str) and tc.function in env.aliases:
                raw = protocol.serialize_call(code, env.tool_name)
                calls.append(protocol.ToolCall(code=code, raw=raw, id=tc.id, name=env.tool_name))
        calls = calls or None
    text = message.text
    if message.tool_calls and calls is None:  # a native call we cannot execute: let the text parser judge it
        tc = message.tool_calls[0]
        text = text + protocol.serialize_object({"name": tc.function, "arguments": tc.arguments})
    tokens = output.usage.output_tokens if output.usage else 0
    if output.stop_reason not in CUT_SHORT:
        raise ValueError(f"model output has an unknown stop reason {output.stop_reason!r}")
    return Generation(text=text, tool_calls=calls, truncated=CUT_SHORT[output.stop_reason], output_tokens=tokens)


def _public(meta: dict) -> dict | None:
    keep = {k: v for k, v in meta.items() if k in ("form", "tokens")}
    return keep or None
