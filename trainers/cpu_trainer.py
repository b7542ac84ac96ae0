"""The CPU embedded trainer: CLEANER rollouts under TRL's GRPOTrainer, LoRA on SmolLM2-135M.

Where no GPU runs OpenRLHF, ``python -m trainers train-cleaner`` trains here: the same
rollout core (:func:`harness.rollout.rollout`), SAAR switch, sandbox and reward
(:mod:`trainers.reward`) as the OpenRLHF plugin, and the same token-level view of a
purified trajectory (:func:`trainers.tokens.assemble`), handed to TRL through its
``rollout_func`` contract (TRL >= 0.25; checked against 1.16): the function gets the
prompts of a step and returns ``prompt_ids``, ``completion_ids`` and ``logprobs``
(``None`` here: the trainer recomputes them over the purified sequence, for the same
reason as in the plugin), plus ``env_mask`` (1 on the model's tokens, 0 on tool output
and template headers, so no loss falls on them) and extra fields that reach the
reward function.

Each step writes a line of metrics to ``results/train/<run>/metrics.jsonl`` (reward,
accuracy, tool-failure rate, SAAR events by kind, tokens, rollout and step time), a
checkpoint every ``save_steps`` (``--resume`` continues from the latest one), and at
the end a PNG plot of the metrics.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from harness.messages import Generation, Message
from harness.rollout import RolloutConfig, Trajectory, rollout
from trainers._compat import get_backend, get_render
from trainers.data import TrainItem, load_items, load_open_agentrl
from trainers.launcher import Recipe
from trainers.reward import compute_reward
from trainers.tokens import SampledStore, assemble

RESULTS = Path("results/train")


@dataclass(frozen=True)
class CpuConfig:
    """The ``cpu:`` section of a recipe."""

    steps: int = 4
    prompts_per_step: int = 2
    num_generations: int = 4
    max_new_tokens: int = 96
    max_total_tokens: int = 768
    temperature: float = 0.9
    top_p: float = 0.95
    learning_rate: float = 5e-5
    lora_r: int = 8
    lora_alpha: int = 16
    clip_low: float = 0.2
    clip_high: float = 0.28
    save_steps: int = 1
    seed: int = 0
    threads: int = 1  #: torch threads; more than 1 thrashes when the cores are shared (63 s vs 7 s for 24 tokens)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> CpuConfig:
        known = {f.name for f in fields(cls)}
        if unknown := set(data) - known:
            raise ValueError(f"{where}: unknown keys in 'cpu': {sorted(unknown)}; known: {sorted(known)}")
        cfg = cls(**data)
        ints = ("steps", "prompts_per_step", "max_new_tokens", "max_total_tokens", "save_steps", "lora_r", "threads")
        for name in ints:
            if not isinstance(getattr(cfg, name), int) or getattr(cfg, name) < 1:
                raise ValueError(f"{where}: cpu.{name} must be a positive integer, got {getattr(cfg, name)!r}")
        if not isinstance(cfg.num_generations, int) or cfg.num_generations < 2:
            raise ValueError(f"{where}: cpu.num_generations must be >= 2 (GRPO normalises within a group)")
        return cfg


class HFGenerator:
    """``generate`` for the rollout core: the policy being trained, on CPU, via transformers."""

    def __init__(self, model: Any, tokenizer: Any, cfg: CpuConfig, seed: int) -> None:
        self.model, self.tokenizer, self.cfg = model, tokenizer, cfg
        self.seed = seed
        self.calls = 0

    def __call__(self, context_ids: list[int], budget: int) -> tuple[list[int], bool]:
        import torch  # noqa: PLC0415

        max_new = min(self.cfg.max_new_tokens, budget)
        if max_new <= 0:
            return [], True
        self.calls += 1
        torch.manual_seed(self.seed * 100003 + self.calls)
        inputs = torch.tensor([context_ids])
        with torch.no_grad():
            out = self.model.generate(
                input_ids=inputs,
                attention_mask=torch.ones_like(inputs),
                max_new_tokens=max_new,
                do_sample=True,
                temperature=self.cfg.temperature,
                top_p=self.cfg.top_p,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
            )
        ids = out[0, len(context_ids) :].tolist()
        truncated = not ids or ids[-1] != self.tokenizer.eos_token_id
        return ids, truncated


@dataclass
class RolloutRecord:
    """One trajectory as the trainer sees it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    reward: float
    correct: bool
    traj: Trajectory


