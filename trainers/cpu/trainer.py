"""The CPU embedded trainer: CLEANER rollouts under TRL's GRPOTrainer, LoRA on the embedded model.

Where no GPU runs OpenRLHF, ``python -m trainers train-cleaner`` trains here: the same
rollout core (:func:`harness.core.rollout.rollout`), SAAR switch, sandbox and reward
(:mod:`trainers.core.reward`) as the OpenRLHF plugin, and the same token-level view of a
purified trajectory (:func:`trainers.core.tokens.assemble`), handed to TRL through its
``rollout_func`` contract (TRL >= 0.25; checked against 1.16): the function gets the
prompts of a step and returns ``prompt_ids``, ``completion_ids`` and ``logprobs``
(``None`` here: the trainer recomputes them over the purified sequence, for the same
reason as in the plugin), plus ``env_mask`` (1 on the model's tokens, 0 on tool output
and template headers, so no loss falls on them) and extra fields that reach the
reward function.

A step's rollouts run concurrently, and their turns are generated together in batches
by :class:`harness.engines.generation.Batcher` (one forward pass over several sequences costs
little more than over one on CPU). Every generation has its own sampling seed
(:mod:`harness.core.seeds`: from the run's seed, the step, the rollout's row, the turn and
the SAAR retry), so two runs that differ only in SAAR sample their first turns alike.
The GRPO loss runs each group's shared prompt through the model once
(:func:`shared_prompt_logps`).

A run is ``results/train/<recipe>-<timestamp>/`` (a new one each time; ``--resume`` continues the
newest, :mod:`trainers.cpu.runs`). Each step writes a line of metrics to its ``metrics.jsonl``: reward,
accuracy, tool failures (all attempts, and the policy's first attempts alone), SAAR
events by kind, TRL's loss and reward spread, tokens, rollout and step time; a
checkpoint every ``save_steps`` (``--resume`` continues from the latest one); and at
the end a PNG plot of the metrics.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from trl import GRPOTrainer

from harness.core import chat, seeds
from harness.core.messages import Generation, Message
from harness.core.metrics import TrajectoryMetrics, aggregate, first_attempts, rate
from harness.core.problems import rollout_config as problem_rollout_config
from harness.core.rollout import RolloutConfig, Trajectory, rollout
from trainers.core._compat import get_backend, get_render
from trainers.core.config import CpuConfig
from trainers.core.data import TrainItem, load_items, load_open_agentrl
from trainers.core.faults import rerun_on_sandbox_failure
from trainers.core.recipes import Recipe
from trainers.core.reward import Outcome, compute_reward
from trainers.core.tokens import SampledStore, assemble
from trainers.cpu.runs import resolve_run_dir

RESULTS = Path("results/train")
#: the "step" an evaluation's seeds are derived from (far from any training step's)
EVAL_STEP = 1_000_000
#: TRL's per-step log entries copied into metrics.jsonl (under the same names)
TRL_LOGS = ("loss", "grad_norm", "reward_std", "frac_reward_zero_std", "entropy")

__all__ = ["CpuConfig", "CpuTrainer", "PolicySampler", "RolloutRecord", "run_one", "step_metrics", "train_cpu"]


class PolicySampler:
    """The policy being trained as the rollout core's generator: token ids in, token ids out.

    Requests from concurrent rollouts are generated together by one
    :class:`harness.engines.generation.Batcher`; each request carries its own seed, so what a
    turn samples does not depend on which other turns shared its batch.
    """

    def __init__(self, model: Any, tokenizer: Any, cfg: CpuConfig, max_batch: int) -> None:
        from harness.engines.generation import Batcher  # noqa: PLC0415

        self.tokenizer, self.cfg = tokenizer, cfg
        self.batcher = Batcher(model, tokenizer, max_batch=max_batch, window_s=cfg.batch_window_s)
        # a turn ends where evaluation ends it: at the end-of-turn token or after a complete tool call
        self.stop_token_ids = tuple(chat.stop_token_ids(tokenizer))
        self.stop_strings = tuple(s for s in chat.stop_strings(tokenizer) if s not in tokenizer.get_vocab())

    async def __call__(self, context_ids: list[int], budget: int, seed: int | None) -> tuple[list[int], bool]:
        """Sample one turn after ``context_ids`` (at most ``budget`` tokens); return its ids and truncation."""
        from harness.engines.generation import Request, Sampling  # noqa: PLC0415

        max_new = min(self.cfg.max_new_tokens, budget)
        if max_new <= 0:
            return [], True
        sampling = Sampling(
            max_tokens=max_new,
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            seed=seed,
            stop_token_ids=self.stop_token_ids,
            stop_strings=self.stop_strings,
        )
        result = await self.batcher.generate(Request(context_ids, sampling))
        return result.token_ids, result.finish_reason == "length"

    def close(self) -> None:
        self.batcher.close()


@dataclass
class RolloutRecord:
    """One trajectory as the trainer sees it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    reward: float
    correct: bool
    traj: Trajectory
    sandbox_reruns: int = 0  #: times the rollout was rerun from its start after its sandbox failed


