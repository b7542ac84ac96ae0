"""The one rendering of a trajectory into a model's prompt, for evaluation and training.

Both faces call :func:`render` (or :func:`render_ids`), so the text a model is scored on
is the text it is trained on. The model's own chat template does the rendering:

* a template with tool support (its source mentions ``tools`` or ``tool_calls``, as
  Qwen's does) gets ``tools=[TOOL_SCHEMA]`` and the messages with native tool calls;
* a template without it (SmolLM2's) gets the tool description written into the system
  message (:func:`tool_system_prompt`) and the calls inline, in the Hermes
  ``<tool_call>`` form, with tool results as ``<tool_response>`` user turns.

Evaluation's own engines stop a generation at the end of a call (``</tool_call>``) or at the end of the turn
(:func:`stop_strings`); the trainers' engines, as OpenRLHF's, only at the end of the turn (``at_call=False``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.core.messages import Message, to_openai
from harness.core.protocol import CALL_CLOSE, serialize_call
from harness.core.toolenv import ToolEnv

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: End-of-turn markers of common chat formats; those the tokenizer knows are stop strings.
END_OF_TURN_MARKERS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")

_TOOLS_IN_TEMPLATE = re.compile(r"\btools\b|\btool_calls\b")


def tool_system_prompt(env: ToolEnv) -> str:
    """How to call the python tool, for models whose chat template has no tool support.

    The Inspect face may put this into its system message; :func:`render` adds it only
    when it is not already there.
    """
    example = serialize_call("import math\nprint(math.comb(10, 3))", env.tool_name)
    return (
        f"You can run Python code with the tool `{env.tool_name}`. {env.description}\n\n"
        "To call the tool, end your message with one call in exactly this form:\n"
        f"{example}\n"
        "The code is a JSON string, so write newlines as \\n and escape quotes. "
        "The result comes back to you between <tool_response> and </tool_response>. "
        "Make one call per message and use the tool as often as it helps.\n\n"
        "When you know the final answer, reply without a tool call. Give the answer in the form the task asks "
        "for; a number or a letter goes in \\boxed{}, for example \\boxed{120}."
    )


def chat_template_source(tokenizer: PreTrainedTokenizerBase) -> str:
    """The tokenizer's chat template text (all named templates, when it has several)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        return "\n".join(str(t) for t in template.values())
    if not template:
        name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
        raise ValueError(f"tokenizer {name!r} has no chat template; an instruction-tuned model is needed")
    return str(template)


