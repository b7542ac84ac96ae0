"""One trajectory representation for evaluation and training.

A trajectory is a list of :class:`Message` in the OpenAI chat shape (system, user,
assistant with an optional python call, tool result). Evaluation converts it to
Inspect's chat messages; training renders it with the model's chat template.
Both go through :func:`to_openai`, so the model sees the same conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from harness.core.protocol import TOOL_NAME, ToolCall, as_data, serialize_call

Role = Literal["system", "user", "assistant", "tool"]
#: The meta keys of a failed call kept as written: the call to the end of the turn, and where it starts in the
#: content (:func:`harness.core.protocol.parse_turn` under a profile that repairs calls).
FAILED_CALL_KEYS = ("call_raw", "call_start")


@dataclass(frozen=True)
class Message:
    role: Role
    content: str
    call: ToolCall | None = None  #: assistant only: the executable call
    call_error: str | None = None  #: assistant only: a call was attempted but is malformed
    tool_call_id: str | None = None  #: tool only
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def with_call(self, call: ToolCall, call_tokens: int) -> Message:
        """This turn's reasoning with another call (SAAR's shallow replacement).

        ``call_tokens`` is the number of generated tokens of the new call: the turn then
        counts its own reasoning's tokens plus those, not the replaced turn's total.
        """
        reasoning = self.reasoning_tokens
        meta = {k: v for k, v in self.meta.items() if k not in FAILED_CALL_KEYS}
        meta |= {"tokens": reasoning + call_tokens, "reasoning_tokens": reasoning}
        return replace(self, content=self.reasoning_text, call=call, call_error=None, meta=meta)

    def with_failed_call(self, other: Message) -> Message:
        """This turn's reasoning with the failed call of ``other`` as written (a shallow replacement under a
        profile that keeps failed calls as written: ``other.meta["call_raw"]``)."""
        reasoning, written = self.reasoning_text, other.content[other.meta["call_start"] :]
        meta = {**self.meta, "tokens": self.reasoning_tokens + other.call_tokens}
        meta |= {"reasoning_tokens": self.reasoning_tokens, "call_raw": other.meta["call_raw"]}
        meta["call_start"] = len(reasoning)
        return replace(self, content=reasoning + written, call=None, call_error=other.call_error, meta=meta)

    @property
    def reasoning_text(self) -> str:
        """The turn's text before its call (a failed call kept as written is cut off; see ``with_failed_call``)."""
        start = self.meta.get("call_start")
        return self.content if self.call is not None or start is None else self.content[:start]

    @property
    def tokens(self) -> int:
        """Generated tokens of this assistant turn (0 for other roles)."""
        return int(self.meta.get("tokens", 0)) if self.role == "assistant" else 0

    @property
    def reasoning_tokens(self) -> int:
        """Generated tokens of the reasoning before the call (the whole turn when it has no call)."""
        return int(self.meta.get("reasoning_tokens", self.tokens))

    @property
    def call_tokens(self) -> int:
        """Generated tokens of the call (what a shallow replacement takes from a regenerated turn)."""
        return self.tokens - self.reasoning_tokens

    @property
    def text(self) -> str:
        """The assistant turn as the model writes it: reasoning, then the Hermes call."""
        if self.role != "assistant" or self.call is None:
            return self.content
        sep = "" if not self.content or self.content.endswith("\n") else "\n"
        return f"{self.content}{sep}{serialize_call(self.call.code, self.call.name)}"

    @property
    def content_before_call(self) -> str:
        """The content as a chat template that renders calls natively wants it.

        Qwen's templates write one newline between the content and ``<tool_call>``
        themselves. A model writes that newline too (``'...this.\\n<tool_call>'``) and
        the parsed reasoning keeps it, so passing the content as is would render two
        (``'.\\n\\n'``, another token than the sampled ``'.\\n'``). Without it, the
        template's rendering of the turn is :attr:`text`, the turn as the model wrote it.
        """
        if self.role == "assistant" and self.call is not None and self.content.endswith("\n"):
            return self.content[:-1]
        return self.content


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
    the generation hit its length limit (or the model's context; see
    :mod:`harness.evals.convert`). ``reasoning_tokens`` is how many of the
    ``output_tokens`` come before the call, when the generator knows it (it holds the
    token ids); otherwise the rollout splits the count by characters. Token ids and
    log-probs are filled by the training engine only.
    """

    text: str
    tool_calls: list[ToolCall] | None = None
    truncated: bool = False
    output_tokens: int = 0
    reasoning_tokens: int | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


_RESPONSE_OPEN, _RESPONSE_CLOSE = "<tool_response>\n", "\n</tool_response>"


def tool_response_text(content: str) -> str:
    """A tool result as a user turn's text (Qwen's rendering of a tool message)."""
    return f"{_RESPONSE_OPEN}{content}{_RESPONSE_CLOSE}"


def tool_response_content(text: str) -> str | None:
    """The tool result a user turn of :func:`tool_response_text` holds, or None for any other user text.

    A dataset's text can never look like one: user text is made data (:func:`as_data`) before
    it is sent, which breaks its tags.
    """
    long_enough = len(text) >= len(_RESPONSE_OPEN) + len(_RESPONSE_CLOSE)
    if long_enough and text.startswith(_RESPONSE_OPEN) and text.endswith(_RESPONSE_CLOSE):
        return text[len(_RESPONSE_OPEN) : -len(_RESPONSE_CLOSE)]
    return None


def to_openai(messages: list[Message], *, inline_calls: bool = False) -> list[dict[str, Any]]:
    """OpenAI-style dicts for a chat template.

    With ``inline_calls`` (templates without tool support, e.g. SmolLM2's) the call
    is written into the assistant content in the Hermes form and tool results are
    wrapped in ``<tool_response>`` tags, the way Qwen's template renders them.

    The answer to a malformed call (a tool message without ``tool_call_id``: the turn
    before it has no call to answer) is sent the same way, as a user message in
    ``<tool_response>`` tags, in both modes: an OpenAI-compatible server rejects a
    ``tool`` message that does not answer a call of the previous assistant message, and
    Qwen's template renders a tool message as exactly that user turn.

    User text (a dataset's question) is data: its control strings are neutralized here
    (:func:`harness.core.protocol.as_data`), on every path that renders a prompt. Tool
    results are neutralized where they are made (:func:`harness.core.protocol.format_result`).
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant" and m.call is not None and not inline_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": m.content_before_call,
                    "tool_calls": [
                        {
                            "id": m.call.id,
                            "type": "function",
                            "function": {"name": m.call.name, "arguments": m.call.arguments()},
                        }
                    ],
                }
            )
        elif m.role == "assistant":
            out.append({"role": "assistant", "content": m.text})
        elif m.role == "tool" and (inline_calls or m.tool_call_id is None):
            out.append({"role": "user", "content": tool_response_text(m.content)})
        elif m.role == "tool":
            out.append({"role": "tool", "content": m.content, "tool_call_id": m.tool_call_id, "name": TOOL_NAME})
        elif m.role == "user":
            out.append({"role": "user", "content": as_data(m.content)})
        else:
            out.append({"role": m.role, "content": m.content})
    return out
