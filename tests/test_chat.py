"""harness.core.chat: the one rendering of a trajectory, for templates with and without tool support."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing here may touch the network

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from harness.core import chat
from harness.core.messages import Message, system, tool, user
from harness.core.protocol import CALL_CLOSE, TOOL_SCHEMA, ToolCall, parse_turn, serialize_call
from harness.core.toolenv import PROJECT

# A ChatML template without tool support, rendering the way SmolLM2-135M-Instruct's does
# (a default system turn only when the conversation has none; here our tool prompt is always first).
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# A Qwen-style template with tool support, written for this test: tool schemas in the
# system turn, native calls as Hermes <tool_call> JSON, results as <tool_response> user turns.
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "Tools:{% for t in tools %}{{ '\\n' + (t | tojson) }}{% endfor %}<|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}"
    "{% elif m['role'] == 'assistant' and m.get('tool_calls') %}<|im_start|>assistant\n{{ m['content'] }}"
    "{% for c in m['tool_calls'] %}{{ '\\n' }}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
    "\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer(template: str | None) -> PreTrainedTokenizerFast:
    """A word-level tokenizer built here (no hub): enough to render and tokenize chat text."""
    words = ["<unk>", "<|im_start|>", "<|im_end|>", "hello", "python"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", unk_token="<unk>", additional_special_tokens=["<|im_start|>"]
    )
    tok.chat_template = template
    return tok


CODE = "x = 2**10\nprint(x)"


def trajectory() -> list[Message]:
    return [
        system("You are a careful solver."),
        user("What is 2^10?"),
        Message("assistant", "Let me compute it.", call=ToolCall(code=CODE, raw=serialize_call(CODE), id="call_7")),
        tool("1024", "call_7"),
        Message("assistant", "The answer is \\boxed{1024}."),
    ]


def test_inline_render_is_exact_for_a_template_without_tools() -> None:
    tok = tiny_tokenizer(CHATML)
    assert not chat.supports_tools(tok)
    expected = (
        "<|im_start|>system\nYou are a careful solver.\n\n" + chat.tool_system_prompt(PROJECT) + "<|im_end|>\n"
        "<|im_start|>user\nWhat is 2^10?<|im_end|>\n"
        "<|im_start|>assistant\nLet me compute it.\n<tool_call>\n"
        '{"name": "python", "arguments": {"code": "x = 2**10\\nprint(x)"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n1024\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nThe answer is \\boxed{1024}.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert chat.render(tok, trajectory(), env=PROJECT) == expected
    without_prompt = chat.render(tok, trajectory(), add_generation_prompt=False, env=PROJECT)
    assert without_prompt == expected.removesuffix("<|im_start|>assistant\n")


def test_tool_prompt_explains_the_call_form_and_is_not_duplicated() -> None:
    prompt = chat.tool_system_prompt(PROJECT)
    # the example in the prompt is a call the harness itself accepts
    example = prompt[prompt.index("<tool_call>") : prompt.index(CALL_CLOSE) + len(CALL_CLOSE)]
    parsed = parse_turn(example, env=PROJECT)
    assert parsed.call is not None and "math.comb" in parsed.call.code
    assert "\\boxed{" in prompt
    tok = tiny_tokenizer(CHATML)
    once = chat.render(tok, [user("hi")], env=PROJECT)
    assert once.startswith("<|im_start|>system\n" + prompt + "<|im_end|>\n<|im_start|>user\nhi")
    # a system message that already holds the prompt (the Inspect face's) does not get it twice
    again = chat.render(tok, [system("Solve it.\n\n" + prompt), user("hi")], env=PROJECT)
    assert again.count("To call the tool") == 1
    assert "To call the tool" not in chat.render(tok, [user("hi")], tools=False, env=PROJECT)


def test_native_render_passes_the_tool_schema_and_calls() -> None:
    tok = tiny_tokenizer(TOOLS_TEMPLATE)
    assert chat.supports_tools(tok)
    text = chat.render(tok, trajectory(), env=PROJECT)
    assert "To call the tool" not in text  # the template describes the tool itself
    assert json.dumps(TOOL_SCHEMA) in text
    assert (
        "<|im_start|>assistant\nLet me compute it.\n<tool_call>\n"
        '{"name": "python", "arguments": {"code": "x = 2**10\\nprint(x)"}}\n</tool_call><|im_end|>\n'
    ) in text
    assert "<|im_start|>user\n<tool_response>\n1024\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert json.dumps(TOOL_SCHEMA) not in chat.render(tok, trajectory(), tools=False, env=PROJECT)


def test_render_ids_are_the_tokens_of_render() -> None:
    tok = tiny_tokenizer(CHATML)
    ids = chat.render_ids(tok, [user("hello python")], env=PROJECT)
    assert ids == tok(chat.render(tok, [user("hello python")], env=PROJECT), add_special_tokens=False)["input_ids"]
    start, end, hello, python = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>", "hello", "python"])
    assert ids[0] == start
    assert ids[-7:] == [start, 0, hello, python, end, start, 0]  # user turn, then the generation prompt


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="empty trajectory"):
        chat.render(tiny_tokenizer(CHATML), [], env=PROJECT)
    with pytest.raises(ValueError, match="no chat template"):
        chat.render(tiny_tokenizer(None), [user("hi")], env=PROJECT)
    with pytest.raises(ValueError, match="needs its tool environment"):
        chat.render(tiny_tokenizer(CHATML), [user("hi")], env=None)


def test_stop_strings_end_a_call_or_a_turn() -> None:
    tok = tiny_tokenizer(CHATML)
    stops = chat.stop_strings(tok)
    assert stops[0] == CALL_CLOSE and "<|im_end|>" in stops
    assert chat.stop_token_ids(tok) == [tok.convert_tokens_to_ids("<|im_end|>")]


@pytest.mark.slow
def test_smollm2_template_renders_the_inline_form() -> None:
    """The real SmolLM2 tokenizer (from the embedded GGUF): no tool support, exact inline text."""
    from transformers import AutoTokenizer

    from harness.engines.models import embedded_gguf_path

    gguf = embedded_gguf_path()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    assert not chat.supports_tools(tok)
    assert chat.render(tok, trajectory(), env=PROJECT) == chat.render(tiny_tokenizer(CHATML), trajectory(), env=PROJECT)
    assert chat.stop_strings(tok)[:2] == [CALL_CLOSE, "<|im_end|>"]
    ids = chat.render_ids(tok, trajectory(), env=PROJECT)
    assert tok.decode(ids) == chat.render(tok, trajectory(), env=PROJECT)
