"""The ``embedded`` Inspect model provider: a local transformers model on the CPU.

``--model embedded/smollm2`` runs the embedded SmolLM2-135M-Instruct GGUF;
``--model embedded/<path>`` runs any local ``.gguf`` file or Hugging Face directory
(see :mod:`harness.engines.models`). The conversation is rendered with :func:`harness.core.chat.render`,
the same function training uses, so a model is evaluated on exactly the text it is
trained on. The completion is returned as raw text: the harness's solver parses tool
calls from it with :mod:`harness.core.protocol`.

Model args (``-M name=value``): ``dtype`` (``bfloat16``, default, or ``float32``),
``device`` (default ``cpu``), ``cache`` (convert a GGUF once into the model cache; default
true), ``tools`` (``always``, default: the tool description is part of the prompt
whether or not Inspect passes tools, as in training; ``auto``: only when it does) and
``threads`` (torch's intra-op threads for this process, default 1: on a CPU shared with
sandboxes or other jobs, more threads spin against each other and generation gets many
times slower; ``-M threads=2`` or more pays off only on an otherwise idle machine),
``max_batch`` (default 8: requests generated together, and the provider's
``max_connections``, so Inspect sends that many samples' turns at once) and
``batch_window`` (default 0.05 s: how long a batch's first request waits for others).

Each model is loaded once per process and shared by every instance of the provider.
Concurrent requests are generated together by :class:`harness.engines.generation.Batcher`, each
row with its own sampler seeded from its request's ``seed`` (``GenerateConfig.seed``), so a
seeded request's tokens do not depend on the order of arrival. In bfloat16 (the default)
a padded batch computes attention with slightly different rounding than a lone row, so
a row's tokens can differ from the same request generated alone after a near-tie;
``-M dtype=float32`` (slower) or ``-M max_batch=1`` makes every seeded request exactly
reproducible whatever ran beside it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inspect_ai.model import (
    ChatMessage,
    GenerateConfig,
    ModelAPI,
    ModelCall,
    ModelOutput,
    ModelUsage,
)
from inspect_ai.tool import ToolChoice, ToolInfo

from harness.core import chat
from harness.core.protocol import CALL_CLOSE
from harness.core.toolenv import PROJECT, env_of_tool
from harness.engines.generation import Batcher, Request, Result, Sampling
from harness.evals.convert import from_inspect

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DEFAULT_MAX_TOKENS = 512
#: concurrent requests generated together (Inspect's max_connections for this provider)
DEFAULT_MAX_BATCH = 8
#: how long the first request of a batch waits for others to join it
DEFAULT_WINDOW_S = 0.05
_NO_CONFIG = GenerateConfig()


@dataclass
class LoadedModel:
    """A model, its tokenizer, the lock held while it generates and its request batcher."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    lock: threading.Lock
    _batcher: Batcher | None = None

    def batcher(self, max_batch: int = DEFAULT_MAX_BATCH, window_s: float = DEFAULT_WINDOW_S) -> Batcher:
        """The one :class:`~harness.engines.generation.Batcher` of this model, with the limits of the latest caller."""
        with _models_lock:
            if self._batcher is None:
                self._batcher = Batcher(
                    self.model, self.tokenizer, max_batch=max_batch, window_s=window_s, lock=self.lock
                )
            else:
                self._batcher.max_batch, self._batcher.window_s = max_batch, window_s
            return self._batcher


_models: dict[tuple[str, str, str], LoadedModel] = {}
_models_lock = threading.Lock()


def shared_model(spec: str | None, *, dtype: str = "bfloat16", device: str = "cpu", cache: bool = True) -> LoadedModel:
    """The process-wide instance of a model (loaded on first use)."""
    import torch

    from harness.engines.models import load_model, resolve_spec

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
    """One generated turn as text, with its token counts and the batch it was generated in."""

    text: str
    input_tokens: int
    output_tokens: int
    hit_limit: bool
    seconds: float
    batch_size: int = 1


def request(
    loaded: LoadedModel,
    prompt: str,
    *,
    max_tokens: int,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    seed: int | None = None,
    stop_seqs: list[str] | None = None,
) -> Request:
    """The generation request for one turn after ``prompt``: the turn ends at a complete tool call, at the end
    of the turn or at a caller's stop sequence."""
    tokenizer = loaded.tokenizer
    stops = chat.stop_strings(tokenizer) + [s for s in stop_seqs or [] if s]
    sampling = Sampling(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k or None,
        seed=seed,
        stop_token_ids=tuple(chat.stop_token_ids(tokenizer)),
        stop_strings=tuple(dict.fromkeys(stops)),
    )
    return Request(tokenizer(prompt, add_special_tokens=False)["input_ids"], sampling)


def to_completion(loaded: LoadedModel, result: Result, stop_seqs: list[str] | None = None) -> Completion:
    """The text of a generated turn: through ``</tool_call>``, or before the end of turn or a stop sequence."""
    text = _cut(loaded.tokenizer.decode(result.token_ids, skip_special_tokens=True), stop_seqs or [])
    hit_limit = result.hit_limit and not text.endswith(CALL_CLOSE)
    return Completion(text, result.prompt_tokens, len(result.token_ids), hit_limit, result.seconds, result.batch_size)


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
    """Generate one turn after ``prompt`` (blocking; batched with concurrent requests).

    Temperature 0 or None is greedy decoding; ``seed`` seeds this request's own sampler.
    The text ends after ``</tool_call>`` (kept) or before the end of turn or a stop
    sequence of ``stop_seqs`` (not kept).
    """
    req = request(
        loaded, prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed, stop_seqs=stop_seqs
    )
    return to_completion(loaded, loaded.batcher().generate_many([req])[0], stop_seqs)


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
        known = {"dtype", "device", "cache", "tools", "threads", "max_batch", "batch_window"}
        unknown = sorted(set(model_args) - known)
        if unknown:
            raise ValueError(f"embedded provider: unknown model args {unknown}; known: {sorted(known)}")
        self.tools_mode = str(model_args.get("tools", "always"))
        if self.tools_mode not in ("always", "auto"):
            raise ValueError(f"embedded model arg tools={self.tools_mode!r} must be 'always' or 'auto'")
        threads = int(model_args.get("threads", 1))
        if threads < 1:
            raise ValueError(f"embedded model arg threads={threads} must be >= 1")
        self.max_batch = int(model_args.get("max_batch", DEFAULT_MAX_BATCH))
        if self.max_batch < 1:
            raise ValueError(f"embedded model arg max_batch={self.max_batch} must be >= 1")
        self.batch_window = float(model_args.get("batch_window", DEFAULT_WINDOW_S))
        if self.batch_window < 0:
            raise ValueError(f"embedded model arg batch_window={self.batch_window} must be >= 0 seconds")
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
        # no tools in the request: the tool shown (tools_mode 'always') is the project's, the demo's
        env = env_of_tool(tools[0].name) if tools else PROJECT
        use_tools = self.tools_mode == "always" or bool(tools)
        prompt = chat.render(self.loaded.tokenizer, messages, tools=use_tools, env=env)
        max_tokens = config.max_tokens or DEFAULT_MAX_TOKENS
        req = request(
            self.loaded,
            prompt,
            max_tokens=max_tokens,
            temperature=config.temperature,
            top_p=config.top_p,
            top_k=config.top_k,
            seed=config.seed,
            stop_seqs=config.stop_seqs,
        )
        batcher = self.loaded.batcher(self.max_batch, self.batch_window)
        result = to_completion(self.loaded, await batcher.generate(req), config.stop_seqs)
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
                "top_k": config.top_k,
                "seed": config.seed,
            },
            response={"text": result.text, "output_tokens": result.output_tokens, "batch_size": result.batch_size},
            time=result.seconds,
        )
        return output, call

    def max_tokens(self) -> int | None:
        return DEFAULT_MAX_TOKENS

    def max_connections(self) -> int:
        return self.max_batch


def _as_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"embedded model arg {name}={value!r} is not a boolean")