async def run_one(
    item: TrainItem, sampler: PolicySampler, backend: Any, rcfg: RolloutConfig, cfg: CpuConfig, seed: int
) -> RolloutRecord:
    """One CLEANER rollout of ``item`` and its reward, as token ids for TRL.

    ``seed`` is the trajectory's seed (:func:`harness.core.seeds.trajectory_seed`): the rollout
    core derives the SAAR draw and every generation's seed from it.
    """
    tok, render = sampler.tokenizer, get_render()
    messages = item.messages()

    async def attempt() -> tuple[Trajectory, Outcome, SampledStore]:
        store = SampledStore()  # a rerun starts from nothing the failed attempt sampled

        async def generate(context: list[Message], *, seed: int | None = None) -> Generation:
            ctx = assemble(tok, context, len(messages), store=store, add_generation_prompt=True, render=render)
            ids, truncated = await sampler(ctx.ids, cfg.max_total_tokens - len(ctx.ids), seed)
            ended = bool(ids) and ids[-1] in sampler.stop_token_ids  # the end-of-turn token is not part of the text
            text = tok.decode(ids[:-1] if ended else ids, skip_special_tokens=False)
            store.add(text, ids)
            return Generation(text=text, truncated=truncated, output_tokens=len(ids), token_ids=ids)

        sandbox = await backend.acquire()
        try:
            traj = await rollout(messages, generate, sandbox, problem_rollout_config(item.kind, rcfg), seed=seed)
            return traj, await compute_reward(item, traj.final_text, sandbox), store
        finally:
            await backend.release(sandbox)

    what = f"rollout of {item.id!r} (seed {seed})"
    (traj, outcome, store), reruns = await rerun_on_sandbox_failure(attempt, retries=cfg.sandbox_retries, what=what)
    full = assemble(tok, traj.messages, len(messages), store=store, render=render)
    prompt_len = len(assemble(tok, messages, len(messages), add_generation_prompt=True, render=render).ids)
    mask = full.action_mask()
    completion = full.ids[prompt_len:] or [tok.eos_token_id]
    env_mask = mask[prompt_len:] or [0]
    return RolloutRecord(full.ids[:prompt_len], completion, env_mask, outcome.reward, outcome.correct, traj, reruns)


def step_metrics(records: list[RolloutRecord], rollout_s: float) -> dict[str, Any]:
    """The rollout part of a step's metrics line: reward, accuracy and :func:`harness.core.metrics.aggregate`."""
    n = max(len(records), 1)
    firsts = [first_attempts(r.traj) for r in records]
    calls, failures = sum(c for c, _ in firsts), sum(f for _, f in firsts)
    return {
        "reward": sum(r.reward for r in records) / n,
        "accuracy": sum(r.correct for r in records) / n,
        **aggregate([TrajectoryMetrics.of(r.traj) for r in records]),
        "first_calls": calls,
        "first_call_failure_rate": rate(failures, calls),
        "sandbox_reruns": sum(r.sandbox_reruns for r in records),
        "rollout_s": rollout_s,
    }


