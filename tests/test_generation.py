"""harness.engines.generation: batched, per-row seeded generation on the real embedded model.

Exact comparisons run the model in float32: there a padded batch computes every row
exactly as the row alone. (In bfloat16, attention over a padded batch rounds differently,
so a greedy row may part from its unbatched twin after a near-tie: see harness.evals.embedded.)
"""

from __future__ import annotations

import asyncio
import copy
import math
import os
from dataclasses import replace
from typing import Any

import pytest

from harness.core import chat
from harness.core.messages import user
from harness.core.toolenv import PROJECT
from harness.engines.generation import Batcher, Request, Sampling, generate_batch, sample_token, seeded_generator

os.environ["HF_HUB_OFFLINE"] = "1"

PROMPTS = [
    "What is 17 * 23?",
    "Write a Python program that prints the first ten prime numbers, one per line.",
    "Hi",
    "Name three colours.",
]


@pytest.fixture(scope="module")
def f32() -> tuple[Any, Any]:
    """The embedded model in float32 (a copy of the shared bfloat16 one) and its tokenizer."""
    import torch

    from harness.evals import embedded

    torch.set_num_threads(1)  # the CPU is shared: more threads spin against each other
    loaded = embedded.shared_model("smollm2")
    return copy.deepcopy(loaded.model).float(), loaded.tokenizer


def _ids(tokenizer: Any, text: str) -> list[int]:
    return chat.render_ids(tokenizer, [user(text)], tools=False, env=PROJECT)


def _stops(tokenizer: Any) -> tuple[int, ...]:
    return tuple(chat.stop_token_ids(tokenizer))


@pytest.mark.slow
def test_greedy_batch_equals_each_row_alone_and_transformers_generate(f32: tuple[Any, Any]) -> None:
    import torch

    model, tok = f32
    sampling = Sampling(max_tokens=24, stop_token_ids=_stops(tok))
    requests = [Request(_ids(tok, p), sampling) for p in PROMPTS]
    batched = generate_batch(model, requests, tokenizer=tok)
    assert {r.batch_size for r in batched} == {len(PROMPTS)}
    for req, row in zip(requests, batched, strict=True):
        alone = generate_batch(model, [req], tokenizer=tok)[0]
        assert row.token_ids == alone.token_ids
        reference = model.generate(
            input_ids=torch.tensor([list(req.prompt_ids)]),
            max_new_tokens=24,
            do_sample=False,
            eos_token_id=list(sampling.stop_token_ids),
            pad_token_id=tok.pad_token_id,
        )[0, len(req.prompt_ids) :].tolist()
        assert row.token_ids == reference
        assert row.finish_reason == ("stop_token" if row.token_ids[-1] in sampling.stop_token_ids else "length")
    assert any(r.finish_reason == "stop_token" for r in batched)  # rows left the batch at different times


@pytest.mark.slow
def test_a_seed_reproduces_its_row_whatever_shares_the_batch(f32: tuple[Any, Any]) -> None:
    model, tok = f32
    stops = _stops(tok)

    def req(prompt: str, seed: int) -> Request:
        return Request(_ids(tok, prompt), Sampling(24, temperature=1.0, top_p=0.9, seed=seed, stop_token_ids=stops))

    first = generate_batch(model, [req(PROMPTS[1], 7), req(PROMPTS[0], 1), req(PROMPTS[3], 2)], tokenizer=tok)
    again = generate_batch(model, [req(PROMPTS[2], 5), req(PROMPTS[1], 7)], tokenizer=tok)
    alone = generate_batch(model, [req(PROMPTS[1], 7)], tokenizer=tok)
    assert first[0].token_ids == again[1].token_ids == alone[0].token_ids
    assert first[0].logprobs == pytest.approx(alone[0].logprobs, abs=1e-4)
    others = generate_batch(model, [req(PROMPTS[1], s) for s in (8, 9, 10)], tokenizer=tok)
    assert all(o.token_ids != alone[0].token_ids for o in others)  # different seeds, different samples


