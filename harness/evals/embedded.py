"""The ``embedded`` Inspect model provider: a local transformers model on the CPU.

``--model embedded/smollm2`` runs the embedded SmolLM2-135M-Instruct GGUF;
``--model embedded/<path>`` runs any local ``.gguf`` file or Hugging Face directory
(see :mod:`harness.models`). The conversation is rendered with :func:`harness.chat.render`,
the same function training uses, so a model is evaluated on exactly the text it is
trained on. The completion is returned as raw text: the harness's solver parses tool
calls from it with :mod:`harness.protocol`.

Model args (``-M name=value``): ``dtype`` (``bfloat16``, default, or ``float32``),
``device`` (default ``cpu``), ``cache`` (convert a GGUF once into the model cache; default
true), ``tools`` (``always``, default: the tool description is part of the prompt
whether or not Inspect passes tools, as in training; ``auto``: only when it does) and
``threads`` (torch's intra-op threads for this process, default 1: on a CPU shared with
sandboxes or other jobs, more threads spin against each other and generation gets many
times slower; ``-M threads=2`` or more pays off only on an otherwise idle machine).

Each model is loaded once per process and shared by every instance of the provider;
generation holds a lock, since one CPU model generates one sequence at a time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from inspect_ai.model import (
    ChatMessage,
    GenerateConfig,
    ModelAPI,
    ModelCall,
    ModelOutput,
    ModelUsage,
)
from inspect_ai.tool import ToolChoice, ToolInfo

from harness import chat
from harness.evals.convert import from_inspect
from harness.protocol import CALL_CLOSE

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DEFAULT_MAX_TOKENS = 512
_NO_CONFIG = GenerateConfig()


@dataclass
class LoadedModel:
    """A model, its tokenizer and the lock that serializes generation with it."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    lock: threading.Lock


_models: dict[tuple[str, str, str], LoadedModel] = {}
_models_lock = threading.Lock()


def shared_model(spec: str | None, *, dtype: str = "bfloat16", device: str = "cpu", cache: bool = True) -> LoadedModel:
    """The process-wide instance of a model (loaded on first use)."""
    import torch

    from harness.models import load_model, resolve_spec

    if dtype not in ("bfloat16", "float32", "float16"):
        raise ValueError(f"embedded model arg dtype={dtype!r} is not one of bfloat16, float32, float16")
    _, path = resolve_spec(spec)
    key = (str(path), dtype, device)
    with _models_lock:
        if key not in _models:
            model, tokenizer = load_model(spec, dtype=getattr(torch, dtype), device=device, cache=cache)
            _models[key] = LoadedModel(model, tokenizer, threading.Lock())
        return _models[key]


@dataclass(frozen=True)
class Completion:
    text: str
    input_tokens: int
    output_tokens: int
    hit_limit: bool
    seconds: float


def complete(
    loaded: LoadedModel,
    prompt: str,
    *,
    max_tokens: int,
    temperature: float | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    stop_seqs: list[str] | None = None,
) -> Completion:
    """Generate one turn after ``prompt`` (blocking; holds the model's lock).

    Temperature 0 or None is greedy decoding. The text ends after ``</tool_call>`` (kept)
    or before the end of turn or a stop sequence of ``stop_seqs`` (not kept).
    """
    import torch

    model, tokenizer = loaded.model, loaded.tokenizer
    stops = chat.stop_strings(tokenizer) + [s for s in stop_seqs or [] if s]
    enc = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")
    input_ids = enc["input_ids"].to(model.device)
    kwargs: dict[str, Any] = {
        "max_new_tokens": max_tokens,
        "stop_strings": stops,
        "tokenizer": tokenizer,
        "eos_token_id": chat.stop_token_ids(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
    }
    if temperature:
        kwargs.update(do_sample=True, temperature=temperature, top_p=top_p if top_p is not None else 1.0, top_k=0)
    else:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    with loaded.lock:
        start = time.monotonic()
        if seed is not None:
            torch.manual_seed(seed)
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids, attention_mask=enc["attention_mask"].to(model.device), **kwargs)
        seconds = time.monotonic() - start
    new = out[0, input_ids.shape[1] :].tolist()
    text = _cut(tokenizer.decode(new, skip_special_tokens=True), stop_seqs or [])
    stopped = bool(new) and new[-1] in set(chat.stop_token_ids(tokenizer))
    hit_limit = len(new) >= max_tokens and not stopped and not text.endswith(CALL_CLOSE)
    return Completion(text, int(input_ids.shape[1]), len(new), hit_limit, seconds)


def _cut(text: str, stop_seqs: list[str]) -> str:
    """Keep text up to the first stop: through ``</tool_call>``, or before a caller's stop sequence."""
    end = len(text)
    close = text.find(CALL_CLOSE)
    if close >= 0:
        end = close + len(CALL_CLOSE)
    for stop in stop_seqs:
        at = text.find(stop) if stop and stop != CALL_CLOSE else -1
        if 0 <= at < end:
            end = at
    return text[:end]


class EmbeddedAPI(ModelAPI):
    """Inspect provider for a local transformers model (see the module docstring)."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = _NO_CONFIG,
        **model_args: Any,
    ) -> None:
        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key, config=config)
        known = {"dtype", "device", "cache", "tools", "threads"}
        unknown = sorted(set(model_args) - known)
        if unknown:
            raise ValueError(f"embedded provider: unknown model args {unknown}; known: {sorted(known)}")
        self.tools_mode = str(model_args.get("tools", "always"))
        if self.tools_mode not in ("always", "auto"):
            raise ValueError(f"embedded model arg tools={self.tools_mode!r} must be 'always' or 'auto'")
        threads = int(model_args.get("threads", 1))
        if threads < 1:
            raise ValueError(f"embedded model arg threads={threads} must be >= 1")
        import torch

        torch.set_num_threads(threads)
        self.loaded = shared_model(
            model_name,
            dtype=str(model_args.get("dtype", "bfloat16")),
            device=str(model_args.get("device", "cpu")),
            cache=_as_bool(model_args.get("cache", True), "cache"),
        )

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> tuple[ModelOutput, ModelCall]:
        messages = from_inspect(input)
        prompt = chat.render(self.loaded.tokenizer, messages, tools=self.tools_mode == "always" or bool(tools))
        max_tokens = config.max_tokens or DEFAULT_MAX_TOKENS
        result = await anyio.to_thread.run_sync(
            lambda: complete(
                self.loaded,
                prompt,
                max_tokens=max_tokens,
                temperature=config.temperature,
                top_p=config.top_p,
                seed=config.seed,
                stop_seqs=config.stop_seqs,
            )
        )
        output = ModelOutput.from_content(
            model=self.model_name, content=result.text, stop_reason="max_tokens" if result.hit_limit else "stop"
        )
        output.usage = ModelUsage(
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
            total_tokens=result.input_tokens + result.output_tokens,
        )
        output.time = result.seconds
        call = ModelCall.create(
            request={
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": config.temperature,
                "top_p": config.top_p,
                "seed": config.seed,
            },
            response={"text": result.text, "output_tokens": result.output_tokens},
            time=result.seconds,
        )
        return output, call

    def max_tokens(self) -> int | None:
        return DEFAULT_MAX_TOKENS

    def max_connections(self) -> int:
        return 1


def _as_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"embedded model arg {name}={value!r} is not a boolean")