def load_train_items(recipe: Recipe) -> list[TrainItem]:
    """The recipe's training problems (a JSONL of TrainItem fields, or Open-AgentRL-30K)."""
    source = recipe.data.get("source") or "trainers/data/tools-rl.jsonl"
    limit = recipe.data.get("limit")
    path = Path(source)
    if path.suffix == ".jsonl" and path.is_file():
        items = load_items(path)
        return items[:limit] if limit else items
    return load_open_agentrl(source, limit=limit)


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


class SharedPromptGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer whose log-probs run each group's prompt once (:func:`shared_prompt_logps`), under
    bfloat16 autocast when ``bf16_autocast`` is set (``cpu.bf16``; TRL's own ``bf16`` would not reach them), and
    whose micro-batches put the rows of a prompt together (:func:`regroup_micro_batches`)."""

    bf16_autocast = False
    skipped_rows = 0  #: rollouts whose forward and backward passes were skipped (advantage 0)

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


class CpuTrainer:
    """One CLEANER GRPO run on CPU. :meth:`train` runs it; TRL calls :meth:`rollout_func` each step.

    The step, in order: :meth:`rollout_func` runs the step's rollouts together and
    returns their tokens; TRL scores them (:func:`cleaner_reward`), computes the GRPO
    loss and steps the optimizer; :class:`StepLog` hands TRL's logs to
    :meth:`record_step`, which writes the step's line of metrics.
    """

    def __init__(
        self,
        recipe: Recipe,
        *,
        run_dir: Path,
        resume: bool = False,
        stop_after: int | None = None,
        progress: bool = True,
    ) -> None:
        self.recipe, self.run_dir, self.resume = recipe, run_dir, resume
        self.stop_after, self.progress = stop_after, progress
        self.cfg = CpuConfig.from_dict(recipe.cpu, str(recipe.path))
        self.rollout_config = recipe.executor.rollout_config()
        self.items = load_train_items(recipe)
        if not self.items:
            raise ValueError(f"{recipe.path}: the training data is empty")
        self.by_prompt = {it.prompt: it for it in self.items}
        self.metrics_path = run_dir / "metrics.jsonl"
        self.ckpt_dir = run_dir / "checkpoints"
        self.resume_from = self._checkpoint_to_resume()
        self.trainer: Any = None  #: TRL's GRPOTrainer (built by setup)
        self.model: Any = None
        self.policy: Any = None  #: the model with its LoRA layers (what generates and trains)
        self.tokenizer: Any = None
        self.sampler: Any = None  #: PolicySampler (the policy in-process) or engine_sync.EngineSampler (vLLM)
        self.backend: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pending: dict[str, Any] = {}  #: the current step's rollout metrics, until TRL logs the step
        self.skipped_before = 0  #: the trainer's skipped_rows when the last step was recorded
        self.steps_done = 0

    # ------------------------------------------------------------------ the run

    def __enter__(self) -> CpuTrainer:
        self.setup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def train(self) -> Path:
        """Run the recipe's steps (continuing from the latest checkpoint with ``resume``); return the run dir."""
        if self.trainer is None:
            raise RuntimeError("CpuTrainer.train runs inside `with CpuTrainer(...) as run:` (or after setup())")
        self.trainer.train(resume_from_checkpoint=str(self.resume_from) if self.resume_from else None)
        from trainers.core.plot import plot_metrics  # noqa: PLC0415

        plot_metrics(self.metrics_path, self.run_dir / "metrics.png")
        return self.run_dir

    def _checkpoint_to_resume(self) -> Path | None:
        last = max(self.ckpt_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]), default=None)
        if not self.resume and last is not None:
            raise FileExistsError(
                f"{self.run_dir} already holds a run; pass --resume to continue it or choose another --run"
            )
        if self.resume and last is None:
            raise FileNotFoundError(f"--resume: {self.ckpt_dir} holds no checkpoint to continue from")
        return last

    def setup(self) -> None:
        """Load the model, build TRL's trainer, start the batcher and the sandbox backend."""
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.trainer = self._grpo_trainer()
        self.backend = get_backend(self.recipe.executor.sandbox or "local")
        self.loop = asyncio.new_event_loop()
        engine, why = rollout_engine(self.cfg.engine)
        if why and self.progress:
            print(f"cpu.engine auto: rollouts generated in process, not on vLLM ({why})", flush=True)
        if engine == "vllm":
            from harness.engines.serve import served_dir  # noqa: PLC0415
            from trainers.core.engine_sync import EngineSampler  # noqa: PLC0415

            model_dir = served_dir(self.recipe.model)
            self.sampler = EngineSampler(model_dir, self.tokenizer, self.cfg, max_model_len=self.cfg.max_total_tokens)
        else:
            self.sampler = PolicySampler(self.policy, self.tokenizer, self.cfg, max_batch=self.batch_size)
        info = {"recipe": self.recipe.shown_path, "model": self.recipe.model, "cpu": asdict(self.cfg), "engine": engine}
        settings = self.run_dir / "recipe.json"
        if self.resume and settings.exists():  # a resumed run keeps what it started with; note each resume
            with (self.run_dir / "resumed.jsonl").open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"from": str(self.resume_from), **info}) + "\n")
        else:
            settings.write_text(json.dumps(info, indent=2))

    @property
    def batch_size(self) -> int:
        """Rollouts per step."""
        return self.cfg.prompts_per_step * self.cfg.num_generations

    def _grpo_trainer(self) -> Any:
        import torch  # noqa: PLC0415
        from datasets import Dataset  # noqa: PLC0415
        from peft import LoraConfig  # noqa: PLC0415
        from transformers import PrinterCallback  # noqa: PLC0415
        from trl import GRPOConfig  # noqa: PLC0415

        from trainers.core._compat import load_model  # noqa: PLC0415

        cfg = self.cfg
        torch.set_num_threads(cfg.threads)
        self.model, self.tokenizer = load_model_f32(self.recipe.model, load_model)
        args = GRPOConfig(
            output_dir=str(self.ckpt_dir),
            max_steps=cfg.steps,
            # the step's rollouts are generated together (generation batch = all of them), and the loss is
            # computed one GRPO group at a time: the activations of a whole step's trajectories at once need several GB
            per_device_train_batch_size=cfg.num_generations,
            gradient_accumulation_steps=cfg.prompts_per_step,
            gradient_checkpointing=False,  # a 135M model fits; recomputing activations only costs time on CPU
            num_generations=cfg.num_generations,
            learning_rate=cfg.learning_rate,
            beta=0.0,
            # the clip bounds never act here: one optimizer step per generation batch (one iteration,
            # steps_per_generation = gradient_accumulation_steps) and no sampling log-probs ("logprobs": None), so
            # TRL takes the old log-probs to be the current ones and the ratio is exactly 1
            epsilon=cfg.clip_low,
            epsilon_high=cfg.clip_high,
            loss_type="dapo",
            max_completion_length=cfg.max_total_tokens,
            temperature=cfg.temperature,
            logging_steps=1,
            save_steps=max(cfg.save_steps, 1),
            save_strategy="steps" if cfg.save_steps else "no",
            report_to=[],
            seed=cfg.seed,
            bf16=False,
            use_cpu=True,
            dataloader_num_workers=0,
            disable_tqdm=True,
            save_only_model=False,
        )
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM")
        trainer = SharedPromptGRPOTrainer(
            model=self.model,
            reward_funcs=[cleaner_reward],
            args=args,
            train_dataset=Dataset.from_list([{"prompt": it.prompt} for it in self.items]),
            processing_class=self.tokenizer,
            peft_config=lora,
            rollout_func=self.rollout_func,
            callbacks=[StepLog(self)],
        )
        trainer.bf16_autocast = cfg.bf16
        trainer.remove_callback(PrinterCallback)  # StepLog prints one line per step instead of TRL's raw dict
        self.policy = trainer.accelerator.unwrap_model(trainer.model)
        return trainer

    def close(self) -> None:
        """Stop the batcher and the sandboxes (idempotent); the model stays loaded."""
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None
        if self.loop is not None:
            if self.backend is not None:
                self.loop.run_until_complete(self.backend.shutdown())
            self.loop.close()
            self.loop = None

    # ------------------------------------------------------------------ one step

    def rollout_func(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        """TRL's hook: the step's rollouts, generated together, as token ids, env masks and rewards."""
        unknown = [p for p in prompts if p not in self.by_prompt]
        if unknown:
            raise KeyError(f"rollout_func got a prompt that is not in the training data: {unknown[0][:80]!r}")
        assert self.sampler is not None and self.loop is not None, "rollout_func runs inside train()"
        policy = trainer.accelerator.unwrap_model(trainer.model)
        was_training = policy.training
        policy.eval()
        start, cpu_start = time.perf_counter(), time.process_time()
        batcher = getattr(self.sampler, "batcher", None)
        batches, rows = (batcher.batches, batcher.rows) if batcher else (0, 0)
        step = trainer.state.global_step + 1
        items = [self.by_prompt[p] for p in prompts]
        try:
            sync_s = self.sync_engine(trainer.state.global_step)
            records = self.loop.run_until_complete(self.rollouts(items, step))
        finally:
            if was_training:
                policy.train()
        self.pending = step_metrics(records, time.perf_counter() - start)
        if batcher:
            self.pending["gen_batches"] = batcher.batches - batches  # generation calls of the step
            self.pending["gen_rows"] = batcher.rows - rows  # turns generated (rows over all batches)
        else:  # vLLM's engine: its own continuous batching; the weights synced before the step's rollouts
            self.pending["sync_s"] = sync_s
        self.pending["rollout_cpu_s"] = time.process_time() - cpu_start  # CPU seconds, every thread of the process
        return {
            "prompt_ids": [r.prompt_ids for r in records],
            "completion_ids": [r.completion_ids for r in records],
            "logprobs": None,
            "env_mask": [r.env_mask for r in records],
            "cleaner_reward": [r.reward for r in records],
        }

    def sync_engine(self, step: int) -> float:
        """With vLLM's engine: the policy's merged weights into it, once per optimizer step (seconds taken).

        Called before every step's rollouts, so the engine samples the policy as it is after the last
        optimizer step (the first call loads the trainer's own float32 weights over the served ones).
        """
        sync = getattr(self.sampler, "sync", None)
        if sync is None:
            return 0.0
        assert self.loop is not None
        return self.loop.run_until_complete(sync(self.policy, step))

    async def rollouts(
        self, items: list[TrainItem], step: int, rcfg: RolloutConfig | None = None
    ) -> list[RolloutRecord]:
        """Every rollout of a step at once (in the order of ``items``); their turns share batches."""
        assert self.sampler is not None
        rcfg = rcfg or self.rollout_config
        jobs = [
            run_one(item, self.sampler, self.backend, rcfg, self.cfg, self.row_seed(step, row))
            for row, item in enumerate(items)
        ]
        return list(await asyncio.gather(*jobs))

    def row_seed(self, step: int, row: int) -> int:
        """The trajectory seed of one rollout: the same (run seed, step, row) samples alike in every run."""
        return seeds.trajectory_seed(self.cfg.seed, f"step{step}-row{row}", 0)

    def record_step(
        self, step: int, max_steps: int, logs: dict[str, float], step_s: float, step_cpu_s: float
    ) -> dict[str, Any]:
        """Write the step's metrics line (rollout metrics, TRL's loss and reward spread, times) and show it.

        Wall seconds depend on what else runs on the machine; CPU seconds (``*_cpu_s``) much less.
        """
        row = {"step": step, **self.pending, **{k: logs[k] for k in TRL_LOGS if k in logs}}
        skipped = getattr(self.trainer, "skipped_rows", 0)
        row |= {"rows_skipped": skipped - self.skipped_before, "step_s": step_s, "step_cpu_s": step_cpu_s}
        self.pending, self.skipped_before = {}, skipped
        with self.metrics_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        if self.progress:
            print(
                f"step {step}/{max_steps}  reward {row.get('reward', 0):+.2f} (std {row.get('reward_std', 0):.2f}, "
                f"zero-std groups {row.get('frac_reward_zero_std', 0):.2f})  loss {row.get('loss', 0):+.4f}  "
                f"acc {row.get('accuracy', 0):.2f}  tool-fail {row.get('tool_failure_rate_pooled', 0):.2f} "
                f"(first {row.get('first_call_failure_rate', 0):.2f})  saar s/d/x "
                f"{row.get('saar_shallow', 0):.0f}/{row.get('saar_deep', 0):.0f}/{row.get('saar_exhausted', 0):.0f}"
                f"  {row.get('rollout_s', 0):.1f}s rollouts, {step_s:.1f}s step ({step_cpu_s:.1f} CPU s)",
                flush=True,
            )
        return row

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, items: list[TrainItem], *, saar: bool, seed: int) -> dict[str, Any]:
        """One rollout per item with the current policy (no training), SAAR on or off: the step metrics."""
        assert self.sampler is not None and self.loop is not None, "evaluate runs between _grpo_trainer and close"
        saar_cfg = replace(self.rollout_config.saar, enabled=saar)
        rcfg = replace(self.rollout_config, saar=saar_cfg)
        self.policy.eval()
        start = time.perf_counter()
        self.sync_engine(self.trainer.state.global_step if self.trainer is not None else 0)
        records = self.loop.run_until_complete(self.rollouts(items, EVAL_STEP + seed, rcfg))
        return step_metrics(records, time.perf_counter() - start)


