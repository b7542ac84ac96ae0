"""One trajectory representation for evaluation and training.

A trajectory is a list of :class:`Message` in the OpenAI chat shape (system, user,
assistant with an optional python call, tool result). Evaluation converts it to
Inspect's chat messages; training renders it with the model's chat template.
Both go through :func:`to_openai`, so the model sees the same conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from harness.protocol import TOOL_NAME, ToolCall, serialize_call

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str
    call: ToolCall | None = None  #: assistant only: the executable call
    call_error: str | None = None  #: assistant only: a call was attempted but is malformed
    tool_call_id: str | None = None  #: tool only
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def with_call(self, call: ToolCall) -> Message:
        """This turn's reasoning with another call (SAAR's shallow replacement)."""
        return replace(self, call=call, call_error=None)

    @property
    def text(self) -> str:
        """The assistant turn as the model writes it: reasoning, then the Hermes call."""
        if self.role != "assistant" or self.call is None:
            return self.content
        sep = "" if not self.content or self.content.endswith("\n") else "\n"
        return f"{self.content}{sep}{serialize_call(self.call.code)}"


def system(content: str) -> Message:
    return Message("system", content)


def user(content: str) -> Message:
    return Message("user", content)


def tool(content: str, call_id: str | None) -> Message:
    return Message("tool", content, tool_call_id=call_id)


@dataclass(frozen=True)
class Generation:
    """What one model call produced.

    ``tool_calls`` is set when the provider parsed calls natively (sglang with a
    tool-call parser); otherwise the harness parses ``text``. ``truncated`` means
    the generation hit its length limit. Token ids and log-probs are filled by the
    training engine only.
    """

    text: str
    tool_calls: list[ToolCall] | None = None
    truncated: bool = False
    output_tokens: int = 0
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


def to_openai(messages: list[Message], *, inline_calls: bool = False) -> list[dict[str, Any]]:
    """OpenAI-style dicts for a chat template.

    With ``inline_calls`` (templates without tool support, e.g. SmolLM2's) the call
    is written into the assistant content in the Hermes form and tool results are
    wrapped in ``<tool_response>`` tags, the way Qwen's template renders them.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant" and m.call is not None and not inline_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": m.content,
                    "tool_calls": [
                        {
                            "id": m.call.id,
                            "type": "function",
                            "function": {"name": TOOL_NAME, "arguments": m.call.arguments()},
                        }
                    ],
                }
            )
        elif m.role == "assistant":
            out.append({"role": "assistant", "content": m.text})
        elif m.role == "tool" and inline_calls:
            out.append({"role": "user", "content": f"<tool_response>\n{m.content}\n</tool_response>"})
        elif m.role == "tool":
            out.append({"role": "tool", "content": m.content, "tool_call_id": m.tool_call_id, "name": TOOL_NAME})
        else:
            out.append({"role": m.role, "content": m.content})
    return out