async def run_one(
    item: TrainItem, gen: HFGenerator, backend: Any, rcfg: RolloutConfig, cfg: CpuConfig, rng: random.Random
) -> RolloutRecord:
    """One CLEANER rollout of ``item`` and its reward, as token ids for TRL."""
    tok, render = gen.tokenizer, get_render()
    messages = item.messages()
    store = SampledStore()

    async def generate(context: list[Message]) -> Generation:
        ctx = assemble(tok, context, len(messages), store=store, add_generation_prompt=True, render=render)
        ids, truncated = gen(ctx.ids, cfg.max_total_tokens - len(ctx.ids))
        text = tok.decode(ids, skip_special_tokens=False)
        if text.endswith(tok.eos_token):
            text = text[: -len(tok.eos_token)]
        store.add(text, ids)
        return Generation(text=text, truncated=truncated, output_tokens=len(ids), token_ids=ids)

    sandbox = await backend.acquire()
    try:
        traj = await rollout(messages, generate, sandbox, rcfg, rng)
        outcome = await compute_reward(item, traj.final_text, sandbox)
    finally:
        await backend.release(sandbox)
    full = assemble(tok, traj.messages, len(messages), store=store, render=render)
    prompt_len = len(assemble(tok, messages, len(messages), add_generation_prompt=True, render=render).ids)
    mask = full.action_mask()
    completion = full.ids[prompt_len:] or [tok.eos_token_id]
    env_mask = mask[prompt_len:] or [0]
    return RolloutRecord(full.ids[:prompt_len], completion, env_mask, outcome.reward, outcome.correct, traj)


def step_metrics(records: list[RolloutRecord], rollout_s: float) -> dict[str, Any]:
    """The per-step numbers written to metrics.jsonl."""
    summaries = [r.traj.summary() for r in records]
    calls = sum(s["tool_calls"] for s in summaries)
    n = max(len(records), 1)
    return {
        "reward": sum(r.reward for r in records) / n,
        "accuracy": sum(r.correct for r in records) / n,
        "tool_calls": calls / n,
        "tool_failure_rate": sum(s["tool_failures"] for s in summaries) / calls if calls else 0.0,
        "saar_on": sum(s["saar_on"] for s in summaries) / n,
        "saar_shallow": sum(s["saar_shallow"] for s in summaries),
        "saar_deep": sum(s["saar_deep"] for s in summaries),
        "saar_purified": sum(s["saar_purified"] for s in summaries),
        "saar_exhausted": sum(s["saar_exhausted"] for s in summaries),
        "turns": sum(s["assistant_turns"] for s in summaries) / n,
        "tokens_generated": sum(s["tokens_generated"] for s in summaries),
        "tokens_kept": sum(s["tokens_kept"] for s in summaries),
        "rollout_s": rollout_s,
    }


