"""The text of a trajectory's response as the reference's judge reads it.

The reference (Open-CLEANER's verl recipe) judges a rollout on the decoded token ids of its
whole response, ``tokenizer.decode(response_ids, skip_special_tokens=True)`` (verl's DAPO
reward manager), where the response is everything its tool agent loop appended after the
prompt: each generation's ids as sampled, and after a generation that called the tool, the
tool results as ``apply_chat_template(tool_messages, add_generation_prompt=True)`` renders
them, minus the template's default system prompt. :func:`response_text` rebuilds that text
from a harness trajectory.

What it assumes, all true of the Qwen ChatML models the paper evaluates (Qwen2.5-7B-Instruct,
Qwen3-4B-Instruct-2507) and checked against their tokenizer and templates in
``tests/test_reference_judge.py``:

- the prompt ends with ``<|im_start|>assistant\\n``, so the response starts at the first
  assistant turn's text;
- an assistant turn is :attr:`Message.text`: its content, then the call in the Hermes form
  (``<tool_call>`` and ``</tool_call>`` are plain added tokens in Qwen's vocabulary, kept by
  the decoding). The call is the harness's canonical serialization of the program, which is
  what the model wrote when it wrote canonical JSON. The turn's stop token ``<|im_end|>`` is
  special, so nothing follows the text: the next segment's ids come right after it;
- the tool results of one turn are one ChatML user turn, decoded as
  ``user\\n<tool_response>\\n{result}\\n</tool_response>\\nassistant\\n`` (rendered
  ``<|im_start|>user\\n<tool_response>\\n...\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n``;
  the tool tags are kept: ordinary text for Qwen2.5, non-special added tokens for Qwen3;
  ChatML's markers are special). Any other message after the first assistant turn is
  rendered the same way under its own role;
- text that the reference tokenizes (everything but the assistant turns, whose ids are the
  model's own) goes through Qwen's NFC normalizer, and every added token Qwen marks special
  (:data:`QWEN_SPECIAL_TOKENS`) is dropped wherever it appears, as ``skip_special_tokens`` drops it;
- the model writes no separate reasoning channel (the instruct models do not; a thinking
  model's ``<think>`` text would be in the reference's response but not in a message whose
  reasoning a provider parsed out).

Two assistant turns in a row, which the reference's loop never produces, are joined as the
chat template renders two turns: ``\\nassistant\\n`` between them. The reference also cuts its
response at its token budget (``response_length``); the text here is whole, the harness's own
limits having ended the trajectory.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from harness.core.messages import Message, tool_response_text

#: Qwen2.5's and Qwen3's added tokens marked ``special`` (ids 151643-151656), the ones
#: ``skip_special_tokens`` drops. The tool and think tags (``<tool_call>``, and in Qwen3
#: ``<tool_response>`` and ``<think>``, with their closers) are added tokens not marked special: they are kept.
QWEN_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

_SPECIAL = re.compile("|".join(re.escape(token) for token in QWEN_SPECIAL_TOKENS))

#: ``<|im_start|>assistant\n`` with its special token dropped: the header of every generation after the first.
_ASSISTANT_HEADER = "assistant\n"


def _tokenized(text: str) -> str:
    """``text`` as the reference's tokenizer gives it back: NFC-normalized, special tokens dropped."""
    return _SPECIAL.sub("", unicodedata.normalize("NFC", text))


def _observation(messages: Sequence[Message]) -> str:
    """The decoded segment the reference appends after a turn: ChatML turns, then the next turn's header.

    Consecutive tool results share one user turn, each in its ``<tool_response>`` tags.
    """
    parts: list[str] = []
    for i, m in enumerate(messages):
        if m.role == "tool":
            if i == 0 or messages[i - 1].role != "tool":
                parts.append("user")
            parts.append("\n" + tool_response_text(m.content))
            if i + 1 == len(messages) or messages[i + 1].role != "tool":
                parts.append("\n")
        else:
            parts.append(f"{m.role}\n{m.content}\n")
    return _tokenized("".join(parts)) + _ASSISTANT_HEADER


def response_text(messages: Sequence[Message]) -> str:
    """The text of a trajectory's response as the reference's judge sees it (see the module docstring).

    Everything from the first assistant turn on: assistant turns as the model wrote them
    (:attr:`Message.text`), the messages between them as the reference's decoding of its
    chat template renders them. A trajectory that ends on a tool result ends with that
    result's segment, the next turn's header included. Empty when no assistant turn exists.
    """
    start = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
    parts: list[str] = []
    between: list[Message] = []
    for m in messages[start:]:
        if m.role != "assistant":
            between.append(m)
            continue
        if between:
            parts.append(_observation(between))
        elif parts:
            parts.append("\n" + _ASSISTANT_HEADER)
        parts.append(_SPECIAL.sub("", m.text))
        between = []
    if between:
        parts.append(_observation(between))
    return "".join(parts)
