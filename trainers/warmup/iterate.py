"""Expert iteration for the warm model (``python -m trainers warmup-iterate``).

The cold-start SFT (:mod:`trainers.warmup.build`) teaches the tool from scripted demonstrations; none
came from the model itself. Each round here samples the current model's own trajectories and trains on
what went right (rejection-sampling fine-tuning, as STaR and RFT do):

1. **Sampling.** ``problems`` new generated problems (:mod:`harness.benchmarks.generators`, training
   seeds below :data:`~trainers.warmup.config.HELD_OUT_SEED`, one generator seed per round) x ``samples``
   trajectories on vLLM's offline engine (:class:`harness.engines.vllm_offline.OfflineEngine`) through the
   shared rollout core and the local sandbox: temperature 1.0, top_p 1.0, SAAR on (3 retries), 3 turns
   of at most 256 tokens, all of them in flight at once. Every trajectory's seed derives from (run seed, round,
   problem, sample). The engine holds the policy in float32 by default (``engine_dtype``), where a seeded
   request's tokens depend neither on what shares its batch nor on a preemption, and the sandbox prints the
   same text for the same program (no address randomization, a fixed hash seed: :mod:`sandboxes.local.policy`),
   so a rerun samples the same rounds; in bfloat16 a request's tokens depend on its batch, and no two runs are
   alike. Each round records its training data's
   digest (``examples_sha256``), its adapter's (``adapter_sha256``) and the host its arithmetic ran on
   (:func:`trainers.warmup.artifacts.host`: CPU features, library versions).
2. **Selection** (:mod:`trainers.warmup.selection`): right endings (the training reward's strict check)
   with failed turns masked, and the model's own corrections, trained on the corrected turn only; with
   ``search`` > 0, that many more samples of the model's own at each failure SAAR's regenerations did not
   correct (:mod:`trainers.warmup.search`), the first different call that runs kept as a correction; with
   ``reference``, distillation instead: the generator's own program as the correction at each such failure
   (:mod:`trainers.warmup.reference`; not the model's turn, and the round's figures count it apart); with
   ``reference_finish`` each such demonstration goes on to the program's output and the closing answer.
3. **Fine-tuning** with the SFT's own loop and loss mask (:func:`~trainers.warmup.sft.fit`, ``steps``
   steps of ``batch_size``, micro-batches of ``micro_batch``), continuing the start adapter's LoRA.
4. **Sync.** The merged weights go into the engine (:func:`trainers.core.engine_sync.sync_weights`:
   ``model_runner.reload_weights`` on CPU), so the next round samples the new policy.

Each round ``k`` writes ``<out>/round-<k>/`` (the adapter in bfloat16, a model spec wherever an adapter
directory is accepted, and ``round.json``) and appends its figures to ``<out>/iterate.json`` (the command,
the settings, every round). The policy continues from the adapter as written (its LoRA rounded to
bfloat16), so a run stopped between rounds resumes after the last finished round as if it had not stopped
(rerun the same command). Round ``k``'s sampling figures describe round ``k-1``'s model on training
problems; held-out figures come from ``python -m trainers warmup-measure --models ...``.

The default start, ``smollm2-tools-sft`` (the cold-start SFT), is read, never written: the rounds' adapters go
to ``--out``. The project's warm model ``smollm2-tools`` is round 4 of the committed float32
distillation with run seed 1 and ``--reference-finish`` (``harness/data/models/smollm2-tools/model.json`` gives the
commands that rebuild it).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from harness.benchmarks.generators import GENERATORS, generate, generator_of
from harness.benchmarks.problem import Problem
from harness.core import seeds
from harness.core.metrics import Regenerations, TrajectoryMetrics, aggregate
from harness.core.problems import rollout_config
from harness.core.rollout import Generate, rollout
from harness.core.saar import SaarConfig
from harness.core.toolenv import PROJECT
from harness.engines.models import TOOLS_SFT_NAME, file_digest
from trainers.core.config import ENGINE_DTYPES
from trainers.core.reward import compute_reward
from trainers.warmup.artifacts import host, write_adapter
from trainers.warmup.config import HELD_OUT_SEED, TRAIN_WEIGHTS
from trainers.warmup.demonstrations import DemonstrationError
from trainers.warmup.reference import reference_corrections
from trainers.warmup.search import failure_points, search_corrections
from trainers.warmup.selection import Recorder, Sampled, Selected, counts, select
from trainers.warmup.sft import FitSettings, fit, tokenize, trained_tokens

DEFAULT_OUT = "results/warmup/expert-iteration"
MANIFEST = "iterate.json"
#: settings added after runs were committed, with the value those runs had (their manifests do not name them)
ADDED_SETTINGS = {"engine_dtype": "bfloat16", "reference_finish": False}
ROUND_MANIFEST = "round.json"


@dataclass(frozen=True)
class IterateConfig:
    """Settings of ``python -m trainers warmup-iterate``."""

    rounds: int = 3
    start: str = TOOLS_SFT_NAME  #: the adapter round 1 starts from (read only)
    out: str = DEFAULT_OUT
    seed: int = 0
    problems: int = 32  #: new generated problems per round
    samples: int = 6  #: trajectories per problem
    stdin_weight: float = TRAIN_WEIGHTS["stdin"]  #: kind weight of stdin programs (math kinds weigh 1)
    max_turns: int = 3
    max_tokens: int = 256  #: tokens per generation
    temperature: float = 1.0
    top_p: float = 1.0
    max_retries: int = 3  #: SAAR regenerations per failed turn
    search: int = 0  #: more samples at each failure SAAR did not correct (0: none; :mod:`trainers.warmup.search`)
    reference: bool = False  #: distillation: the generator's program at each such failure (trainers.warmup.reference)
    reference_finish: bool = False  #: the reference demonstrations go on to the program's output and the answer
    steps: int = 8  #: optimizer steps per round
    batch_size: int = 8
    micro_batch: int = 4  #: rows per forward pass (the step's gradient stays the whole batch's, in less memory)
    learning_rate: float = 5e-4
    warmup_steps: int = 1
    #: trajectories in flight: a whole default round (32 problems x 6 samples; vLLM on CPU runs as many as it
    #: schedules, the rest wait). In float32 a seeded request's tokens depend neither on its batch nor on a
    #: preemption, so this sets how fast, not what, a round samples
    concurrency: int = 192
    #: the engine's weights: in float32 a seeded trajectory does not depend on what shares its batch, so a rerun
    #: samples the same rounds; bfloat16's rollouts are faster and differ from run to run
    engine_dtype: str = "float32"
    threads: int = 1  #: torch threads for fine-tuning

    def __post_init__(self) -> None:
        for name in ("rounds", "problems", "samples", "max_turns", "max_tokens", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"warmup-iterate: --{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.micro_batch < 1 or self.concurrency < 1 or self.threads < 1 or self.search < 0:
            raise ValueError("warmup-iterate: --micro-batch, --concurrency, --threads must be >= 1, --search >= 0")
        if self.search and self.reference:
            raise ValueError(
                "warmup-iterate: --search and --reference are alternatives (both act on the same failures)"
            )
        if self.reference_finish and not self.reference:
            raise ValueError("warmup-iterate: --reference-finish extends --reference's corrections; add --reference")
        if self.engine_dtype not in ENGINE_DTYPES:
            raise ValueError(f"warmup-iterate: --engine-dtype must be one of {', '.join(ENGINE_DTYPES)}")
        if problem_seed(self.seed, self.rounds) >= HELD_OUT_SEED:
            raise ValueError(f"warmup-iterate: seed {self.seed} with {self.rounds} rounds reaches held-out seeds")

    def identity(self) -> dict[str, Any]:
        """What must match for a run to resume another: every setting but those of :data:`NOT_IDENTITY`."""
        return {k: v for k, v in asdict(self).items() if k not in NOT_IDENTITY}


#: settings a run may change and resume: the number of rounds, and how fast (not what) a round samples and trains
#: (the trajectories in flight, the torch threads; the concurrency's data is the same in float32 only)
NOT_IDENTITY = ("rounds", "threads", "concurrency")


def problem_seed(seed: int, round_: int) -> int:
    """The generator seed of round ``round_``'s problems: training seeds only (the SFT used seed 0)."""
    return 100 * (seed + 1) + round_