@pytest.mark.slow
def test_a_shared_prompt_prefix_is_prefilled_once_without_changing_a_row(f32: tuple[Any, Any]) -> None:
    """Prompts with the tool system prompt in common (and a GRPO group's identical prompts) give each row what it
    gives alone, greedy and seeded."""
    model, tok = f32
    stops = _stops(tok)
    prompts = [chat.render_ids(tok, [user(p)], env=PROJECT) for p in ("What is 2**10?", "What is 2**10?", "Factor 91.")]
    assert len(prompts[0]) > 200  # the tool description is a long common prefix
    for sampling in (Sampling(12, stop_token_ids=stops), Sampling(12, temperature=1.0, seed=3, stop_token_ids=stops)):
        requests = [Request(p, replace(sampling, seed=None if sampling.greedy else i)) for i, p in enumerate(prompts)]
        shared = generate_batch(model, requests, tokenizer=tok)
        unshared = generate_batch(model, requests, tokenizer=tok, min_shared=10**9)
        alone = [generate_batch(model, [r], tokenizer=tok)[0] for r in requests]
        assert [r.token_ids for r in shared] == [r.token_ids for r in unshared] == [r.token_ids for r in alone]


@pytest.mark.slow
def test_sampled_tokens_follow_the_tempered_nucleus(f32: tuple[Any, Any]) -> None:
    """2000 draws with distinct seeds from the model's real next-token logits match softmax(logits / T) restricted
    to the top-p nucleus; a batch row draws exactly what the sampler draws with the row's seed."""
    import torch

    model, tok = f32
    prompt = _ids(tok, "Pick a random animal and name it.")
    temperature, top_p, n = 0.8, 0.7, 2000
    sampling = Sampling(1, temperature=temperature, top_p=top_p)
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
    draws = [sample_token(logits, sampling, seeded_generator(s)) for s in range(n)]
    probs = torch.softmax(logits / temperature, dim=-1)
    ordered, order = torch.sort(probs, descending=True)
    size = int((ordered.cumsum(0) < top_p).sum()) + 1  # the smallest set holding top_p of the mass
    nucleus = ordered[:size] / ordered[:size].sum()
    expected = dict(zip(order[:size].tolist(), nucleus.tolist(), strict=True))
    counts: dict[int, int] = {}
    for token, _ in draws:
        counts[token] = counts.get(token, 0) + 1
    assert set(counts) <= set(expected), "a token outside the nucleus was sampled"
    tv = 0.5 * sum(abs(counts.get(t, 0) / n - p) for t, p in expected.items())
    assert tv < 0.05, (tv, counts, expected)
    for token, logprob in draws[:20]:
        assert logprob == pytest.approx(math.log(expected[token]), abs=1e-3)
    rows = generate_batch(model, [Request(prompt, replace(sampling, seed=s)) for s in range(4)], tokenizer=tok)
    assert [r.token_ids[0] for r in rows] == [token for token, _ in draws[:4]]


@pytest.mark.slow
def test_rows_stop_at_stop_strings_tokens_and_limits(f32: tuple[Any, Any]) -> None:
    model, tok = f32
    prompt = _ids(tok, "Count from 1 to 30, separated by commas.")
    free = generate_batch(model, [Request(prompt, Sampling(40))], tokenizer=tok)[0]
    text = tok.decode(free.token_ids)
    assert "5" in text, text
    stop = "5"
    cut = generate_batch(
        model, [Request(prompt, Sampling(40, stop_strings=(stop,))), Request(prompt, Sampling(3))], tokenizer=tok
    )
    assert cut[0].finish_reason == "stop_string" and cut[0].stop == stop
    assert stop in tok.decode(cut[0].token_ids) and stop not in tok.decode(cut[0].token_ids[:-1])
    assert cut[0].token_ids == free.token_ids[: len(cut[0].token_ids)]
    assert cut[1].finish_reason == "length" and len(cut[1].token_ids) == 3 and cut[1].hit_limit
    ended = generate_batch(model, [Request(prompt, Sampling(40, stop_token_ids=(free.token_ids[2],)))], tokenizer=tok)
    assert ended[0].token_ids == free.token_ids[:3] and ended[0].finish_reason == "stop_token"
    assert generate_batch(model, [Request(prompt, Sampling(0))], tokenizer=tok)[0].token_ids == []


@pytest.mark.slow
async def test_batcher_collects_concurrent_requests_into_one_batch(f32: tuple[Any, Any]) -> None:
    model, tok = f32
    batcher = Batcher(model, tok, max_batch=4, window_s=0.5)
    try:
        requests = [Request(_ids(tok, p), Sampling(12, temperature=1.0, seed=i)) for i, p in enumerate(PROMPTS)]
        results = await asyncio.gather(*(batcher.generate(r) for r in requests))
        assert [r.batch_size for r in results] == [4, 4, 4, 4] and batcher.batches == 1
        direct = generate_batch(model, requests, tokenizer=tok)
        assert [r.token_ids for r in results] == [d.token_ids for d in direct]
        sync = batcher.generate_many(requests[:2])
        assert [r.token_ids for r in sync] == [d.token_ids for d in direct[:2]]
    finally:
        batcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit(requests[0])


@pytest.mark.slow
async def test_a_cancelled_caller_leaves_the_running_batch(f32: tuple[Any, Any]) -> None:
    """A sample's time limit cancels its generate call: its row must stop, not run to max_tokens."""
    model, tok = f32
    rows: list[int] = []
    batcher = Batcher(model, tok, max_batch=2, window_s=0.2)
    real = generate_batch

    def spy(model: Any, requests: Any, **kw: Any) -> Any:
        results = real(model, requests, **kw)
        rows.extend(len(r.token_ids) for r in results)
        return results

    import harness.engines.generation as generation

    generation.generate_batch, saved = spy, generation.generate_batch
    try:
        long = Request(_ids(tok, PROMPTS[1]), Sampling(400, temperature=1.0, seed=1))
        short = Request(_ids(tok, PROMPTS[0]), Sampling(8, temperature=1.0, seed=2))
        doomed = asyncio.ensure_future(batcher.generate(long))
        kept = asyncio.ensure_future(batcher.generate(short))
        await asyncio.sleep(2.0)  # both rows are in the running batch (a batch's results come at its end)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        assert (await kept).token_ids
        await asyncio.to_thread(batcher.close)  # returns once the batch in hand is done
    finally:
        generation.generate_batch = saved
    assert rows and max(rows) < 400, f"the cancelled row ran on to {max(rows)} tokens"


def test_bad_sampling_is_named() -> None:
    with pytest.raises(ValueError, match="top_p"):
        Sampling(8, top_p=0)
    with pytest.raises(ValueError, match="max_tokens"):
        Sampling(-1)
    with pytest.raises(ValueError, match="temperature"):
        Sampling(8, temperature=-0.5)
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        Request([], Sampling(8))
    with pytest.raises(ValueError, match="stop_strings need the tokenizer"):
        generate_batch(object(), [Request([1], Sampling(8, stop_strings=("x",)))])  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_embedded_provider_batches_concurrent_samples(tmp_path: Any) -> None:
    """Inspect sends up to max_batch samples' turns at once and the provider generates them together."""
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.event import ModelEvent
    from inspect_ai.solver import generate

    task = Task(dataset=[Sample(input=p, target="") for p in PROMPTS], solver=generate())
    log = eval(
        task,
        model="embedded/smollm2",
        model_args={"max_batch": 4, "batch_window": 0.5},
        max_tokens=8,
        temperature=1.0,
        seed=11,
        display="none",
        log_dir=str(tmp_path),
    )[0]
    assert log.status == "success", log.error
    sizes = [
        e.call.response["batch_size"]
        for s in log.samples or []
        for e in s.events
        if isinstance(e, ModelEvent) and e.call is not None and e.call.response is not None
    ]
    assert len(sizes) == len(PROMPTS) and max(sizes) > 1, sizes