class StepLog(TrainerCallback):
    """Times each step, writes its metrics when TRL logs it, and stops an interrupted run (``stop_after``)."""

    def __init__(self, run: CpuTrainer) -> None:
        self.run, self.t0, self.cpu0 = run, time.perf_counter(), time.process_time()

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001
        self.t0, self.cpu0 = time.perf_counter(), time.process_time()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
        self.run.steps_done += 1
        if self.run.stop_after is not None and self.run.steps_done >= self.run.stop_after:
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
        if logs and "loss" in logs:  # a step's log (not the end-of-training summary)
            wall, cpu = time.perf_counter() - self.t0, time.process_time() - self.cpu0
            self.run.record_step(state.global_step, state.max_steps, logs, wall, cpu)


def train_cpu(
    recipe: Recipe,
    *,
    run_name: str | None = None,
    resume: bool = False,
    out_root: Path = RESULTS,
    stop_after: int | None = None,
    progress: bool = True,
) -> Path:
    """Train with the recipe's ``cpu`` section; return the run directory.

    Without ``run_name`` each call is a new run, ``out_root/<recipe>-<timestamp>``, and ``resume``
    continues the recipe's newest run (:mod:`trainers.cpu.runs`); a ``run_name`` names the directory.

    ``stop_after`` ends the run after that many steps of this invocation, as an
    interruption would (tests use it to check that ``resume`` continues).
    """
    run_dir = resolve_run_dir(recipe.name, out_root, run_name, resume)
    with CpuTrainer(recipe, run_dir=run_dir, resume=resume, stop_after=stop_after, progress=progress) as run:
        return run.train()


def rollout_engine(requested: str) -> tuple[str, str | None]:
    """What generates a run's rollouts (``cpu.engine``): ``auto`` is ``vllm`` where vLLM can run here, else ``hf``,
    with the reason vLLM cannot."""
    if requested != "auto":
        return requested, None
    from harness.engines.serve import vllm_missing  # noqa: PLC0415

    why = vllm_missing()
    return ("hf", why) if why else ("vllm", None)


def load_model_f32(spec: str | None, loader: Any) -> tuple[Any, Any]:
    """The policy in float32 (LoRA gradients on CPU) with a pad token."""
    import torch  # noqa: PLC0415

    try:
        model, tok = loader(spec, dtype=torch.float32)
    except TypeError:  # the stand-in loader takes no dtype
        model, tok = loader(spec)
        model = model.float()
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok
