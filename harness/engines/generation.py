"""Batched, seeded generation with a local transformers model: token ids in, token ids out.

One CPU forward pass over eight sequences costs little more than over one, so requests
that arrive together are generated together. Two layers:

* :func:`generate_batch` (blocking): left-pads the prompts, runs one prefill and then one
  decoding step per token over the rows still running, with a KV cache. Finished rows
  leave the batch. Every row has its own sampling parameters and its own
  ``torch.Generator`` seeded from its request's seed, so a row's tokens depend on its
  prompt, parameters and seed only, not on which other requests shared its batch (up to
  the floating-point noise of a different batch shape).
* :class:`Batcher`: a worker thread that collects the requests submitted within a short
  window (from any thread or event loop) and runs them through :func:`generate_batch`.
  ``await batcher.generate(request)`` for asyncio callers (the Inspect provider, rollouts),
  ``batcher.generate_many(requests)`` for synchronous ones.

Sampling follows transformers' ``generate``: temperature scaling, then top-k, then top-p
(nucleus, the smallest set of tokens holding at least ``top_p`` of the mass), then a
multinomial draw. Temperature 0 (or None) is greedy. A row stops at a stop token id (kept
as the row's last token: a trainer learns to end turns), at a stop string appearing in the
decoded new text (the tokens through the one that completed it are kept), or at
``max_tokens``. Nothing here imports Inspect.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import queue
import random
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

FinishReason = Literal["stop_token", "stop_string", "length", "cancelled"]

#: a common prompt prefix at least this long is prefilled once per batch
MIN_SHARED_PREFIX = 16


def _cache_keyword() -> str:
    """The name of the KV-cache argument and output: ``cache`` in newer transformers, ``past_key_values`` before."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in getattr(CausalLMOutputWithPast, "__dataclass_fields__", {}) else "past_key_values"


@dataclass(frozen=True)
class Sampling:
    """How one row is sampled.

    ``seed`` None draws a fresh seed (not reproducible); the same seed with the same prompt
    and parameters gives the same tokens. ``stop_strings`` need a tokenizer to be checked.
    """

    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 0:
            raise ValueError(f"Sampling.max_tokens must be an integer >= 0, got {self.max_tokens!r}")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError(f"Sampling.temperature must be >= 0, got {self.temperature!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"Sampling.top_p must be in (0, 1], got {self.top_p!r}")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"Sampling.top_k must be >= 0 (0 = off), got {self.top_k!r}")

    @property
    def greedy(self) -> bool:
        return not self.temperature


@dataclass(frozen=True)
class Request:
    """A prompt as token ids and how to continue it."""

    prompt_ids: Sequence[int]
    sampling: Sampling

    def __post_init__(self) -> None:
        if len(self.prompt_ids) == 0:
            raise ValueError("Request.prompt_ids is empty: generation needs at least one prompt token")


@dataclass
class Result:
    """What one row produced.

    ``token_ids`` are the sampled ids (the stop token included when one ended the row);
    ``logprobs`` are their log-probabilities under the distribution they were drawn from
    (after temperature, top-k and top-p; greedy rows: the log-softmax of the raw logits).
    ``stop`` is the stop token id or stop string that ended the row; ``seconds`` is the
    whole batch's wall time and ``batch_size`` its number of rows.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    stop: str | int | None
    prompt_tokens: int
    seconds: float
    batch_size: int = 1

    @property
    def hit_limit(self) -> bool:
        return self.finish_reason == "length"


@dataclass
class _Row:
    request: Request
    generator: torch.Generator
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None
    stop: str | int | None = None


def generate_batch(
    model: PreTrainedModel,
    requests: Sequence[Request],
    *,
    tokenizer: PreTrainedTokenizerBase | None = None,
    pad_token_id: int | None = None,
    min_shared: int = MIN_SHARED_PREFIX,
    cancelled: Callable[[int], bool] | None = None,
) -> list[Result]:
    """Generate every request in one batch (blocking); results are in the order of ``requests``.

    ``cancelled(i)``, asked after every decoding step, says that nobody waits for request ``i``
    any more (its sample hit a time limit): its row leaves the batch with ``finish_reason``
    ``"cancelled"`` and the tokens it had, so an abandoned row does not hold the batch up.

    ``tokenizer`` is needed when a request has stop strings (and supplies the pad id). When
    the prompts share a prefix of at least ``min_shared`` tokens (a system prompt, a GRPO
    group's identical prompts), it is prefilled once and its cache copied to every row.
    """
    import torch

    if not requests:
        return []
    if tokenizer is None and any(r.sampling.stop_strings for r in requests):
        raise ValueError("generate_batch: requests with stop_strings need the tokenizer= argument")
    if pad_token_id is None:
        pad_token_id = _pad_id(tokenizer)
    start = time.monotonic()
    device = model.device
    rows = [_Row(r, seeded_generator(r.sampling.seed)) for r in requests]
    for row in rows:
        if row.request.sampling.max_tokens == 0:
            row.finish = "length"
    active = [i for i, row in enumerate(rows) if row.finish is None]
    cache_kw = _cache_keyword()
    cache: Any = None
    with torch.inference_mode():
        if active:
            prompts = [list(rows[i].request.prompt_ids) for i in active]
            cache, prefix = _prefill_shared_prefix(model, prompts, cache_kw, min_shared)
            input_ids, mask, positions = _left_padded(prompts, prefix, pad_token_id, device)
        while active:
            out = model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,  # the prefill's other positions' logits are never used
                **{cache_kw: cache},
            )
            cache = getattr(out, cache_kw)
            logits = out.logits[:, -1, :].float()
            next_ids: list[int] = []
            still: list[int] = []
            for slot, i in enumerate(active):
                row = rows[i]
                token, logprob = sample_token(logits[slot], row.request.sampling, row.generator)
                row.tokens.append(token)
                row.logprobs.append(logprob)
                _check_stop(row, tokenizer)
                if row.finish is None and cancelled is not None and cancelled(i):
                    row.finish = "cancelled"
                if row.finish is None:
                    still.append(slot)
                    next_ids.append(token)
            if not still:
                break
            if len(still) < len(active):
                keep = torch.tensor(still, device=device)
                _select_rows(cache, keep)
                mask, positions = mask[keep], positions[keep]
                active = [active[s] for s in still]
            input_ids = torch.tensor(next_ids, dtype=torch.long, device=device).unsqueeze(1)
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=device)], dim=1)
            positions = positions[:, -1:] + 1
    seconds = time.monotonic() - start
    return [
        Result(
            token_ids=row.tokens,
            logprobs=row.logprobs,
            finish_reason=row.finish or "length",
            stop=row.stop,
            prompt_tokens=len(row.request.prompt_ids),
            seconds=seconds,
            batch_size=len(rows),
        )
        for row in rows
    ]


def _prefill_shared_prefix(
    model: PreTrainedModel, prompts: list[list[int]], cache_kw: str, min_shared: int
) -> tuple[Any, int]:
    """Prefill the prompts' common prefix once and copy its cache to every row; ``(cache, prefix length)``.

    Every row keeps at least one token of its own after the prefix (its next-token logits come from the
    batched prefill). Returns ``(None, 0)`` when the batch has one row or the prefix is shorter than ``min_shared``.
    """
    import torch

    if len(prompts) < 2:
        return None, 0
    shortest = min(len(p) for p in prompts)
    prefix = 0
    while prefix < shortest - 1 and all(p[prefix] == prompts[0][prefix] for p in prompts):
        prefix += 1
    if prefix < max(1, min_shared):
        return None, 0
    ids = torch.tensor([prompts[0][:prefix]], dtype=torch.long, device=model.device)
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    cache = getattr(out, cache_kw)
    _repeat_rows(cache, len(prompts))
    return cache, prefix


def _left_padded(
    prompts: list[list[int]], prefix: int, pad_token_id: int, device: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rows' tokens after ``prefix``, left-padded, with the attention mask over prefix + rest and positions."""
    import torch

    rests = [p[prefix:] for p in prompts]
    width = max(len(r) for r in rests)
    input_ids = torch.full((len(rests), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rests), prefix + width), dtype=torch.long)
    mask[:, :prefix] = 1
    for i, rest in enumerate(rests):
        input_ids[i, width - len(rest) :] = torch.tensor(rest, dtype=torch.long)
        mask[i, prefix + width - len(rest) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, prefix:]
    return input_ids.to(device), mask.to(device), positions.to(device)


def _pad_id(tokenizer: PreTrainedTokenizerBase | None) -> int:
    if tokenizer is not None:
        for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
            if isinstance(candidate, int):
                return candidate
    return 0  # masked out either way


def seeded_generator(seed: int | None) -> torch.Generator:
    """A CPU generator seeded with ``seed`` (a fresh random seed when None)."""
    import torch

    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed if seed is not None else random.SystemRandom().getrandbits(63))
    return gen


def sample_token(logits: torch.Tensor, sampling: Sampling, gen: torch.Generator) -> tuple[int, float]:
    """One token drawn from one row's logits (float32) with ``gen``, and its log-probability.

    Greedy when ``sampling.temperature`` is 0 or None; otherwise temperature, top-k, top-p, multinomial.
    """
    import torch

    if sampling.greedy:
        token = int(torch.argmax(logits))
        return token, float(torch.log_softmax(logits, dim=-1)[token])
    scores = logits / float(sampling.temperature or 1.0)
    if sampling.top_k:
        k = min(sampling.top_k, scores.shape[-1])
        kth = torch.topk(scores, k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if sampling.top_p is not None and sampling.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - sampling.top_p)
        remove[-1] = False  # keep at least the most likely token
        scores = scores.masked_fill(remove.scatter(0, order, remove), float("-inf"))
    logprobs = torch.log_softmax(scores, dim=-1)
    token = int(torch.multinomial(logprobs.exp().cpu(), 1, generator=gen))
    return token, float(logprobs[token])


def _check_stop(row: _Row, tokenizer: PreTrainedTokenizerBase | None) -> None:
    sampling = row.request.sampling
    token = row.tokens[-1]
    if token in sampling.stop_token_ids:
        row.finish, row.stop = "stop_token", token
        return
    if sampling.stop_strings and tokenizer is not None:
        text = tokenizer.decode(row.tokens, skip_special_tokens=False)
        for stop in sampling.stop_strings:
            if stop and stop in text:
                row.finish, row.stop = "stop_string", stop
                return
    if len(row.tokens) >= sampling.max_tokens:
        row.finish = "length"


def _repeat_rows(cache: Any, times: int) -> None:
    """Copy a one-row KV cache to ``times`` rows."""
    if hasattr(cache, "batch_repeat_interleave"):
        cache.batch_repeat_interleave(times)
        return
    for layer in getattr(cache, "layers", []):
        layer.batch_repeat_interleave(times)


def _select_rows(cache: Any, keep: torch.Tensor) -> None:
    """Keep only the rows ``keep`` of a KV cache (transformers' DynamicCache, old or new layout)."""
    if hasattr(cache, "batch_select_indices"):
        cache.batch_select_indices(keep)
        return
    for layer in getattr(cache, "layers", []):
        layer.batch_select_indices(keep)


@dataclass
class _Pending:
    request: Request
    future: concurrent.futures.Future[Result]
    abandoned: bool = False  #: the asyncio caller was cancelled while the row was running


class Batcher:
    """Collects concurrent requests and generates them together on one worker thread.

    The first request of a batch opens a window of ``window_s`` seconds; every request
    submitted within it (up to ``max_batch``) joins the batch. One batch runs at a time,
    and requests that arrive meanwhile form the next one. Thread-safe and usable from any
    number of event loops. A caller cancelled while its row runs (a sample's time limit)
    takes the row out of the running batch at the next token. ``close()`` stops the worker
    after the batch in hand; every open batcher is closed at interpreter exit, so that no
    torch work is still running in the thread when the interpreter tears down (which aborts).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | None = None,
        *,
        max_batch: int = 8,
        window_s: float = 0.05,
        lock: threading.Lock | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"Batcher.max_batch must be >= 1, got {max_batch}")
        if window_s < 0:
            raise ValueError(f"Batcher.window_s must be >= 0, got {window_s}")
        self.model, self.tokenizer = model, tokenizer
        self.max_batch, self.window_s = max_batch, window_s
        #: held while a batch runs: whoever else uses the model (training) takes it too
        self.lock = lock or threading.Lock()
        self.batches = 0
        self.rows = 0
        self._queue: queue.Queue[_Pending | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="cleaner-batcher", daemon=True)
        self._thread.start()
        _open_batchers.add(self)

    def submit(self, request: Request) -> concurrent.futures.Future[Result]:
        """Queue one request; the future resolves to its :class:`Result`."""
        return self._submit(request).future

    def _submit(self, request: Request) -> _Pending:
        if self._closed:
            raise RuntimeError("Batcher is closed")
        pending = _Pending(request, concurrent.futures.Future())
        self._queue.put(pending)
        return pending

    async def generate(self, request: Request) -> Result:
        """Generate one request, batched with whatever else arrives within the window."""
        pending = self._submit(request)
        try:
            return await asyncio.wrap_future(pending.future)
        except asyncio.CancelledError:
            pending.abandoned = True  # a queued row is dropped; a running one leaves its batch
            raise

    def generate_many(self, requests: Sequence[Request]) -> list[Result]:
        """Generate several requests (blocking; batched by ``max_batch``), in order."""
        futures = [self.submit(r) for r in requests]
        return [f.result() for f in futures]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join(timeout=60)

    def _work(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            deadline = time.monotonic() + self.window_s
            stop = False
            while len(batch) < self.max_batch:
                remaining = deadline - time.monotonic()
                try:
                    item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            self._run(batch)
            if stop:
                return

    def _run(self, batch: list[_Pending]) -> None:
        live = [p for p in batch if not p.abandoned and p.future.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            with self.lock:
                results = generate_batch(
                    self.model,
                    [p.request for p in live],
                    tokenizer=self.tokenizer,
                    cancelled=lambda i: live[i].abandoned,
                )
        except BaseException as exc:  # every waiter hears of the failure
            for p in live:
                p.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        self.batches += 1
        self.rows += len(live)
        for p, result in zip(live, results, strict=True):
            p.future.set_result(result)


_open_batchers: weakref.WeakSet[Batcher] = weakref.WeakSet()


@atexit.register
def _close_batchers() -> None:
    for batcher in list(_open_batchers):
        batcher.close()