def load_train_items(recipe: Recipe) -> list[TrainItem]:
    source = recipe.data.get("source") or "trainers/data/bignum.jsonl"
    limit = recipe.data.get("limit")
    path = Path(source)
    if path.suffix == ".jsonl" and path.is_file():
        items = load_items(path)
        return items[:limit] if limit else items
    return load_open_agentrl(source, limit=limit)


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

    ``stop_after`` ends the run after that many steps of this invocation, as an
    interruption would (tests use it to check that ``resume`` continues).
    """
    import torch  # noqa: PLC0415
    from datasets import Dataset  # noqa: PLC0415
    from peft import LoraConfig  # noqa: PLC0415
    from transformers import TrainerCallback  # noqa: PLC0415
    from trl import GRPOConfig, GRPOTrainer  # noqa: PLC0415

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    cfg = CpuConfig.from_dict(recipe.cpu, str(recipe.path))
    run_dir = out_root / (run_name or recipe.name)
    ckpt_dir = run_dir / "checkpoints"
    metrics_path = run_dir / "metrics.jsonl"
    if not resume and run_dir.exists() and any(ckpt_dir.glob("checkpoint-*")):
        raise FileExistsError(f"{run_dir} already holds a run; pass --resume to continue it or choose another --run")
    run_dir.mkdir(parents=True, exist_ok=True)
    last_ckpt = max(ckpt_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]), default=None)
    if resume and last_ckpt is None:
        raise FileNotFoundError(f"--resume: {ckpt_dir} holds no checkpoint to continue from")

    from trainers._compat import load_model  # noqa: PLC0415

    model, tok = load_model_f32(recipe.model, load_model)
    items = load_train_items(recipe)
    if not items:
        raise ValueError(f"{recipe.path}: the training data is empty")
    by_prompt = {it.prompt: it for it in items}
    dataset = Dataset.from_list([{"prompt": it.prompt} for it in items])
    rcfg = RolloutConfig(
        max_turns=recipe.executor.max_turns,
        timeout=recipe.executor.timeout,
        output_chars=recipe.executor.output_chars,
        saar=recipe.executor.saar_config(),
    )
    backend = get_backend(recipe.executor.sandbox or "local")
    loop = asyncio.new_event_loop()
    rng = random.Random(cfg.seed)
    pending: dict[str, Any] = {}

    def rollout_func(prompts: list[str], trainer: Any) -> dict[str, Any]:
        policy = trainer.accelerator.unwrap_model(trainer.model)
        was_training = policy.training
        policy.eval()
        gen = HFGenerator(policy, tok, cfg, seed=cfg.seed + trainer.state.global_step)
        start = time.perf_counter()
        records = []
        for i, prompt in enumerate(prompts):
            if prompt not in by_prompt:
                raise KeyError(f"rollout_func got a prompt that is not in the training data: {prompt[:80]!r}")
            traj_rng = random.Random(rng.random())
            records.append(loop.run_until_complete(run_one(by_prompt[prompt], gen, backend, rcfg, cfg, traj_rng)))
            if progress:
                print(f"\r  rollouts {i + 1}/{len(prompts)}", end="", flush=True)
        if was_training:
            policy.train()
        pending["metrics"] = step_metrics(records, time.perf_counter() - start)
        return {
            "prompt_ids": [r.prompt_ids for r in records],
            "completion_ids": [r.completion_ids for r in records],
            "logprobs": None,
            "env_mask": [r.env_mask for r in records],
            "cleaner_reward": [r.reward for r in records],
        }

    def cleaner_reward(prompts: list[Any], completions: list[Any], cleaner_reward: list[float], **_: Any) -> list:
        return list(cleaner_reward)

    class MetricsCallback(TrainerCallback):
        def __init__(self) -> None:
            self.t0 = time.perf_counter()
            self.done = 0

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            row = {"step": state.global_step, **pending.pop("metrics", {}), "step_s": time.perf_counter() - self.t0}
            with metrics_path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
            if progress:
                print(
                    f"\rstep {state.global_step}/{state.max_steps}  reward {row.get('reward', 0):+.2f}  "
                    f"acc {row.get('accuracy', 0):.2f}  tool-fail {row.get('tool_failure_rate', 0):.2f}  "
                    f"saar s/d {row.get('saar_shallow', 0)}/{row.get('saar_deep', 0)}  {row['step_s']:.1f}s",
                    flush=True,
                )
            self.done += 1
            if stop_after is not None and self.done >= stop_after:
                control.should_save = True
                control.should_training_stop = True
            return control

    batch = cfg.prompts_per_step * cfg.num_generations
    args = GRPOConfig(
        output_dir=str(ckpt_dir),
        max_steps=cfg.steps,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=cfg.num_generations,
        learning_rate=cfg.learning_rate,
        beta=0.0,
        epsilon=cfg.clip_low,
        epsilon_high=cfg.clip_high,
        loss_type="dapo",
        max_completion_length=cfg.max_total_tokens,
        temperature=cfg.temperature,
        logging_steps=1,
        save_steps=cfg.save_steps,
        save_strategy="steps",
        report_to=[],
        seed=cfg.seed,
        bf16=False,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        save_only_model=False,
    )
    peft_config = LoraConfig(
        r=cfg.lora_r, lora_alpha=cfg.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
    )
    torch.set_num_threads(cfg.threads)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[cleaner_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tok,
        peft_config=peft_config,
        rollout_func=rollout_func,
        callbacks=[MetricsCallback()],
    )
    (run_dir / "recipe.json").write_text(json.dumps({"recipe": str(recipe.path), "cpu": asdict(cfg)}, indent=2))
    try:
        trainer.train(resume_from_checkpoint=str(last_ckpt) if resume else None)
    finally:
        loop.run_until_complete(backend.shutdown())
        loop.close()
    from trainers.plot import plot_metrics  # noqa: PLC0415

    plot_metrics(metrics_path, run_dir / "metrics.png")
    return run_dir


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
