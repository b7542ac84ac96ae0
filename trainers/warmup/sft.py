"""The cold-start SFT's loss and training loop (:func:`fit`, shared with the expert-iteration rounds of
:mod:`trainers.warmup.iterate`).

**Loss mask.** Demonstrations are rendered with :func:`harness.core.chat.render` (what the embedded provider renders
at evaluation) and cut into tokens by :func:`trainers.core.tokens.assemble` (:func:`tokenize`). The loss covers the
assistant turns, except a turn whose call failed: the model learns the fix, not the bug.

**Training.** LoRA (r 16, every linear layer) on the float32 model with bfloat16 autocast (its frozen weights
rounded once, not at every call: :func:`frozen_weights_in_bf16`), AdamW, seeded data order, one torch thread (on
cores shared with other jobs, more threads spin against them and run slower). The rendered system prompt is the same
in every example, so its keys and values are computed once per micro-batch (with gradients) and shared by its rows.
A batch runs as micro-batches of ``micro_batch`` rows whose summed token losses are divided by the batch's trained
tokens: the gradient of the whole batch's mean token loss, in less memory.
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from harness.core import chat
from harness.core.toolenv import PROJECT
from trainers.core.tokens import assemble
from trainers.warmup.demonstrations import Demonstration, DemonstrationError

# --------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class Example:
    """A tokenized demonstration: ids and labels (-100 where no loss falls)."""

    ids: list[int]
    labels: list[int]


def tokenize(tokenizer: Any, demo: Demonstration) -> Example:
    """Render ``demo`` as the embedded provider renders prompts and mask all but its trained turns."""
    tokens = assemble(tokenizer, demo.messages, 1, env=PROJECT, render=chat.render)
    labels = [-100] * len(tokens.ids)
    for turn, (start, end) in enumerate(tokens.action_ranges):
        if turn in demo.trained_turns:
            labels[start:end] = tokens.ids[start:end]
    if len(tokens.action_ranges) != sum(1 for m in demo.messages if m.role == "assistant"):
        raise DemonstrationError(f"{demo.problem.id}: assistant turns and action ranges disagree")
    return Example(tokens.ids, labels)


def _common_prefix(rows: Sequence[Sequence[int]]) -> int:
    first = rows[0]
    n = min(len(r) for r in rows)
    for i in range(n):
        if any(r[i] != first[i] for r in rows):
            return i
    return n


# --------------------------------------------------------------------------- training


def _cache_keyword(decoder: Any) -> str:
    """The KV-cache argument (and output field) of a decoder: ``cache`` in newer transformers, else the old name."""
    import inspect

    return "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"


def trained_tokens(example: Example) -> int:
    """Tokens of ``example`` that carry a loss (a label predicts the token at its position from the one before)."""
    return sum(1 for lbl in example.labels[1:] if lbl != -100)


def _shared_prefix(batch: Sequence[Example]) -> int:
    """Tokens run once for the whole batch: the rows' common prefix, ending before any row's first label
    (so a lone row, whose whole sequence is its "common prefix", keeps every trained token in its suffix)."""
    common = _common_prefix([ex.ids for ex in batch]) - 1  # keep >= 1 token in every suffix
    first_label = min((i for ex in batch for i, lbl in enumerate(ex.labels) if lbl != -100), default=len(batch[0].ids))
    prefix = min(common, first_label - 1)
    if prefix < 1:
        raise DemonstrationError(f"a batch's rows share no prompt before their first trained token ({prefix})")
    return prefix


def _batch_loss(model: Any, batch: Sequence[Example], pad_id: int) -> Any:
    """Summed token loss of a batch; the rows' shared prefix is run once and its keys/values repeated."""
    import torch
    import torch.nn.functional as F

    inner = model.get_base_model().model  # the decoder stack (LoRA layers included)
    head = model.get_base_model().lm_head
    prefix = _shared_prefix(batch)
    # no label inside the prefix: a prompt is never trained on
    if any(lbl != -100 for ex in batch for lbl in ex.labels[: prefix + 1]):
        raise DemonstrationError("a label falls inside the shared prompt prefix")
    key = _cache_keyword(inner)
    pre = torch.tensor([batch[0].ids[:prefix]])
    cache = getattr(inner(input_ids=pre, use_cache=True), key)
    cache.batch_repeat_interleave(len(batch))
    width = max(len(ex.ids) for ex in batch) - prefix
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), prefix + width), dtype=torch.long)
    mask[:, :prefix] = 1
    for row, ex in enumerate(batch):
        n = len(ex.ids) - prefix
        ids[row, :n] = torch.tensor(ex.ids[prefix:])
        labels[row, :n] = torch.tensor(ex.labels[prefix:])
        mask[row, prefix : prefix + n] = 1
    positions = torch.arange(prefix, prefix + width).unsqueeze(0).expand(len(batch), -1)
    hidden = inner(input_ids=ids, attention_mask=mask, position_ids=positions, **{key: cache}).last_hidden_state
    target = labels[:, 1:]
    keep = target != -100
    logits = head(hidden[:, :-1][keep])
    return F.cross_entropy(logits.float(), target[keep], reduction="sum")


