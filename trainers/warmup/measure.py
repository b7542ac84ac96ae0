"""How the warm model behaves on problems it was not trained on (``python -m trainers warmup-measure``).

Runs the model through the benchmark tasks exactly as an evaluation does (Inspect, the
embedded provider, the shared rollout core, the real sandbox), SAAR off so that every
failure is the model's own and stays visible, on:

* held-out generated problems: :mod:`harness.benchmarks.generators` with seeds the warm-up never
  used (math kinds through the ``aime24`` task, stdin programs through ``livecodebench``),
  written to ``<out>/data/`` in those tasks' schemas;
* the project's fixtures of aime24, aime25, livecodebench and gpqa.

and writes ``<out>/measure.md`` and ``measure.json``: per source, how often a sample calls
the tool, how many calls fail and of which error kind, and accuracy.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.benchmarks.generators import MATH_KINDS, generate, write_aime_jsonl, write_lcb_jsonl
from harness.reports.compare import ArmRun, read_arms, run_arms
from trainers.warmup.build import HELD_OUT_SEED


@dataclass(frozen=True)
class SourceFigures:
    """What one source's samples did (SAAR off)."""

    source: str
    samples: int
    call_rate: float  #: share of samples with at least one executed or attempted call
    calls_per_sample: float
    failed_call_rate: float  #: failed / executed calls, pooled over the source
    error_kinds: dict[str, int]
    accuracy: float
    wall_s: float


def figures(source: str, arm: ArmRun) -> SourceFigures:
    """The figures of one arm's samples."""
    recs = arm.samples
    n = max(len(recs), 1)
    calls = sum(r.tool_calls for r in recs)
    kinds: Counter[str] = Counter()
    for r in recs:
        kinds.update(r.error_kinds)
    return SourceFigures(
        source=source,
        samples=len(recs),
        call_rate=sum(1 for r in recs if r.tool_calls > 0) / n,
        calls_per_sample=calls / n,
        failed_call_rate=sum(r.tool_failures for r in recs) / calls if calls else 0.0,
        error_kinds=dict(kinds.most_common()),
        accuracy=sum(r.correct for r in recs) / n,
        wall_s=arm.wall_time or 0.0,
    )


def sources(out: Path, heldout_math: int, heldout_code: int, seed: int, fixtures: bool) -> list[tuple[str, str, str]]:
    """(name, task, data) of every source; the held-out files are written here."""
    found: list[tuple[str, str, str]] = []
    if heldout_math:
        math = generate(heldout_math, seed=seed, kinds=MATH_KINDS, prefix="heldout")
        found.append(("held-out math", "aime24", str(write_aime_jsonl(math, out / "data" / "heldout_math.jsonl"))))
    if heldout_code:
        code = generate(heldout_code, seed=seed + 1, kinds=("stdin",), prefix="heldout")
        found.append(
            ("held-out stdin", "livecodebench", str(write_lcb_jsonl(code, out / "data" / "heldout_stdin.jsonl")))
        )
    if fixtures:
        found += [(f"{t} fixture", t, "fixture") for t in ("aime24", "aime25", "livecodebench", "gpqa")]
    return found


def measure(
    model: str,
    out: Path,
    *,
    heldout_math: int,
    heldout_code: int,
    seed: int,
    fixtures: bool,
    epochs: int,
    max_turns: int,
    max_tokens: int,
    top_p: float | None,
    display: str | None,
) -> list[SourceFigures]:
    """Run every source with SAAR off and return its figures (also written to ``out``)."""
    results = []
    for name, task, data in sources(out, heldout_math, heldout_code, seed, fixtures):
        generate_args: dict[str, Any] = {"max_tokens": max_tokens}
        if top_p is not None:
            generate_args["top_p"] = top_p
        dirs = run_arms(
            [task],
            model,
            log_dir=out / "logs" / name.replace(" ", "-"),
            epochs=epochs,
            task_args={"data": data, "sandbox": "local", "max_turns": max_turns, "seed": seed},
            generate=generate_args,
            arms=["off"],
            display=display,
        )
        arms, _ = read_arms(dirs)
        results.append(figures(name, arms[0]))
        print(render([results[-1]]).splitlines()[-1], flush=True)
    return results


def render(results: Sequence[SourceFigures]) -> str:
    """A markdown table of the figures."""
    lines = [
        "| source | samples | calls the tool | calls/sample | failed calls | error kinds | accuracy | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        kinds = ", ".join(f"{k} {v}" for k, v in r.error_kinds.items()) or "-"
        lines.append(
            f"| {r.source} | {r.samples} | {r.call_rate:.0%} | {r.calls_per_sample:.2f} | {r.failed_call_rate:.0%} "
            f"| {kinds} | {r.accuracy:.0%} | {r.wall_s:.0f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainers warmup-measure", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded/smollm2-tools")
    parser.add_argument("--out", default=None, help="output directory (default results/warmup/<time>)")
    parser.add_argument("--heldout-math", type=int, default=24, help="held-out generated math problems")
    parser.add_argument("--heldout-code", type=int, default=8, help="held-out generated stdin problems")
    parser.add_argument("--seed", type=int, default=HELD_OUT_SEED, help="held-out generator seed (training: 0)")
    parser.add_argument("--no-fixtures", action="store_true", help="skip the four fixtures")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument("--top-p", type=float, default=None, help="override the reference top_p 0.6")
    parser.add_argument("--display", default="none")
    args = parser.parse_args(argv)
    out = Path(args.out or f"results/warmup/{time.strftime('%Y%m%d-%H%M%S')}")
    started = time.monotonic()
    results = measure(
        args.model,
        out,
        heldout_math=args.heldout_math,
        heldout_code=args.heldout_code,
        seed=args.seed,
        fixtures=not args.no_fixtures,
        epochs=args.epochs,
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        top_p=args.top_p,
        display=args.display,
    )
    table = render(results)
    settings = {k: v for k, v in vars(args).items() if k != "display"}
    (out / "measure.md").write_text(
        f"# {args.model}: held-out problems and fixtures, SAAR off\n\nsettings: `{json.dumps(settings)}`\n\n{table}\n"
    )
    (out / "measure.json").write_text(
        json.dumps({"settings": settings, "sources": [asdict(r) for r in results]}, indent=2)
    )
    print(f"\n{table}\n\n{out / 'measure.md'}  ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
