"""How the warm model behaves on problems it was not trained on (``python -m trainers warmup-measure``).

Runs each model through the benchmark tasks exactly as an evaluation does (Inspect, the embedded
provider or vLLM's server with Inspect's ``vllm/`` provider, the shared rollout core, the real sandbox),
SAAR off by default so that every failure is the model's own and stays visible (``--saar``: SAAR on, to
see what its regenerations do), on:

* held-out generated problems: :mod:`harness.benchmarks.generators` with seeds the warm-up never
  used (math kinds through the ``aime24`` task, stdin programs through ``livecodebench``),
  written to ``<out>/data/`` in those tasks' schemas;
* the project's fixture of every benchmark of the warm-model measure (:data:`harness.benchmarks.registry.WARM_MEASURE`:
  an entry joins it by saying so, so a new benchmark does not change what this command reproduces).

``--models A B C`` measures several models (the expert-iteration rounds' adapter directories, say) on the
same problems and seeds, one after the other. It writes ``<out>/measure.md`` and ``measure.json``: one row
per model (every source pooled), then per model and source: how often a sample calls the tool, how many
calls fail and of which error kind, accuracy, SAAR's regenerations, the share that ran and the share
that repeated the failed call (:class:`harness.core.metrics.Regenerations`, the report's definitions), and
how often a turn after a call that ran calls again (:func:`calls_after_a_run`: the warm model's habit of
rewriting a program that worked until it broke).

``--engine-dtype float32`` holds the weights in float32 on either engine: every request is seeded per (sample,
epoch), and in float32 a seeded request's tokens do not depend on what shares its batch, so a rerun on one CPU
gives the same figures, but for a program that ends near the sandbox's time limit in one run and not in the
other (wall clock). In bfloat16 (the default) a rerun is another sample of the same model.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from inspect_ai.log import read_eval_log
from inspect_ai.model import ChatMessage

from harness.benchmarks.generators import MATH_GENERATORS, generate, write_aime_jsonl, write_lcb_jsonl
from harness.benchmarks.registry import WARM_MEASURE
from harness.core.environ import temporary_environ
from harness.core.kinds import Kind
from harness.core.metrics import Regenerations, rate
from harness.evals.arms import run_arms
from harness.reports.compare import ArmRun, read_arms, scored
from trainers.core.config import ENGINE_DTYPES
from trainers.warmup.config import HELD_OUT_SEED

#: samples in flight on vLLM (the demo's concurrency)
VLLM_CONCURRENCY = 16


@dataclass(frozen=True)
class SourceFigures:
    """What one source's samples did, as counts (the rates are properties)."""

    source: str
    samples: int
    with_calls: int  #: samples with at least one executed or attempted call
    tool_calls: int  #: executed calls, regenerations included
    tool_failures: int
    correct: float
    error_kinds: dict[str, int] = field(default_factory=dict)
    regenerations: Regenerations = field(default_factory=Regenerations)
    wall_s: float = 0.0
    turns_after_run: int = 0  #: assistant turns kept whose previous message is a call's result that ran
    calls_after_run: int = 0  #: those of them that call the tool again

    @property
    def calls_again_rate(self) -> float:
        """Turns after a call that ran that call again / turns after a call that ran."""
        return rate(self.calls_after_run, self.turns_after_run)

    @property
    def call_rate(self) -> float:
        return rate(self.with_calls, self.samples)

    @property
    def calls_per_sample(self) -> float:
        return rate(self.tool_calls, self.samples)

    @property
    def failed_call_rate(self) -> float:
        """Failed / executed calls, pooled over the source."""
        return rate(self.tool_failures, self.tool_calls)

    @property
    def accuracy(self) -> float:
        return rate(self.correct, self.samples)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "regenerations": asdict(self.regenerations),
            "call_rate": self.call_rate,
            "calls_per_sample": self.calls_per_sample,
            "failed_call_rate": self.failed_call_rate,
            "accuracy": self.accuracy,
            "regenerations_ran_share": self.regenerations.ran_share,
            "regenerations_repeated_share": self.regenerations.repeated_share,
            "calls_again_rate": self.calls_again_rate,
        }


def pooled(name: str, parts: Sequence[SourceFigures]) -> SourceFigures:
    """Several sources' figures as one."""
    kinds: Counter[str] = Counter()
    for p in parts:
        kinds.update(p.error_kinds)
    regen = [p.regenerations for p in parts]
    return SourceFigures(
        name,
        sum(p.samples for p in parts),
        sum(p.with_calls for p in parts),
        sum(p.tool_calls for p in parts),
        sum(p.tool_failures for p in parts),
        sum(p.correct for p in parts),
        dict(kinds.most_common()),
        Regenerations(sum(r.regenerations for r in regen), sum(r.ran for r in regen), sum(r.repeated for r in regen)),
        sum(p.wall_s for p in parts),
        sum(p.turns_after_run for p in parts),
        sum(p.calls_after_run for p in parts),
    )


@dataclass(frozen=True)
class ModelFigures:
    """One model's figures on every source."""

    model: str  #: its label in the tables (an adapter directory's name, or the spec)
    sources: list[SourceFigures]

    @property
    def total(self) -> SourceFigures:
        return pooled("all", self.sources)


def figures(source: str, arm: ArmRun) -> SourceFigures:
    """The figures of one arm's samples."""
    recs = arm.samples
    kinds: Counter[str] = Counter()
    for r in recs:
        kinds.update(r.error_kinds)
    return SourceFigures(
        source=source,
        samples=len(recs),
        with_calls=sum(1 for r in recs if r.tool_calls > 0),
        tool_calls=sum(r.tool_calls for r in recs),
        tool_failures=sum(r.tool_failures for r in recs),
        correct=float(sum(r.correct for r in recs)),
        error_kinds=dict(kinds.most_common()),
        regenerations=Regenerations.of([e for r in recs for e in r.events]),
        wall_s=arm.wall_time or 0.0,
    )


def calls_after_a_run(samples: Iterable[Sequence[ChatMessage]]) -> tuple[int, int]:
    """(assistant turns that follow a call that ran, those of them that call again), over ``samples``' final
    messages. A tool message's ``ok`` is the rollout's verdict (:mod:`harness.evals.convert` writes it)."""
    turns = calls = 0
    for messages in samples:
        for before, m in itertools.pairwise(messages):
            if m.role == "assistant" and before.role == "tool" and (before.metadata or {}).get("ok"):
                turns += 1
                calls += bool(m.tool_calls)
    return turns, calls


#: The task the held-out problems of each kind run through: the one whose schema their file is written in
#: (``write_aime_jsonl``: AIME 2024's; ``write_lcb_jsonl``: LiveCodeBench's), named, not found by registry order.
HELD_OUT_TASKS: dict[Kind, str] = {"math": "aime24", "code": "livecodebench"}


def sources(out: Path, heldout_math: int, heldout_code: int, seed: int, fixtures: bool) -> list[tuple[str, str, str]]:
    """(name, task, data) of every source; the held-out files are written here."""
    found: list[tuple[str, str, str]] = []
    if heldout_math:
        math = generate(heldout_math, seed=seed, generators=MATH_GENERATORS, prefix="heldout")
        data = write_aime_jsonl(math, out / "data" / "heldout_math.jsonl")
        found.append(("held-out math", HELD_OUT_TASKS["math"], str(data)))
    if heldout_code:
        code = generate(heldout_code, seed=seed + 1, generators=("stdin",), prefix="heldout")
        data = write_lcb_jsonl(code, out / "data" / "heldout_stdin.jsonl")
        found.append(("held-out stdin", HELD_OUT_TASKS["code"], str(data)))
    if fixtures:
        found += [(f"{name} fixture", name, "fixture") for name in WARM_MEASURE]
    return found


def model_label(model: str) -> str:
    """A model's name in the tables: an adapter directory's name (``round-2``), else the spec."""
    path = Path(model.removeprefix("embedded/"))
    return path.name if path.is_dir() else model


@contextlib.contextmanager
def inspect_model(
    model: str, engine: str, log_dir: Path, dtype: str = "bfloat16"
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The Inspect model name for ``model`` on ``engine`` (its weights in ``dtype``) and the run options, for the
    duration.

    ``vllm``: the model behind vLLM's OpenAI server on loopback (as the demo serves it), reached through
    Inspect's ``vllm/`` provider; ``embedded``: in process."""
    if engine == "embedded":
        yield (model if model.startswith("embedded/") else f"embedded/{model}"), {"model_args": {"dtype": dtype}}
        return
    from harness.engines.serve import Server

    with Server(model.removeprefix("embedded/"), dtype=dtype, log_path=log_dir / "vllm-server.log") as server:
        with temporary_environ(VLLM_BASE_URL=server.base_url):  # Inspect's vllm/ provider connects to this server
            yield f"vllm/{server.model}", {"max_samples": VLLM_CONCURRENCY, "max_connections": 2 * VLLM_CONCURRENCY}


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
    engine: str = "embedded",
    engine_dtype: str = "bfloat16",
    saar: bool = False,
) -> ModelFigures:
    """Run every source with SAAR off (``saar``: on) and return the model's figures."""
    results = []
    label = model_label(model)
    log_root = out / "logs" / label
    with inspect_model(model, engine, log_root, engine_dtype) as (name, options):
        for source, task, data in sources(out, heldout_math, heldout_code, seed, fixtures):
            generate_args: dict[str, Any] = {"max_tokens": max_tokens}
            if top_p is not None:
                generate_args["top_p"] = top_p
            if "max_connections" in options:
                generate_args["max_connections"] = options["max_connections"]
            dirs = run_arms(
                [task],
                name,
                log_dir=log_root / source.replace(" ", "-"),
                epochs=epochs,
                task_args={"data": data, "sandbox": "local", "max_turns": max_turns, "seed": seed},
                model_args=options.get("model_args"),
                generate=generate_args,
                arms=["on" if saar else "off"],
                display=display,
                max_samples=options.get("max_samples"),
            )
            arms, _ = read_arms(dirs)
            log = read_eval_log(arms[0].location)
            turns, calls = calls_after_a_run(s.messages for s in log.samples or [] if scored(s))
            results.append(replace(figures(source, arms[0]), turns_after_run=turns, calls_after_run=calls))
            print(f"{label}: " + render([results[-1]]).splitlines()[-1], flush=True)
    return ModelFigures(label, results)


_COLUMNS = (
    "samples | calls the tool | calls/sample | failed calls | error kinds | accuracy "
    "| regenerations | ran | repeated | calls again after a run | wall s"
)


def _cells(r: SourceFigures) -> str:
    kinds = ", ".join(f"{k} {v}" for k, v in r.error_kinds.items()) or "-"
    g = r.regenerations
    return (
        f"{r.samples} | {r.call_rate:.0%} | {r.calls_per_sample:.2f} | {r.failed_call_rate:.0%} | {kinds} "
        f"| {r.accuracy:.0%} | {g.regenerations} | {g.ran_share:.0%} | {g.repeated_share:.0%} "
        f"| {r.calls_after_run} of {r.turns_after_run} | {r.wall_s:.0f}"
    )


def render(results: Sequence[SourceFigures]) -> str:
    """A markdown table of one model's sources."""
    lines = [f"| source | {_COLUMNS} |", "|---" * (_COLUMNS.count("|") + 2) + "|"]
    lines += [f"| {r.source} | {_cells(r)} |" for r in results]
    return "\n".join(lines)


def render_models(models: Sequence[ModelFigures]) -> str:
    """One row per model, every source pooled."""
    lines = [f"| model | {_COLUMNS} |", "|---" * (_COLUMNS.count("|") + 2) + "|"]
    lines += [f"| {m.model} | {_cells(m.total)} |" for m in models]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainers warmup-measure", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=["embedded/smollm2-tools"],
        help="model specs, measured one after the other (an adapter directory works as a model spec)",
    )
    parser.add_argument("--model", dest="models", type=lambda m: [m], help="one model (the same as --models M)")
    parser.add_argument("--engine", choices=["embedded", "vllm"], default="embedded", help="in process, or vLLM")
    parser.add_argument(
        "--engine-dtype",
        choices=ENGINE_DTYPES,
        default="bfloat16",
        help="the weights on either engine: float32 gives the same figures when rerun on one CPU; bfloat16 "
        "is faster, and a rerun is another sample",
    )
    parser.add_argument("--saar", action="store_true", help="SAAR on (3 retries): its regenerations are counted")
    parser.add_argument("--out", default=None, help="output directory (default results/warmup/<time>)")
    parser.add_argument("--heldout-math", type=int, default=24, help="held-out generated math problems")
    parser.add_argument("--heldout-code", type=int, default=8, help="held-out generated stdin problems")
    parser.add_argument("--seed", type=int, default=HELD_OUT_SEED, help="held-out generator seed (training: 0)")
    parser.add_argument("--no-fixtures", action="store_true", help="skip the four fixtures")
    parser.add_argument("--epochs", type=int, default=1, help="samples per problem")
    parser.add_argument("--max-turns", type=int, default=4, help="assistant turns per sample")
    parser.add_argument("--max-tokens", type=int, default=320, help="tokens per generation")
    parser.add_argument("--top-p", type=float, default=None, help="override the reference top_p 0.6")
    parser.add_argument("--display", default="none", help="Inspect display (full, rich, plain, none)")
    args = parser.parse_args(argv)
    out = Path(args.out or f"results/warmup/{time.strftime('%Y%m%d-%H%M%S')}")
    started = time.monotonic()
    models: list[ModelFigures] = []
    settings = {k: v for k, v in vars(args).items() if k != "display"}
    for model in args.models:
        model_started = time.monotonic()
        models.append(
            measure(
                model,
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
                engine=args.engine,
                engine_dtype=args.engine_dtype,
                saar=args.saar,
            )
        )
        print(f"{models[-1].model}: measured in {time.monotonic() - model_started:.0f} s", flush=True)
        write(out, models, settings)  # after every model: a stopped run keeps the rows it measured
    print(f"\n{render_models(models)}\n\n{out / 'measure.md'}  ({time.monotonic() - started:.0f} s)")
    return 0


def write(out: Path, models: Sequence[ModelFigures], settings: dict[str, Any]) -> None:
    arm = "SAAR on" if settings.get("saar") else "SAAR off"
    parts = [
        f"# Held-out problems and fixtures, {arm}\n",
        f"settings: `{json.dumps(settings)}`\n",
        "One row per model, every source pooled (failed calls: failed / executed calls; ran and repeated: shares "
        "of SAAR's regenerations, harness.core.metrics.Regenerations; calls again after a run: assistant turns "
        "after a call that ran that call again, of all such turns kept):\n",
        render_models(models) + "\n",
    ]
    for m in models:
        parts += [f"## {m.model}\n", render(m.sources) + "\n"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "measure.md").write_text("\n".join(parts))
    data = {
        "settings": settings,
        "models": [{"model": m.model, "sources": [r.to_dict() for r in m.sources]} for m in models],
    }
    (out / "measure.json").write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