def supports_tools(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the chat template renders tool schemas and tool calls itself."""
    return bool(_TOOLS_IN_TEMPLATE.search(chat_template_source(tokenizer)))


def conversation(
    tokenizer: PreTrainedTokenizerBase, messages: list[Message], *, env: ToolEnv | None, tools: bool = True
) -> tuple[list[dict[str, Any]], bool]:
    """The OpenAI-style messages handed to the template, and whether tools are passed natively.

    ``tools=False`` leaves the tool description out (calls in the history are still rendered); ``env`` (the
    tool environment whose tool is described) may then be None, and must not otherwise.
    """
    if tools and env is None:
        raise ValueError("rendering a prompt with the tool needs its tool environment (env=)")
    if not messages:
        raise ValueError("cannot render an empty trajectory: at least one message is needed")
    if supports_tools(tokenizer):
        return to_openai(messages), tools
    conv = to_openai(messages, inline_calls=True)
    if not tools:
        return conv, False
    assert env is not None
    prompt = tool_system_prompt(env)
    if conv[0]["role"] == "system":
        content = conv[0]["content"]
        if prompt not in content:
            conv[0] = {**conv[0], "content": f"{content.rstrip()}\n\n{prompt}" if content.strip() else prompt}
    else:
        conv.insert(0, {"role": "system", "content": prompt})
    return conv, False


def render(
    tokenizer: PreTrainedTokenizerBase,
    messages: list[Message],
    *,
    env: ToolEnv | None,
    add_generation_prompt: bool = True,
    tools: bool = True,
) -> str:
    """The prompt text of ``messages`` under the model's own chat template.

    With ``add_generation_prompt`` the text ends where the next assistant turn begins.
    ``tools=False`` renders without the python tool's description (for tool-less prompts);
    ``env`` is the tool environment whose schema is shown (None only with ``tools=False``).
    """
    conv, native = conversation(tokenizer, messages, tools=tools, env=env)
    kwargs: dict[str, Any] = {"tools": [env.schema()]} if native and env is not None else {}
    text = tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs)
    if not isinstance(text, str):  # some tokenizers return a list for batched input
        raise TypeError(f"chat template returned {type(text).__name__}, expected str")
    return text


def render_ids(
    tokenizer: PreTrainedTokenizerBase,
    messages: list[Message],
    *,
    env: ToolEnv | None,
    add_generation_prompt: bool = True,
    tools: bool = True,
) -> list[int]:
    """The token ids of :func:`render`'s text (special tokens come from the template, none are added)."""
    text = render(tokenizer, messages, add_generation_prompt=add_generation_prompt, tools=tools, env=env)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def tool_result_counter(tokenizer: PreTrainedTokenizerBase) -> Callable[[str], int]:
    """Counts the tokens a tool result adds to a response under the model's chat template.

    What the template writes after an assistant turn for a tool result holding ``content``, up to and
    including the opening of the next assistant turn (Qwen: ``<|im_start|>user\n<tool_response>\n...
    </tool_response><|im_end|>\n<|im_start|>assistant\n``): what Open-CLEANER's agent loop appends to
    the response, and counts in its response budget, for a tool result. The turns before it are rendered
    once, here, not at every count.
    """
    before = [Message("user", "?"), Message("assistant", "!")]
    head = render_ids(tokenizer, before, env=None, add_generation_prompt=False, tools=False)

    def count(content: str) -> int:
        after = [*before, Message("tool", content)]  # no call id: rendered as Qwen renders a tool result
        whole = render_ids(tokenizer, after, env=None, add_generation_prompt=True, tools=False)
        if whole[: len(head)] != head:
            raise ValueError("the chat template renders a tool result by changing the turns before it; cannot count")
        return len(whole) - len(head)

    return count


def tool_result_tokens(tokenizer: PreTrainedTokenizerBase, content: str) -> int:
    """Tokens a tool result holding ``content`` adds to a response (:func:`tool_result_counter`)."""
    return tool_result_counter(tokenizer)(content)


#: An assistant turn's text for :func:`end_of_turn` to find in a rendered template.
_TURN_PROBE = "Turn-end probe 7f3a."


def end_of_turn(tokenizer: PreTrainedTokenizerBase) -> str:
    """The text of the token the model's chat template ends an assistant turn with (Qwen's and SmolLM2's
    ``<|im_end|>``): the first token after an assistant turn's content, which must be a special token.

    A ValueError names the tokenizer when its template has none there (or no chat template at all).
    """
    name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
    turns = [Message("user", "?"), Message("assistant", _TURN_PROBE)]
    text = render(tokenizer, turns, env=None, add_generation_prompt=False, tools=False)
    at = text.rfind(_TURN_PROBE)
    after = text[at + len(_TURN_PROBE) :] if at >= 0 else ""
    ids = list(tokenizer(after, add_special_tokens=False)["input_ids"]) if after else []
    token = tokenizer.convert_ids_to_tokens(ids[0]) if ids else None
    special = set(tokenizer.all_special_tokens) | {t.content for t in tokenizer.added_tokens_decoder.values()}
    if token is None or token not in special:
        raise ValueError(
            f"tokenizer {name!r}: its chat template ends an assistant turn with {after[:40]!r}, not a special "
            "token, so the token that ends the model's turns is not known"
        )
    return token


def tool_env_for(tokenizer: PreTrainedTokenizerBase, env: ToolEnv) -> ToolEnv:
    """``env`` for the model of ``tokenizer``: a profile whose call span runs to the end of the turn (``reference``)
    takes the model's end-of-turn token (:func:`end_of_turn`); any other is returned as is."""
    return env.with_turn_end(end_of_turn(tokenizer)) if env.spans_turn else env


def stop_strings(tokenizer: PreTrainedTokenizerBase | None = None, *, at_call: bool = True) -> list[str]:
    """Where a generated turn ends: after a complete tool call (``at_call``), or at the end of the turn.

    The end-of-turn strings are the tokenizer's end-of-sequence token and the common
    end-of-turn markers that are in its vocabulary. A generation that stops at
    ``</tool_call>`` keeps the closing tag in its text.
    """
    stops = [CALL_CLOSE] if at_call else []
    if tokenizer is None:
        return stops + ["<|im_end|>"]
    vocab = tokenizer.get_vocab()
    eos = tokenizer.eos_token
    candidates = ([eos] if isinstance(eos, str) else []) + list(END_OF_TURN_MARKERS)
    for marker in candidates:
        if marker and marker in vocab and marker not in stops:
            stops.append(marker)
    return stops


def stop_token_ids(tokenizer: PreTrainedTokenizerBase, *, at_call: bool = True) -> list[int]:
    """Token ids that end a turn (the single-token entries of :func:`stop_strings`).

    The trainers' engines stop at ``at_call=False``'s, the end of the turn only, as OpenRLHF's engine does (it
    stops at the model's end-of-sequence tokens): a call turn holds what the model writes after ``</tool_call>``
    and ends with its end-of-turn token on every training path. (The end-of-turn markers are single tokens, so
    these ids are all of :func:`stop_strings` there.)
    """
    vocab = tokenizer.get_vocab()
    ids = [vocab[s] for s in stop_strings(tokenizer, at_call=at_call) if s in vocab]
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids
