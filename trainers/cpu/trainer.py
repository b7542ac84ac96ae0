"""The CPU embedded trainer: CLEANER rollouts under TRL's GRPOTrainer, LoRA on the embedded model.

Where no GPU runs OpenRLHF, ``python -m trainers train-cleaner`` trains here: the same
rollout core (:func:`harness.core.rollout.rollout`), SAAR switch, sandbox and reward
(:mod:`trainers.core.reward`) as the OpenRLHF plugin, and the same token-level view of a
purified trajectory (:func:`trainers.core.tokens.assemble`), handed to TRL through its
``rollout_func`` contract (TRL >= 0.25; checked against 1.16): the function gets the
prompts of a step and returns ``prompt_ids``, ``completion_ids`` and ``logprobs``
(``None`` unless ``cpu.is_correction`` is on: then the rollout engine's log-probs, SAAR's replaced spans rescored
under the purified context, :mod:`trainers.core.rescore`, which TRL's importance-sampling correction weighs the
trainer's log-probs against), plus ``env_mask`` (1 on the model's tokens, 0 on tool output
and template headers, so no loss falls on them) and extra fields that reach the
reward function.

A step's rollouts (:mod:`trainers.cpu.rollouts`) run concurrently, and their turns are generated together in batches
by :class:`harness.engines.generation.Batcher` (one forward pass over several sequences costs
little more than over one on CPU). Every generation has its own sampling seed
(:mod:`harness.core.seeds`: from the run's seed, the step, the rollout's row, the turn and
the SAAR retry), so two runs that differ only in SAAR sample their first turns alike.
The GRPO loss runs each group's shared prompt through the model once
(:func:`trainers.cpu.grpo.shared_prompt_logps`).

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
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from harness.benchmarks.problem import Problem
from harness.core import seeds
from harness.core.rollout import RolloutConfig
from sandboxes.base import SandboxError
from trainers.core._compat import get_backend
from trainers.core.config import CpuConfig
from trainers.core.data import load_items, load_open_agentrl
from trainers.core.recipes import Recipe
from trainers.core.rescore import check_plain_sampling
from trainers.cpu.grpo import SharedPromptGRPOTrainer, cleaner_reward
from trainers.cpu.resume import (
    StepFault,
    checkpoint_to_resume,
    next_step,
    record_step_fault,
    step_reseed,
    write_settings,
)
from trainers.cpu.rollouts import PolicySampler, RolloutRecord, run_one, step_metrics
from trainers.cpu.runs import resolve_run_dir

RESULTS = Path("results/train")
#: the "step" an evaluation's seeds are derived from (far from any training step's)
EVAL_STEP = 1_000_000
#: TRL's per-step log entries copied into metrics.jsonl (under the same names); the last two with importance-sampling
#: correction on (the engine/trainer gap over the trained tokens, and the mean ratio TRL weighs them with)
TRL_LOGS = (
    "loss", "grad_norm", "reward_std", "frac_reward_zero_std", "entropy",
    "sampling/sampling_logp_difference/mean", "sampling/importance_sampling_ratio/mean",
)  # fmt: skip

__all__ = ["CpuTrainer", "StepLog", "load_model_f32", "load_train_items", "rollout_engine", "train_cpu"]


def load_train_items(recipe: Recipe) -> list[Problem]:
    """The recipe's training problems (a JSONL of labels, or Open-AgentRL-30K)."""
    source = recipe.data.get("source") or "trainers/data/tools-rl.jsonl"
    limit = recipe.data.get("limit")
    path = Path(source)
    if path.suffix == ".jsonl" and path.is_file():
        items = load_items(path)
        return items[:limit] if limit else items
    return load_open_agentrl(source, limit=limit)


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
        if self.cfg.is_correction != "off" and self.rollout_config.saar.enabled:
            check_plain_sampling(self.cfg, f"{recipe.path}: cpu.is_correction with SAAR on")
        self.items = load_train_items(recipe)
        if not self.items:
            raise ValueError(f"{recipe.path}: the training data is empty")
        self.by_prompt = {it.prompt: it for it in self.items}
        self.metrics_path = run_dir / "metrics.jsonl"
        self.ckpt_dir = run_dir / "checkpoints"
        self.resume_from = checkpoint_to_resume(run_dir, resume)
        self.step_reseed(next_step(self.resume_from))  # a step that keeps failing stops here, before any loading
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

    def step_reseed(self, step: int) -> int:
        """The reseed of ``step`` (:func:`trainers.cpu.resume.step_reseed`); raises when it keeps failing."""
        backend = self.recipe.executor.sandbox or "local"
        return step_reseed(self.run_dir, step, self.cfg.step_fault_runs, backend)

    def setup(self) -> None:
        """Load the model, build TRL's trainer, start the batcher and the sandbox backend."""
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.trainer = self._grpo_trainer()
        self.backend = get_backend(self.recipe.executor.sandbox or "local", runtime=self.recipe.executor.env.runtime)
        self.loop = asyncio.new_event_loop()
        engine, why = rollout_engine(self.cfg.engine)
        if engine != "vllm" and self.cfg.is_correction != "off":
            raise ValueError(
                f"{self.recipe.path}: cpu.is_correction needs vLLM's engine, which cannot run here ({why})"
            )
        if why and self.progress:
            print(f"cpu.engine auto: rollouts generated in process, not on vLLM ({why})", flush=True)
        if engine == "vllm":
            from harness.engines.served_model import served_dir  # noqa: PLC0415
            from trainers.core.engine_sync import EngineSampler  # noqa: PLC0415

            model_dir = served_dir(self.recipe.model)
            self.sampler = EngineSampler(model_dir, self.tokenizer, self.cfg, max_model_len=self.cfg.max_total_tokens)
        else:
            self.sampler = PolicySampler(self.policy, self.tokenizer, self.cfg, max_batch=self.batch_size)
        info = {"recipe": self.recipe.shown_path, "model": self.recipe.model, "cpu": asdict(self.cfg), "engine": engine}
        write_settings(self.run_dir, info, self.resume_from)

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
            # steps_per_generation = gradient_accumulation_steps), so the old log-probs are the current ones and
            # the ratio is exactly 1
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
            vllm_importance_sampling_correction=cfg.is_correction != "off",
            vllm_importance_sampling_mode=cfg.is_correction if cfg.is_correction != "off" else "sequence_mask",
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
        if cfg.is_correction != "off":
            trainer.correct_engine_mismatch()
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
        reseed = self.step_reseed(step)
        try:
            sync_s = self.sync_engine(trainer.state.global_step)
            records = self.loop.run_until_complete(self.rollouts(items, step, reseed=reseed))
        except SandboxError as exc:  # past its reruns: recorded, so that --resume samples this step anew
            record_step_fault(self.run_dir, StepFault(step, reseed, str(exc)))
            raise
        finally:
            if was_training:
                policy.train()
        self.pending = step_metrics(records, time.perf_counter() - start) | {"reseed": reseed}
        if batcher:
            self.pending["gen_batches"] = batcher.batches - batches  # generation calls of the step
            self.pending["gen_rows"] = batcher.rows - rows  # turns generated (rows over all batches)
        else:  # vLLM's engine: its own continuous batching; the weights synced before the step's rollouts
            self.pending["sync_s"] = sync_s
        self.pending["rollout_cpu_s"] = time.process_time() - cpu_start  # CPU seconds, every thread of the process
        return {
            "prompt_ids": [r.prompt_ids for r in records],
            "completion_ids": [r.completion_ids for r in records],
            "logprobs": [r.logprobs for r in records] if self.cfg.is_correction != "off" else None,
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
        self, items: list[Problem], step: int, rcfg: RolloutConfig | None = None, *, reseed: int = 0
    ) -> list[RolloutRecord]:
        """Every rollout of a step at once (in the order of ``items``); their turns share batches."""
        assert self.sampler is not None
        rcfg = rcfg or self.rollout_config
        jobs = [
            run_one(
                item,
                self.sampler,
                self.backend,
                rcfg,
                self.cfg,
                self.row_seed(step, row, reseed),
                judge=self.recipe.executor,
            )
            for row, item in enumerate(items)
        ]
        return list(await asyncio.gather(*jobs))

    def row_seed(self, step: int, row: int, reseed: int = 0) -> int:
        """The trajectory seed of one rollout: the same (run seed, step, row) samples alike in every run; a step
        rerun after sandbox faults (``reseed`` > 0, :mod:`trainers.cpu.resume`) samples with other seeds."""
        return seeds.trajectory_seed(self.cfg.seed, f"step{step}-row{row}" + (f"-reseed{reseed}" if reseed else ""), 0)

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

    def evaluate(self, items: list[Problem], *, saar: bool, seed: int) -> dict[str, Any]:
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
