"""GPU memory of an OpenRLHF 0.11 recipe, estimated before the job starts (``python -m trainers launch --check``).

Two peaks per actor GPU, each compared with the GPU's memory less a reserve (CUDA context, NCCL buffers,
what vLLM keeps while asleep, fragmentation):

* the **log-prob pass** (``make_experience``: the actor's forward over ``rollout.micro_batch_size`` sequences,
  no gradients). OpenRLHF's ``Actor.forward`` (``openrlhf/models/actor.py``) casts the whole logits tensor to
  float32 (``output["logits"].to(torch.float32)``) while the model's own logits in the compute dtype are still
  alive, and ``log_probs_from_logits`` (``openrlhf/models/utils.py``) then works on that full tensor: only its
  log-sum-exp is chunked. With packed samples the micro-batch is one row of up to ``micro_batch_size x
  data.max_len`` tokens, so the logits cost ``tokens x vocabulary x (dtype bytes + 4)``;
* the **training step** (``train.micro_batch_size`` sequences with gradients): the float32 logits kept for the
  backward pass, their float32 gradient and its cast back to the compute dtype (``tokens x vocabulary x (4 + 4
  + dtype bytes)``), plus activations: with gradient checkpointing one hidden state per layer and one layer's
  activations while it is recomputed (an estimate: ``tokens x (8 hidden + 4 intermediate)`` values).

Both add the model states resident on each GPU: weights and gradients in the compute dtype, and Adam's float32
master weights, first and second moments (12 bytes a parameter), divided over the actor GPUs as the ZeRO stage
says (1: optimizer states; 2: and gradients; 3: and weights) and without the optimizer states when
``ds.adam_offload`` moves them to the CPU. These are estimates from the recipe's settings, made to refuse a
setting that cannot fit, not to predict the allocator's exact peak.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

GIB = 2**30
#: bytes of one value in each of OpenRLHF's compute dtypes (``ds.param_dtype``)
DTYPE_BYTES = {"bf16": 2, "fp16": 2}
#: the GPU memory kept out of the estimate when the recipe states none (``gpu.reserve_gib``)
RESERVE_GIB = 4.0
#: bytes a parameter of Adam's states take: float32 master weights, first and second moments
ADAM_BYTES = 12


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only model's ``config.json`` the estimate needs."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    tie_word_embeddings: bool

    @classmethod
    def from_config(cls, config: dict[str, Any], where: str) -> ModelShape:
        """The shape in ``config`` (a ``config.json`` mapping; ``head_dim`` defaults to hidden / heads)."""
        values = dict(config)
        if "head_dim" not in values and "hidden_size" in values and "num_attention_heads" in values:
            values["head_dim"] = values["hidden_size"] // values["num_attention_heads"]
        values.setdefault("tie_word_embeddings", False)
        missing = [f.name for f in fields(cls) if f.name not in values]
        if missing:
            raise ValueError(f"{where}: the model's shape lacks {missing} (the names of its config.json)")
        shape = cls(**{f.name: values[f.name] for f in fields(cls)})
        for f in fields(cls):
            value = getattr(shape, f.name)
            if f.name != "tie_word_embeddings" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{where}: {f.name} must be a positive integer, got {value!r}")
        return shape

    @property
    def parameters(self) -> int:
        """Embeddings (and an untied output layer), attention and gated MLP weights; norms and biases left out."""
        h, heads, kv, d = self.hidden_size, self.num_attention_heads, self.num_key_value_heads, self.head_dim
        attention = h * heads * d * 2 + h * kv * d * 2
        mlp = 3 * h * self.intermediate_size
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.num_hidden_layers * (attention + mlp)


def local_model_config(model: str) -> dict[str, Any] | None:
    """``config.json`` of a local model directory, or of a hub id already in the Hugging Face cache."""
    path = Path(model) / "config.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    try:
        from huggingface_hub import try_to_load_from_cache  # noqa: PLC0415
    except ImportError:
        return None
    cached = try_to_load_from_cache(model, "config.json")
    return json.loads(Path(cached).read_text(encoding="utf-8")) if isinstance(cached, str) else None


@dataclass(frozen=True)
class Peak:
    """One pass's estimated peak on an actor GPU, by part (bytes)."""

    name: str
    parts: dict[str, float]
    #: the setting that sizes this pass's logits, and the largest value of it that fits (0: none)
    setting: str
    fits_up_to: int

    @property
    def total(self) -> float:
        return sum(self.parts.values())


@dataclass(frozen=True)
class MemoryPlan:
    """Both peaks against the usable memory of the stated GPU."""

    gpu_gib: float
    reserve_gib: float
    peaks: tuple[Peak, ...]

    @property
    def usable(self) -> float:
        return (self.gpu_gib - self.reserve_gib) * GIB

    def problems(self) -> list[str]:
        """One line per pass that does not fit, saying which setting to change."""
        out = []
        for peak in self.peaks:
            if peak.total <= self.usable:
                continue
            fix = (
                f"set openrlhf.{peak.setting} to {peak.fits_up_to} or less"
                if peak.fits_up_to
                else "lower openrlhf.data.max_len, set openrlhf.ds.adam_offload, or add actor GPUs "
                "(openrlhf.actor.num_gpus_per_node)"
            )
            out.append(
                f"the {peak.name} needs about {peak.total / GIB:.1f} GiB per GPU, more than the "
                f"{self.usable / GIB:.1f} GiB usable of a {self.gpu_gib:g} GiB GPU: {fix}"
            )
        return out

    def report(self) -> str:
        lines = [f"GPU: {self.gpu_gib:g} GiB, {self.reserve_gib:g} GiB reserved, {self.usable / GIB:.1f} GiB usable"]
        for peak in self.peaks:
            verdict = "fits" if peak.total <= self.usable else "DOES NOT FIT"
            parts = ", ".join(f"{k} {v / GIB:.1f}" for k, v in peak.parts.items())
            lines.append(f"{peak.name}: {peak.total / GIB:.1f} GiB ({parts}) - {verdict}")
        return "\n".join(lines)


def plan(flags: dict[str, Any], shape: ModelShape, gpu_gib: float, reserve_gib: float = RESERVE_GIB) -> MemoryPlan:
    """The memory plan of OpenRLHF ``flags`` (dotted, as a recipe's ``openrlhf`` section) on a GPU of ``gpu_gib``.

    A pass's tokens per GPU are its micro-batch size times ``data.max_len``, or with ``train.dynamic_batch_enable``
    its token budget (``rollout.max_tokens_per_gpu``, ``train.max_tokens_per_gpu``; one sequence at least).
    """
    value = DTYPE_BYTES[str(flags.get("ds.param_dtype", "bf16"))]
    n = shape.parameters
    gpus = int(flags.get("actor.num_nodes", 1)) * int(flags.get("actor.num_gpus_per_node", 1))
    stage = int(flags.get("ds.zero_stage", 2))
    grads_bytes = 4 if str(flags.get("ds.grad_accum_dtype")) in ("fp32", "float32") else value
    weights, grads, adam = value * n, grads_bytes * n, 0 if flags.get("ds.adam_offload") else ADAM_BYTES * n
    states = {
        "weights": weights / gpus if stage >= 3 else weights,
        "gradients": grads / gpus if stage >= 2 else grads,
        "optimizer": adam / gpus if stage >= 1 else adam,
    }
    max_len = int(flags.get("data.max_len", 2048))
    vocab, hidden, layers = shape.vocab_size, shape.hidden_size, shape.num_hidden_layers
    layer = (8 * hidden + 4 * shape.intermediate_size) * value  # one layer's saved activations per token (estimate)
    checkpointing = bool(flags.get("actor.gradient_checkpointing_enable"))
    per_token = {
        "log-prob pass": {"activations": layer, "logits": vocab * (value + 4)},
        "training step": {
            "activations": layers * hidden * value + layer if checkpointing else layers * layer,
            "logits": vocab * (4 + 4 + value),
        },
    }
    dynamic = bool(flags.get("train.dynamic_batch_enable"))
    train_budget = int(flags.get("train.max_tokens_per_gpu", 16192))
    settings = {  # the setting that sizes each pass, its value, and the tokens one unit of it holds
        "log-prob pass": ("rollout.max_tokens_per_gpu", int(flags.get("rollout.max_tokens_per_gpu") or train_budget), 1)
        if dynamic
        else ("rollout.micro_batch_size", int(flags.get("rollout.micro_batch_size", 1)), max_len),
        "training step": ("train.max_tokens_per_gpu", train_budget, 1)
        if dynamic
        else ("train.micro_batch_size", int(flags.get("train.micro_batch_size", 1)), max_len),
    }
    usable = (gpu_gib - reserve_gib) * GIB
    peaks = []
    for name, costs in per_token.items():
        setting, units, unit_tokens = settings[name]
        tokens = max(units * unit_tokens, max_len)  # a micro-batch holds one sequence at least
        parts = {**states, **{k: v * tokens for k, v in costs.items()}}
        room = (usable - sum(states.values())) / (sum(costs.values()) * unit_tokens)
        fits_up_to = max(0, min(units, int(room))) if room * unit_tokens >= max_len else 0
        peaks.append(Peak(name, parts, setting, fits_up_to))
    return MemoryPlan(gpu_gib, reserve_gib, tuple(peaks))
