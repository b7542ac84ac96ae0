"""The GRPO loss of the CPU trainer: TRL's GRPOTrainer with each group's prompt run once and the rows of a prompt
trained together (:class:`SharedPromptGRPOTrainer`), and the reward TRL reads (:func:`cleaner_reward`)."""

from __future__ import annotations

from typing import Any

from trl import GRPOTrainer


def shared_prompt_logps(
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    logits_to_keep: int,
    temperature: float,
    entropy: bool,
    *,
    bf16: bool = False,
) -> tuple[Any, Any]:
    """Log-probs (and entropies) of each row's last ``logits_to_keep`` tokens; a prompt's forward pass is shared.

    The rows of a GRPO group share their prompt (the system prompt, tool schema and
    problem: most of a short trajectory's tokens). Each distinct prompt runs through the
    decoder once, with gradients; its keys and values are repeated for the group's rows,
    which then run their completions only, and only completion positions go through the
    LM head. Same numbers as a full forward pass of each row (to float precision), at a
    fraction of the compute. ``input_ids`` is TRL's layout: left-padded prompts, then
    right-padded completions; logits are divided by ``temperature`` as TRL does. With ``bf16`` the decoder and
    the LM head run under bfloat16 autocast (the softmax in float32 at least: a float64 model keeps float64).
    """
    import torch  # noqa: PLC0415

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        return _shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep, temperature, entropy)


def _shared_prompt_logps(
    model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, temperature: float, entropy: bool
) -> tuple[Any, Any]:
    import torch  # noqa: PLC0415

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, head = base.get_decoder(), base.get_output_embeddings()
    width = input_ids.size(1) - logits_to_keep
    groups: dict[tuple[int, ...], list[int]] = {}
    for row in range(input_ids.size(0)):
        prompt = input_ids[row, :width][attention_mask[row, :width].bool()]
        groups.setdefault(tuple(prompt.tolist()), []).append(row)
    logps: list[Any] = [None] * input_ids.size(0)
    entropies: list[Any] = [None] * input_ids.size(0)
    for prompt, rows in groups.items():
        n, g = len(prompt), len(rows)
        if n < 2:
            raise ValueError("shared_prompt_logps: a prompt needs at least 2 tokens")
        cache = decoder(input_ids=torch.tensor([prompt[:-1]]), use_cache=True).past_key_values
        cache.batch_repeat_interleave(g)
        completion = input_ids[rows, width:]
        suffix = torch.cat([torch.full((g, 1), prompt[-1], dtype=completion.dtype), completion], dim=1)
        mask = torch.cat([torch.ones((g, n), dtype=attention_mask.dtype), attention_mask[rows, width:]], dim=1)
        positions = torch.arange(n - 1, n + logits_to_keep).unsqueeze(0).expand(g, -1)
        hidden = decoder(input_ids=suffix, attention_mask=mask, position_ids=positions, past_key_values=cache)
        logits = head(hidden.last_hidden_state[:, :-1])
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
        logprobs = torch.log_softmax(logits, dim=-1)
        picked = logprobs.gather(-1, completion.unsqueeze(-1)).squeeze(-1)
        for i, row in enumerate(rows):
            logps[row] = picked[i]
        if entropy:
            with torch.no_grad():
                ent = -(logprobs.exp() * logprobs).sum(-1)
            for i, row in enumerate(rows):
                entropies[row] = ent[i]
    return torch.stack(logps), torch.stack(entropies) if entropy else None


#: an advantage this small is 0: equal rewards, up to the float rounding of their group's mean (rewards that differ
#: give advantages of 0.1 and more)
ZERO_ADVANTAGE = 1e-6
#: what TRL's GRPO hands the loss per micro-batch for text rollouts: tensors with a row per rollout, and the
#: generation batch's token count (a micro-batch with anything else, such as images, is left whole)
ROW_KEYS = frozenset({
    "prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "tool_mask",
    "old_per_token_logps", "sampling_per_token_logps", "ref_per_token_logps", "importance_sampling_ratio",
    "num_items_in_batch",
})  # fmt: skip


