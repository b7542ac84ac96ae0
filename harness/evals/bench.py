"""Throughput of the two CPU engines at 1, 4 and 8 concurrent samples: prints figures, asserts nothing.

python -m harness.evals.bench                          # smollm2, 8 samples, concurrency 1 4 8
python -m harness.evals.bench --model smollm2-tools --engines embedded served

Every run is the same real evaluation: ``tasks/aime24.py -T data=fixture`` (4 problems,
``--samples / 4`` epochs), the local sandbox, the reference sampling (temperature 1.0,
top_p 0.6, per-sample seeds), at most ``--max-turns`` turns of ``--max-tokens`` tokens.
Engines:

* ``embedded``: the in-process ``embedded/`` provider, whose requests are batched by
  :class:`harness.engines.generation.Batcher` (``-M max_batch=<concurrency>``);
* ``served``: Inspect's own ``sglang/`` provider against ``transformers serve`` on loopback
  (one request generated at a time);
* ``served-cb``: the same server with ``--continuous-batching`` (paged attention; note that
  it applies the first request's sampling settings to every request and ignores per-request seeds).

Inspect runs ``concurrency`` samples at once (``max_samples`` and ``max_connections``).
Figures: wall seconds, generated tokens (the model usage Inspect records), tokens/s,
seconds per sample, and the 1-minute load average at the end (the CPU is shared).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ("embedded", "served", "served-cb")


@dataclass
class Figures:
    engine: str
    concurrency: int
    samples: int
    seconds: float
    output_tokens: int
    status: str
    load: float

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds else 0.0

    def row(self) -> str:
        per_sample = self.seconds / self.samples if self.samples else 0.0
        return (
            f"{self.engine:10s} {self.concurrency:11d} {self.samples:7d} {self.seconds:8.1f} {self.output_tokens:7d} "
            f"{self.tokens_per_s:7.1f} {per_sample:9.1f} {self.load:5.1f}  {self.status}"
        )


HEADER = "engine     concurrency samples   wall_s  tokens   tok/s  s/sample  load  status"


def run_eval(model: str, concurrency: int, args: argparse.Namespace, model_args: dict[str, object]) -> Figures:
    """One timed evaluation of the AIME fixture with ``concurrency`` samples at once."""
    from inspect_ai import eval

    epochs = max(1, args.samples // 4)
    start = time.monotonic()
    log = eval(
        "tasks/aime24.py",
        model=model,
        model_args=model_args,
        task_args={
            "data": "fixture",
            "sandbox": "local",
            "epochs": epochs,
            "max_turns": args.max_turns,
            "max_tokens": args.max_tokens,
            "temperature": 1.0,
            "top_p": 0.6,
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
    samples = len(log.samples or [])
    return Figures("", concurrency, samples, seconds, tokens, log.status, os.getloadavg()[0])


def bench(args: argparse.Namespace) -> list[Figures]:
    from harness.engines.serve import Server, free_port, model_spec

    results: list[Figures] = []
    # Inspect keeps one client per model name for the process: every server gets the same port so that the
    # client made for the first one still reaches the one running now
    port = free_port()
    print(HEADER, flush=True)
    for engine in args.engines:
        if engine == "embedded":
            from harness.evals import embedded

            embedded.shared_model(model_spec(args.model))  # loading is not part of the figures
            for c in args.concurrency:
                fig = run_eval(f"embedded/{model_spec(args.model)}", c, args, {"max_batch": c, "threads": args.threads})
                fig.engine = engine
                results.append(fig)
                print(fig.row(), flush=True)
            continue
        log = Path(args.log_dir) / f"{engine}-server.log"
        started = time.monotonic()
        cb = engine == "served-cb"
        with Server(args.model, port=port, threads=args.threads, continuous_batching=cb, log_path=log) as s:
            print(f"# {engine}: server up in {time.monotonic() - started:.1f} s ({s.base_url})", flush=True)
            os.environ["SGLANG_BASE_URL"] = s.base_url
            for c in args.concurrency:
                fig = run_eval(f"sglang/{s.model}", c, args, {})
                fig.engine = engine
                results.append(fig)
                print(fig.row(), flush=True)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.evals.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="smollm2 (default), smollm2-tools, a dir or .gguf")
    parser.add_argument("--engines", nargs="+", default=list(ENGINES[:2]), choices=ENGINES)
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 4, 8])
    parser.add_argument("--samples", type=int, default=8, help="samples per run (4 fixture problems x samples/4)")
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the engine")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-dir", default=None, help="eval logs and server logs (default: a temporary directory)")
    args = parser.parse_args(argv)
    args.log_dir = args.log_dir or tempfile.mkdtemp(prefix="bench-serve-")
    os.chdir(ROOT)  # Inspect takes task files by relative path
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = bench(args)
    print(f"\nlogs: {args.log_dir}")
    best = {e: max((r.tokens_per_s for r in results if r.engine == e), default=0.0) for e in args.engines}
    print("best tok/s per engine: " + ", ".join(f"{e} {v:.1f}" for e, v in best.items()))
    return 0 if all(r.status == "success" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