def epoch_batches(groups: Sequence[object], lengths: Sequence[int], size: int, rng: random.Random) -> list[list[int]]:
    """One epoch of batches, each drawn from one group (math or code prompts) and of similar lengths.

    Rows of one group share the whole prompt template, so the prefix computed once per
    batch is longer; rows of similar length waste little on padding (on these CPUs the
    padded batch width is most of a step's cost). Batch order is shuffled.
    """
    by_group: dict[object, list[int]] = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    batches = []
    for key in sorted(by_group, key=str):
        members = by_group[key]
        rng.shuffle(members)
        members.sort(key=lambda i: lengths[i])  # stable: equal lengths stay shuffled
        batches += [members[i : i + size] for i in range(0, len(members), size)]
    rng.shuffle(batches)
    return batches


def _lr_at(step: int, cfg: FitSettings) -> float:
    """Linear warm-up, then linear decay to a tenth of the peak."""
    if step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.learning_rate * (1.0 - 0.9 * frac)


@dataclass(frozen=True)
class FitSettings:
    """How :func:`fit` trains: steps of ``batch_size`` rows, run ``micro_batch`` rows at a time."""

    steps: int
    batch_size: int
    micro_batch: int
    learning_rate: float
    warmup_steps: int
    seed: int  #: the data order's seed


@dataclass(frozen=True)
class FitResult:
    losses: list[float]  #: mean token loss of each step's batch
    train_s: float
    train_cpu_s: float


def batch_step(model: Any, batch: Sequence[Example], pad_id: int, micro_batch: int, *, bf16: bool = True) -> float:
    """Backpropagate the mean token loss of ``batch`` (run ``micro_batch`` rows at a time); return it.

    Each micro-batch's summed token loss is divided by the trained tokens of the whole batch, so the
    accumulated gradient is the whole batch's, however it is cut (exactly so in float32, ``bf16=False``;
    under bfloat16 autocast up to its rounding, which depends on the padded width).
    """
    import torch

    total = sum(trained_tokens(ex) for ex in batch)
    if total == 0:
        raise DemonstrationError("a batch without a trained token")
    loss = 0.0
    for start in range(0, len(batch), micro_batch):
        # bf16 matmuls (avx512_bf16/AMX), fp32 weights
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            part = _batch_loss(model, batch[start : start + micro_batch], pad_id) / total
        part.backward()
        loss += float(part.detach())
    return loss


@contextlib.contextmanager
def frozen_weights_in_bf16(model: Any) -> Iterator[None]:
    """The frozen weights of ``model``'s LoRA-wrapped linears in bfloat16 while it trains under bfloat16 autocast,
    their float32 values back afterwards (the engine is synced from them).

    Autocast keeps its casts only of weights that require grad, so it rounds every frozen weight to bfloat16 again
    at each call: rounded once here, the products are the same bits and a step is faster.
    """
    import torch
    from peft.tuners.lora import LoraLayer

    kept = []
    for layer in model.modules():
        if isinstance(layer, LoraLayer) and isinstance(layer.get_base_layer(), torch.nn.Linear):
            weight = layer.get_base_layer().weight
            kept.append((weight, weight.data))
            weight.data = weight.data.to(torch.bfloat16)
    try:
        yield
    finally:
        for weight, data in kept:
            weight.data = data


def fit(
    model: Any,
    examples: Sequence[Example],
    groups: Sequence[object],
    settings: FitSettings,
    pad_id: int,
    *,
    progress: bool = True,
    desc: str = "warmup SFT",
) -> FitResult:
    """Train ``model``'s trainable (LoRA) weights on ``examples`` with AdamW (see the module docstring).

    ``groups`` (one per example: math or code prompt) keep a batch's rows on one prompt template.
    """
    import torch
    from tqdm import tqdm

    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=settings.learning_rate, weight_decay=0.0)
    order_rng = random.Random(settings.seed)
    lengths = [len(e.ids) for e in examples]
    batches: list[list[int]] = []
    losses: list[float] = []
    bar = tqdm(range(settings.steps), desc=desc, disable=not progress, file=sys.stdout)
    train_started, cpu_started = time.monotonic(), time.process_time()
    with frozen_weights_in_bf16(model):
        for step in bar:
            if not batches:
                batches = epoch_batches(groups, lengths, settings.batch_size, order_rng)
            batch = [examples[i] for i in batches.pop()]
            for group in optim.param_groups:
                group["lr"] = _lr_at(step, settings)
            optim.zero_grad()
            losses.append(batch_step(model, batch, pad_id, settings.micro_batch))
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optim.step()
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return FitResult(losses, time.monotonic() - train_started, time.process_time() - cpu_started)