def regroup_micro_batches(batches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same rows in micro-batches of the same sizes, ordered so that each holds as few prompts as it can.

    TRL shuffles a step's rollouts before it splits them into micro-batches, so the rows a micro-batch trains come
    from every group: each micro-batch runs every prompt through the decoder (:func:`shared_prompt_logps` shares a
    prompt only within one micro-batch) and a backward pass, even when only one group has anything to learn. Here
    the rows with an advantage come first, one prompt after another, and the rows without one last: a step whose
    other groups all had equal rewards trains in one micro-batch with one prompt, and the micro-batches holding
    only zero-advantage rows cost nothing (:meth:`SharedPromptGRPOTrainer.compute_loss`). Every key must be in
    :data:`ROW_KEYS` (a tensor with a row per rollout, or the batch-wide ``num_items_in_batch``).
    """
    import torch  # noqa: PLC0415

    sizes = [len(b["advantages"]) for b in batches]
    rows = {
        k: torch.cat([b[k] for b in batches]) if k != "num_items_in_batch" and batches[0][k] is not None else None
        for k in batches[0]
    }
    advantages = rows["advantages"] if rows["advantages"].dim() == 1 else rows["advantages"].abs().amax(-1)
    zero = (advantages.abs() < ZERO_ADVANTAGE).tolist()
    prompts = [
        tuple(ids[mask.bool()].tolist()) for ids, mask in zip(rows["prompt_ids"], rows["prompt_mask"], strict=True)
    ]
    first_seen = {prompt: i for i, prompt in reversed(list(enumerate(prompts)))}
    order = torch.tensor(sorted(range(len(prompts)), key=lambda i: (zero[i], first_seen[prompts[i]], i)))
    out, start = [], 0
    for batch, size in zip(batches, sizes, strict=True):
        picked = order[start : start + size]
        out.append({k: v[picked] if v is not None else batch[k] for k, v in rows.items()})
        start += size
    return out


class _SyncedByTheTrainer:
    """Where TRL would sync its vLLM engine before a ``rollout_func``: the CPU trainer syncs its own instead."""

    def sync_weights(self) -> None:
        pass


class SharedPromptGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer whose log-probs run each group's prompt once (:func:`shared_prompt_logps`), under
    bfloat16 autocast when ``bf16_autocast`` is set (``cpu.bf16``; TRL's own ``bf16`` would not reach them), and
    whose micro-batches put the rows of a prompt together (:func:`regroup_micro_batches`)."""

    bf16_autocast = False
    skipped_rows = 0  #: rollouts whose forward and backward passes were skipped (advantage 0)

    def correct_engine_mismatch(self) -> None:
        """Turn on TRL's importance-sampling correction (``vllm_importance_sampling_*`` of its config) for rollouts
        whose ``rollout_func`` returns the engine's log-probs. TRL applies it only with ``use_vllm``, which would
        also make it build and sync an engine of its own; here the CPU trainer owns the engine and syncs it before
        each step's rollouts, so TRL's engine stays unbuilt and its sync does nothing."""
        self.use_vllm = True
        self.vllm_generation = _SyncedByTheTrainer()
        self._last_loaded_step = -1

    def _prepare_inputs(self, generation_batch):  # noqa: ANN001, ANN202 - TRL's signature
        """TRL's micro-batch for this accumulation step; when TRL has just generated the step's rollouts, they are
        first regrouped (:func:`regroup_micro_batches`) wherever that leaves the optimizer's step unchanged: one
        optimizer step per generation batch (``steps_per_generation`` = ``gradient_accumulation_steps``, one
        iteration) and a loss that sums over tokens and divides by the whole generation batch's (``dapo``)."""
        fresh = (
            self._buffered_inputs is None or self._step % (self.args.steps_per_generation * self.num_iterations) == 0
        )
        inputs = super()._prepare_inputs(generation_batch)
        one_step = self.num_iterations == 1 and self.args.steps_per_generation == self.args.gradient_accumulation_steps
        batches = self._buffered_inputs
        if fresh and self.model.training and one_step and self.loss_type == "dapo" and not set(batches[0]) - ROW_KEYS:
            self._buffered_inputs = regroup_micro_batches(batches)
            inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]
        return inputs

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001, ANN201
        """TRL's loss over the micro-batch's rollouts whose advantage is not 0.

        A rollout whose group's rewards are all equal (or whose reward is its group's mean) has advantage 0 and, with
        no KL term (``beta`` 0), adds exactly 0 to the loss and its gradient; the ``dapo`` loss divides by the tokens
        of the whole generation batch, not of the rows present, so dropping those rows changes neither. TRL shuffles
        a step's rollouts before it splits them into micro-batches, so they are dropped row by row. A micro-batch
        with none left returns a zero that still gives every trainable weight a zero gradient, so the optimizer steps
        as it would have.
        """
        drop = inputs["advantages"].abs() < ZERO_ADVANTAGE
        drop = drop if drop.dim() == 1 else drop.all(-1)
        if self.beta != 0.0 or self.loss_type != "dapo" or not drop.any() or set(inputs) - ROW_KEYS:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self.skipped_rows += int(drop.sum())
        if drop.all():
            return sum(p.sum() for p in model.parameters() if p.requires_grad) * 0.0
        keep = ~drop
        rows = {k: v[keep] if k != "num_items_in_batch" and v is not None else v for k, v in inputs.items()}
        return super().compute_loss(model, rows, return_outputs, num_items_in_batch)

    def _get_per_token_logps_and_entropies(  # noqa: ANN201 - TRL's signature
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs
    ):
        if kwargs.get("compute_aux_loss") or any(v is not None for k, v in kwargs.items() if k != "compute_aux_loss"):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, **kwargs
            )
        logps, entropies = shared_prompt_logps(
            model, input_ids, attention_mask, logits_to_keep, self.temperature, compute_entropy, bf16=self.bf16_autocast
        )
        return logps, entropies, None


def cleaner_reward(prompts: list[Any], completions: list[Any], cleaner_reward: list[float], **_: Any) -> list[float]:
    """TRL's reward function: the reward each rollout already computed (passed through ``rollout_func``)."""
    return list(cleaner_reward)