def round_problems(cfg: IterateConfig, round_: int) -> list[Problem]:
    weights = [cfg.stdin_weight if k == "stdin" else 1.0 for k in GENERATORS]
    return generate(cfg.problems, seed=problem_seed(cfg.seed, round_), weights=weights, prefix=f"iter{round_}")


def trajectory_seed(cfg: IterateConfig, round_: int, problem: Problem, sample: int) -> int:
    """The seed of one trajectory: (run seed, round, problem, sample)."""
    return seeds.trajectory_seed(cfg.seed, f"iterate-round{round_}-{problem.id}", sample)


def rollout_settings(cfg: IterateConfig, problem: Problem) -> Any:
    saar = SaarConfig(enabled=True, max_retries=cfg.max_retries)
    return rollout_config(problem.kind, max_turns=cfg.max_turns, saar=saar, tool_env=PROJECT)


async def sample_round(
    cfg: IterateConfig, round_: int, make_generate: Any, backend: Any, problems: Sequence[Problem]
) -> list[Sampled]:
    """Every trajectory of a round (in problem, sample order), ``cfg.concurrency`` at a time.

    ``make_generate()`` returns the rollout's ``Generate`` (the engine's, or a test's scripted model).
    """
    gate = asyncio.Semaphore(cfg.concurrency)

    async def one(problem: Problem, sample: int) -> Sampled:
        async with gate:
            config = rollout_settings(cfg, problem)
            recorder = Recorder(make_generate(), config)
            box = await backend.acquire()
            try:
                seed = trajectory_seed(cfg, round_, problem, sample)
                traj = await rollout(problem.messages(), recorder, box, config, seed=seed)
                outcome = await compute_reward(problem, traj.final_text, box)
            finally:
                await backend.release(box)
            return Sampled(problem, traj, outcome.correct, recorder.by_seed)

    return list(await asyncio.gather(*(one(p, k) for p in problems for k in range(cfg.samples))))


def sampling_figures(sampled: Sequence[Sampled]) -> dict[str, Any]:
    """A round's sampling in the metrics' own names, plus the regenerations' figures."""
    trajs = [s.trajectory for s in sampled]
    agg = aggregate([TrajectoryMetrics.of(t) for t in trajs])
    regen = Regenerations.of([e for t in trajs for e in t.events])
    return {
        "trajectories": len(sampled),
        "accuracy": round(sum(s.correct for s in sampled) / max(1, len(sampled)), 4),
        "tool_calls_mean": round(agg["tool_calls_mean"], 3),
        "tool_failure_rate_pooled": round(agg["tool_failure_rate_pooled"], 4),
        "errors": {k.removeprefix("errors."): int(v) for k, v in agg.items() if k.startswith("errors.")},
        "regenerations": regen.regenerations,
        "regenerations_ran": regen.ran,
        "regenerations_repeated": regen.repeated,
        "saar_exhausted": int(agg["saar_exhausted"]),
    }


def round_examples(tokenizer: Any, selected: Sequence[Selected]) -> tuple[list[Any], list[bool], int]:
    """The selected demonstrations tokenized and masked as the SFT's, their prompt groups (code or math), and how
    many could not be cut into turns (a turn the template renders otherwise than the rollout parsed it: dropped,
    and counted in the round's figures)."""
    from trainers.core.tokens import TemplateError

    examples, groups, dropped = [], [], 0
    for s in selected:
        try:
            examples.append(tokenize(tokenizer, s.demo))
        except (DemonstrationError, TemplateError):
            dropped += 1
            continue
        groups.append(s.demo.problem.kind == "code")
    return examples, groups, dropped


def examples_digest(examples: Sequence[Any]) -> str:
    """A round's training data in one value (sha256 of every example's ids and labels, in order): two runs of a
    round whose adapters differ tell from it whether the data or the training's arithmetic did."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(json.dumps([example.ids, example.labels]).encode())
    return digest.hexdigest()


def fit_settings(cfg: IterateConfig, round_: int) -> FitSettings:
    order_seed = seeds.derive("iterate-order", cfg.seed, round_)
    return FitSettings(cfg.steps, cfg.batch_size, cfg.micro_batch, cfg.learning_rate, cfg.warmup_steps, order_seed)


def round_bf16(policy: Any) -> None:
    """Round the trainable (LoRA) weights to bfloat16 in place: the policy is then exactly the adapter written,
    so a resumed run continues from the same weights as an uninterrupted one."""
    import torch

    with torch.no_grad():
        for p in policy.parameters():
            if p.requires_grad:
                p.copy_(p.to(torch.bfloat16).to(p.dtype))


def load_policy(adapter: str) -> tuple[Any, Any]:
    """The embedded base in float32 with ``adapter``'s LoRA, trainable."""
    import torch
    from peft import PeftModel

    from harness.engines.models import load_model, resolve_spec
    from harness.engines.served_model import model_spec

    kind, path = resolve_spec(model_spec(adapter))
    if kind != "adapter":
        raise ValueError(f"warmup-iterate: --start {adapter!r} is not an adapter of the embedded model ({kind})")
    base, tokenizer = load_model(None, dtype=torch.float32)
    return PeftModel.from_pretrained(base, str(path), is_trainable=True), tokenizer


def read_manifest(out: Path, cfg: IterateConfig) -> dict[str, Any]:
    """The run's manifest so far (a new one when there is none); a run with other settings is refused."""
    path = out / MANIFEST
    if not path.is_file():
        return {"command": command_line(cfg), "config": cfg.identity(), "rounds": []}
    manifest = json.loads(path.read_text())
    written = {**ADDED_SETTINGS, **manifest.get("config", {})}
    there, here = {k: v for k, v in written.items() if k not in NOT_IDENTITY}, cfg.identity()
    if there != here:
        differ = ", ".join(
            f"{k} {there.get(k)!r} there, {here.get(k)!r} here"
            for k in sorted(there | here)
            if there.get(k) != here.get(k)
        )
        raise ValueError(
            f"{path} was written with other settings ({differ}); use another --out, or the same settings to resume"
        )
    manifest["command"], manifest["config"] = command_line(cfg), cfg.identity()
    return manifest


def command_line(cfg: IterateConfig) -> str:
    default = IterateConfig()
    parts = [_option(k, v) for k, v in asdict(cfg).items() if v != getattr(default, k)]
    return " ".join(["python -m trainers warmup-iterate", *parts])


def _option(name: str, value: Any) -> str:
    flag = f"--{name.replace('_', '-')}"
    if isinstance(value, bool):
        return flag if value else f"--no-{flag[2:]}"
    return f"{flag} {value}"


def run(cfg: IterateConfig, *, progress: bool = True) -> Path:
    """Run the rounds not yet finished in ``cfg.out``; return the directory."""
    return asyncio.run(_run(cfg, progress=progress))


async def _run(cfg: IterateConfig, *, progress: bool) -> Path:
    import torch

    from harness.engines.served_model import served_dir
    from harness.engines.vllm_offline import OfflineEngine
    from sandboxes.backends import get_backend
    from trainers.core.engine_sync import engine_env, sync_weights

    out = Path(cfg.out)
    manifest = read_manifest(out, cfg)
    done = len(manifest["rounds"])
    if done >= cfg.rounds:
        print(f"warmup-iterate: {done} rounds already in {out / MANIFEST}", flush=True)
        return out
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    policy, tokenizer = load_policy(cfg.start if done == 0 else str(out / f"round-{done}"))
    for key, value in engine_env().items():  # sync_weights sends a function to the engine's workers
        os.environ.setdefault(key, value)
    started = time.monotonic()
    engine = OfflineEngine(served_dir(cfg.start), dtype=cfg.engine_dtype, seed=cfg.seed)
    print(f"warmup-iterate: vLLM engine up in {time.monotonic() - started:.0f} s", flush=True)
    backend = get_backend("local")
    try:
        for round_ in range(done + 1, cfg.rounds + 1):
            figures = await one_round(cfg, round_, policy, tokenizer, engine, backend, sync_weights, progress)
            manifest["rounds"].append(figures)
            out.mkdir(parents=True, exist_ok=True)
            (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
            print(f"warmup-iterate: round {round_}: {json.dumps(figures)}", flush=True)
    finally:
        await backend.shutdown()
        engine.shutdown()
    return out


async def one_round(
    cfg: IterateConfig,
    round_: int,
    policy: Any,
    tokenizer: Any,
    engine: Any,
    backend: Any,
    sync: Any,
    progress: bool,
) -> dict[str, Any]:
    """Sync the policy into the engine, sample, select, fine-tune, write ``round-<k>``; return its figures."""
    import torch

    round_started = time.monotonic()
    sync_s = await sync(engine.engine, policy, getattr(torch, cfg.engine_dtype))

    def make_generate() -> Generate:
        return engine.generator(
            tokenizer, env=PROJECT, max_tokens=cfg.max_tokens, temperature=cfg.temperature, top_p=cfg.top_p
        )

    problems = round_problems(cfg, round_)
    sampled = await sample_round(cfg, round_, make_generate, backend, problems)
    rollout_s = time.monotonic() - round_started - sync_s
    search_started = time.monotonic()
    points = failure_points(sampled) if cfg.search or cfg.reference else []
    config_of = lambda s: rollout_settings(cfg, s.problem)  # noqa: E731
    searched = await search_corrections(
        points, make_generate(), backend, config_of, cfg.search, cfg.concurrency
    ) if cfg.search and points else []  # fmt: skip
    referenced = await reference_corrections(
        points, backend, config_of, cfg.concurrency, finish=cfg.reference_finish
    ) if cfg.reference else []  # fmt: skip
    search_s = time.monotonic() - search_started
    selected = select(sampled) + searched + referenced
    examples, groups, dropped = round_examples(tokenizer, selected)
    train_s, losses = 0.0, []
    if examples:
        result = fit(
            policy, examples, groups, fit_settings(cfg, round_), tokenizer.pad_token_id, progress=progress,
            desc=f"round {round_}",
        )  # fmt: skip
        train_s, losses = result.train_s, result.losses
        round_bf16(policy)
    figures = {
        "round": round_,
        "problem_seed": problem_seed(cfg.seed, round_),
        "kinds": dict(sorted(_kinds(problems).items())),
        "sampling": sampling_figures(sampled),
        "search": {"failure_points": len(points), "samples_each": cfg.search, "corrections": len(searched)},
        "reference_corrections": len(referenced),
        "selected": counts(selected),
        "selected_problems": len({s.demo.problem.id for s in selected}),
        "dropped_untokenizable": dropped,
        "trained_tokens": sum(trained_tokens(e) for e in examples),
        "examples_sha256": examples_digest(examples),
        "loss_first": round(losses[0], 4) if losses else None,
        "loss_last": round(losses[-1], 4) if losses else None,
        "losses": [round(x, 4) for x in losses],
        "sync_seconds": round(sync_s, 1),
        "rollout_seconds": round(rollout_s, 1),
        "search_seconds": round(search_s, 1),
        "train_seconds": round(train_s, 1),
        "round_seconds": round(time.monotonic() - round_started, 1),
        "load_average_1min_at_end": round(os.getloadavg()[0], 2),
        "host": host(),
    }
    written = write_adapter(
        policy, Path(cfg.out) / f"round-{round_}", ROUND_MANIFEST, {"command": command_line(cfg), **figures}
    )
    return {**figures, "adapter_sha256": file_digest(written / "adapter_model.safetensors")}


def _kinds(problems: Sequence[Problem]) -> dict[str, int]:
    found: dict[str, int] = {}
    for p in problems:
        found[generator_of(p)] = found.get(generator_of(p), 0) + 1
    return found


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``warmup-iterate`` sub-command's options (one per :class:`IterateConfig` field)."""
    helps = {
        "rounds": "rounds in all (a rerun resumes after the last finished one)",
        "start": "the adapter round 1 starts from (a model spec; read only)",
        "out": "directory of the rounds' adapters and iterate.json",
        "seed": "run seed: problems, trajectory seeds, data order",
        "problems": "new generated problems per round (training seeds)",
        "samples": "trajectories per problem",
        "stdin_weight": "kind weight of stdin programs (math kinds weigh 1)",
        "max_turns": "assistant turns per trajectory",
        "max_tokens": "tokens per generation",
        "temperature": "sampling temperature",
        "top_p": "sampling top_p",
        "max_retries": "SAAR regenerations per failed turn",
        "search": "more samples at each failure SAAR did not correct, the first different call that runs kept (0: off)",
        "reference": "distillation: the generator's own program as the correction at each failure SAAR did not correct",
        "reference_finish": "with --reference: each demonstration goes on to the program's output and the answer",
        "steps": "optimizer steps per round",
        "batch_size": "demonstrations per step",
        "micro_batch": "rows per forward pass (the step's gradient stays the whole batch's)",
        "learning_rate": "peak learning rate (linear warm-up, then linear decay to a tenth)",
        "warmup_steps": "steps of learning-rate warm-up",
        "concurrency": "trajectories in flight (float32: how fast, not what)",
        "threads": "torch threads for fine-tuning",
        "engine_dtype": "the engine's weights: float32 (a rerun samples the same rounds) or bfloat16 (no rerun alike)",
    }
    for f in fields(IterateConfig):
        default = getattr(IterateConfig(), f.name)
        if isinstance(default, bool):
            action = argparse.BooleanOptionalAction
            parser.add_argument(f"--{f.name.replace('_', '-')}", action=action, default=default, help=helps[f.name])
            continue
        parser.add_argument(
            f"--{f.name.replace('_', '-')}", type=type(default), default=default, help=f"{helps[f.name]} ({default})"
        )


def config_from_args(args: argparse.Namespace) -> IterateConfig:
    return IterateConfig(**{f.name: getattr(args, f.name) for f in fields(IterateConfig)})


def parse_config(argv: Sequence[str] | None = None) -> IterateConfig:
    """The settings a ``warmup-iterate`` command line gives (``argv``: its words after the sub-command)."""
    parser = argparse.ArgumentParser(prog="python -m trainers warmup-iterate", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return config_from_args(parser.parse_args(argv))


def main(argv: Sequence[str] | None = None) -> int:
    print(run(parse_config(argv), progress=sys.stdout.isatty()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
