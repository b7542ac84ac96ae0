"""Cold-start SFT: teach SmolLM2-135M to call the python tool, on CPU (``python -m trainers warmup``).

Agentic RL starts from a model that already uses its tool (DemyAgent, CLEANER). The raw
135M model writes prose and never calls the tool, so SAAR never acts on it. :func:`train`
builds the project's first tool-using embedded model, ``embedded/smollm2-tools-sft`` (the start of
the expert-iteration rounds that build the warm model ``embedded/smollm2-tools``), in four steps:

1. **Demonstrations** (:mod:`trainers.warmup.demonstrations`): seeded generated problems, each solved by scripted
   turns through the rollout core and the real sandbox, some first failing with a planted bug and then fixing it.
2. **Loss mask** (:func:`trainers.warmup.sft.tokenize`): the assistant turns are trained on, except a turn whose
   call failed.
3. **Training** (:func:`trainers.warmup.sft.fit`, shared with the expert-iteration rounds of
   :mod:`trainers.warmup.iterate`): LoRA on the float32 model under bfloat16 autocast, AdamW.
4. **Artifact** (:func:`trainers.warmup.artifacts.save_adapter`): the adapter in bfloat16 and ``warmup.json`` in
   ``harness/data/models/smollm2-tools-sft/``.

The settings are :class:`trainers.warmup.config.WarmupConfig`. Rebuild the committed artifact with
``python -m trainers warmup`` (the defaults).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from harness.benchmarks.generators import GENERATORS, generate
from trainers.warmup.artifacts import save_adapter
from trainers.warmup.config import TRAIN_SEED, TRAIN_WEIGHTS, WarmupConfig
from trainers.warmup.demonstrations import build_demonstrations
from trainers.warmup.sft import FitSettings, fit, tokenize


def train(cfg: WarmupConfig, *, progress: bool = True) -> Path:
    """Generate, tokenize, fine-tune and write the adapter; return the artifact directory."""
    import torch
    from peft import LoraConfig, get_peft_model

    from harness.engines.models import load_model

    started = time.monotonic()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    weights = [TRAIN_WEIGHTS[k] for k in GENERATORS]
    problems = generate(cfg.problems, seed=TRAIN_SEED + cfg.seed, weights=weights, prefix="train")
    demos = asyncio.run(build_demonstrations(problems, fail_share=cfg.fail_share, seed=cfg.seed))
    data_s = time.monotonic() - started
    model, tokenizer = load_model(None, dtype=torch.float32)
    examples = [tokenize(tokenizer, d) for d in demos]
    lengths = [len(e.ids) for e in examples]
    print(
        f"warmup: {len(demos)} demonstrations ({sum(d.bug is not None for d in demos)} with a failed call), "
        f"{sum(lengths)} tokens, {sum(sum(x != -100 for x in e.labels) for e in examples)} trained, "
        f"longest {max(lengths)}; built in {data_s:.0f} s",
        flush=True,
    )
    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, target_modules="all-linear")
    model = get_peft_model(model, lora)
    settings = FitSettings(cfg.steps, cfg.batch_size, cfg.micro_batch, cfg.learning_rate, cfg.warmup_steps, cfg.seed)
    groups = [d.problem.kind == "code" for d in demos]
    result = fit(model, examples, groups, settings, tokenizer.pad_token_id, progress=progress)
    out = save_adapter(
        model, cfg, demos, result.losses, data_s=data_s, train_s=result.train_s, train_cpu_s=result.train_cpu_s
    )
    total_s = time.monotonic() - started
    print(f"warmup: adapter written to {out} (training {result.train_s:.0f} s, total {total_s:.0f} s)")
    return out
