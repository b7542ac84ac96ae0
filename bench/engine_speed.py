"""The engines on the same problems at 1, 4, 8 and 16 concurrent samples: prints figures, asserts nothing.

python -m bench.engine_speed                                    # smollm2-tools, every engine, 1 4 8 16
python -m bench.engine_speed --engines vllm-server --concurrency 16 32

Every run is the same evaluation of the AIME fixture (4 problems, ``--samples / 4`` epochs,
the local sandbox, temperature 1.0, top_p 0.6, per-sample seeds, at most ``--max-turns``
turns of ``--max-tokens`` tokens). Engines:

* ``embedded``: the in-process ``embedded/`` provider (transformers), requests batched by
  :class:`harness.engines.generation.Batcher` (``-M max_batch=<concurrency>``), through Inspect;
* ``vllm-server``: Inspect's own ``vllm/`` provider against vLLM's OpenAI server on loopback
  (:class:`harness.engines.serve.Server`, the hermes tool parser);
* ``vllm-offline``: vLLM's in-process ``AsyncLLM`` (:mod:`harness.engines.vllm_offline`) driving
  the rollout core directly, token ids in and out, as the trainers use it (no Inspect, no HTTP).

Figures: wall seconds, generated tokens, tokens/s, samples/s, and the harness's own time per turn
outside the engine (a sample's wall time minus the time its generations were in flight, over its
turns: tool calls, rendering, parsing, Inspect's bookkeeping), and the 1-minute load average at the
end (the CPU is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.environ import temporary_environ

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("embedded", "vllm-server", "vllm-offline")
TASK_ARGS = {"data": "fixture", "sandbox": "local", "temperature": 1.0, "top_p": 0.6}


@dataclass
class Figures:
    engine: str
    concurrency: int
    samples: int
    seconds: float
    output_tokens: int
    turns: int
    outside_s: float  #: seconds of the samples' wall time with no generation in flight, summed
    status: str
    load: float

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds else 0.0

    def row(self) -> str:
        per_turn_ms = 1000 * self.outside_s / self.turns if self.turns else 0.0
        return (
            f"{self.engine:12s} {self.concurrency:11d} {self.samples:7d} {self.seconds:8.1f} {self.output_tokens:7d} "
            f"{self.tokens_per_s:7.1f} {self.samples / self.seconds:9.3f} {per_turn_ms:13.0f} {self.load:5.1f}  "
            f"{self.status}"
        )


HEADER = "engine       concurrency samples   wall_s  tokens   tok/s samples/s outside_ms/turn  load  status"


def run_eval(model: str, concurrency: int, args: argparse.Namespace, model_args: dict[str, object]) -> Figures:
    """One timed evaluation of the AIME fixture with ``concurrency`` samples at once, through Inspect."""
    from inspect_ai import eval
    from inspect_ai.event import ModelEvent

    start = time.monotonic()
    log = eval(
        "tasks/aime24.py",
        model=model,
        model_args=model_args,
        task_args={
            **TASK_ARGS,
            "epochs": max(1, args.samples // 4),
            "max_turns": args.max_turns,
            "max_tokens": args.max_tokens,
            "seed": args.seed,
        },
        max_samples=concurrency,
        max_connections=concurrency,
        display="none",
        log_dir=args.log_dir,
    )[0]
    seconds = time.monotonic() - start
    usage = log.stats.model_usage if log.stats else {}
    tokens = sum(u.output_tokens for u in usage.values())
    turns, outside = 0, 0.0
    for sample in log.samples or []:
        events = [e for e in sample.events if isinstance(e, ModelEvent) and e.completed is not None]
        in_flight = sum((e.completed - e.timestamp).total_seconds() for e in events)  # type: ignore[operator]
        turns += len(events)
        outside += max(0.0, (sample.total_time or 0.0) - in_flight)
    samples = len(log.samples or [])
    return Figures("", concurrency, samples, seconds, tokens, turns, outside, log.status, os.getloadavg()[0])


async def run_offline(engine: Any, tokenizer: Any, concurrency: int, args: argparse.Namespace) -> Figures:
    """The same samples through the rollout core on vLLM's in-process engine, ``concurrency`` at a time."""
    from harness.benchmarks.datasets import load_aime24
    from harness.core.messages import user
    from harness.core.problems import rollout_config
    from harness.core.rollout import rollout
    from harness.core.seeds import trajectory_seed
    from harness.core.toolenv import PROJECT
    from sandboxes.local.sandbox import LocalSandbox

    problems = load_aime24("fixture")
    epochs = max(1, args.samples // 4)
    config = rollout_config("math", max_turns=args.max_turns, tool_env=PROJECT)
    generate = engine.generator(tokenizer, env=PROJECT, max_tokens=args.max_tokens, temperature=1.0, top_p=0.6)
    gate = asyncio.Semaphore(concurrency)
    totals = {"tokens": 0, "turns": 0, "outside": 0.0}

    async def one(problem: Any, epoch: int) -> None:
        in_flight = 0.0

        async def timed(context: Any, *, seed: int | None = None) -> Any:
            nonlocal in_flight
            t0 = time.monotonic()
            gen = await generate(context, seed=seed)
            in_flight += time.monotonic() - t0
            totals["tokens"] += gen.output_tokens
            totals["turns"] += 1
            return gen

        async with gate:
            sandbox = LocalSandbox()
            started = time.monotonic()
            try:
                seed = trajectory_seed(args.seed, problem.id, epoch)
                await rollout([user(problem.prompt)], timed, sandbox, config, seed=seed)
            finally:
                await sandbox.close()
            totals["outside"] += time.monotonic() - started - in_flight

    start = time.monotonic()
    await asyncio.gather(*(one(p, e) for e in range(1, epochs + 1) for p in problems))
    seconds = time.monotonic() - start
    n = len(problems) * epochs
    return Figures(
        "", concurrency, n, seconds, totals["tokens"], totals["turns"], totals["outside"], "success", os.getloadavg()[0]
    )


async def run_offline_all(
    engine: Any, tokenizer: Any, args: argparse.Namespace, report: Callable[[Figures], None]
) -> None:
    """Every concurrency in one event loop (the engine's output task lives on the loop of its first request)."""
    for c in args.concurrency:
        report(await run_offline(engine, tokenizer, c, args))


def bench(args: argparse.Namespace) -> list[Figures]:
    from harness.engines.serve import Server
    from harness.engines.served_model import model_spec, served_dir

    results: list[Figures] = []

    def report(engine: str, fig: Figures) -> None:
        fig.engine = engine
        results.append(fig)
        print(fig.row(), flush=True)

    print(HEADER, flush=True)
    for engine in args.engines:
        if engine == "embedded":
            from harness.evals import embedded

            embedded.shared_model(model_spec(args.model))  # loading is not part of the figures
            for c in args.concurrency:
                report(engine, run_eval(f"embedded/{model_spec(args.model)}", c, args, {"max_batch": c}))
        elif engine == "vllm-server":
            with Server(model_spec(args.model), log_path=Path(args.log_dir) / "vllm-server.log") as s:
                print(f"# {engine}: server up in {s.start_seconds:.1f} s ({s.base_url})", flush=True)
                with temporary_environ(VLLM_BASE_URL=s.base_url):
                    for c in args.concurrency:
                        report(engine, run_eval(f"vllm/{s.model}", c, args, {}))
        else:
            from transformers import AutoTokenizer

            from harness.engines.vllm_offline import OfflineEngine

            model_dir = served_dir(model_spec(args.model))
            started = time.monotonic()
            offline = OfflineEngine(model_dir)
            print(f"# {engine}: engine built in {time.monotonic() - started:.1f} s", flush=True)
            tokenizer = AutoTokenizer.from_pretrained(model_dir)
            try:
                asyncio.run(run_offline_all(offline, tokenizer, args, functools.partial(report, engine)))
            finally:
                offline.shutdown()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-tools", help="smollm2-tools (default), smollm2, a dir or .gguf")
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES, help="engines to run (all)")
    parser.add_argument(
        "--concurrency", nargs="+", type=int, default=[1, 4, 8, 16], help="concurrent samples, one run each"
    )
    parser.add_argument("--samples", type=int, default=16, help="samples per run (4 fixture problems x samples/4)")
    parser.add_argument("--max-turns", type=int, default=3, help="assistant turns per sample")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per generation")
    parser.add_argument("--seed", type=int, default=0, help="run seed (per-sample seeds derive from it)")
    parser.add_argument("--log-dir", default=None, help="eval logs and server logs (default: a temporary directory)")
    args = parser.parse_args(argv)
    args.log_dir = args.log_dir or tempfile.mkdtemp(prefix="bench-engines-")
    os.chdir(ROOT)  # Inspect takes task files by relative path
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = bench(args)
    print(f"\nlogs: {args.log_dir}")
    best = {e: max((r.tokens_per_s for r in results if r.engine == e), default=0.0) for e in args.engines}
    print("best tok/s per engine: " + ", ".join(f"{e} {v:.1f}" for e, v in best.items()))
    return 0 if all(r.status == "success" for r in results) else 1


if __name__ == "__main__":  # vLLM's engine core starts with spawn: keep the module importable without side effects
    sys.exit(main())
