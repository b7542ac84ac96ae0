"""One frozen model through the three rollout paths, compared: `python -m trainers parity`.

The frozen model is the warm model on vLLM in float32 (``--model warm``, :class:`WarmModel`) and a replay script
(``--model replay``, :mod:`harness.engines.replay`: by default :data:`SAAR_SCRIPT`, whose failed calls SAAR
regenerates, shallow and deep); both by default, each in turn. The same problems (a benchmark's fixture, or a file)
and the same run seed go through

* ``inspect``: the benchmark's Inspect task (``tasks/<name>.py``, :mod:`harness.evals.solver`) with
  ``--model replay/<script>`` (or ``vllm/`` on the warm model's server), read back from its real eval log;
* ``executor``: the OpenRLHF agent executor (:class:`trainers.openrlhf_plugin.executor.AgentExecutor`), its
  engine a stand-in for OpenRLHF's vLLM actor that answers the script's turns as the tokenizer's ids (or the
  server, token ids in and out: :class:`ServedEngine`);
* ``cpu``: the CPU trainer's rollout (:func:`trainers.cpu.rollouts.run_one`), its policy a stand-in sampler
  that answers the same ids (or its vLLM sampler on the server: :class:`ServedSampler`);

each under one tool environment (``project`` or ``reference``), programs in the local sandbox.

What is compared (:class:`SampleRecord`), per problem: every message of the purified trajectory as
``(role, text)``, an assistant turn's text being its reasoning and its call as the harness writes it (the
form an Inspect log keeps; the token paths decode the same text from ids), a tool result with its ``ok`` and
error kind; the SAAR events; the trajectory's stop reason, SAAR draw, turns, calls, failures and error kinds; the
answer; the verdict (the Inspect scorer's accuracy, the trainers' ``correct``); the seed each generation was asked
with; with a real model the token counts (a replay turn counts words on Inspect, tokens on the token paths); and,
between the two trainer paths only, the reward (Inspect computes none) and each generation's context as the
engine got it, decoded (the rendered prompt, tool schema included: Inspect hands a provider messages, not ids).
:func:`first_difference` names the first field where two paths part.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.benchmarks.problem import Problem
from harness.core.toolenv import PROFILES
from trainers.parity.models import (
    JUDGES,
    MODELS,
    REPLAY_DIR,
    SAAR_SCRIPT,
    FrozenModel,
    ReplayModel,
    WarmModel,
    WarmSettings,
    executor_config,
    profile_script,
    resolve_script,
    warm_server,
)
from trainers.parity.paths import run_cpu, run_executor, run_inspect, run_paths
from trainers.parity.records import ParityError, PathRun, SampleRecord, first_difference

__all__ = [
    "JUDGES",
    "MODELS",
    "REPLAY_DIR",
    "SAAR_SCRIPT",
    "FrozenModel",
    "ParityError",
    "PathRun",
    "Problem",
    "ReplayModel",
    "SampleRecord",
    "WarmModel",
    "WarmSettings",
    "add_arguments",
    "executor_config",
    "first_difference",
    "main",
    "profile_script",
    "resolve_script",
    "run_cpu",
    "run_executor",
    "run_inspect",
    "run_paths",
    "warm_server",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        nargs="+",
        default=list(MODELS),
        choices=MODELS,
        help="the frozen model, or several (each run in turn): a replay script (--script), the warm model on vLLM "
        "in float32 (its server on loopback, one engine for the three paths)",
    )
    parser.add_argument(
        "--script",
        default=None,
        help="--model replay: a replay script, a path or a bundled name (aime24.yaml); default: the check's own, "
        "whose failed calls SAAR regenerates shallow and deep, on the aime24 fixture",
    )
    parser.add_argument(
        "--task",
        default=None,
        help="the benchmark whose fixture runs (default: the script's name, e.g. aime24; aime24 with --model warm)",
    )
    parser.add_argument(
        "--tool-env",
        nargs="+",
        default=["project"],
        choices=sorted(PROFILES),
        help="the tool environment, or several (each run in turn)",
    )
    parser.add_argument("--judge", default="lenient", choices=JUDGES, help="the verdict and reward's judge")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed")
    parser.add_argument("--log-dir", default=None, help="keep the Inspect eval log there (default: not kept)")
    parser.add_argument(
        "--no-seeds", action="store_true", help="leave the seeds each generation was asked with out of the comparison"
    )
    warm = WarmSettings()
    parser.add_argument(
        "--limit", type=int, default=warm.limit, help="--model warm: problems, from the fixture's first"
    )
    parser.add_argument(
        "--data", default=warm.data, help="--model warm: the task's problems, a file of its schema (default: fixture)"
    )
    parser.add_argument("--max-tokens", type=int, default=warm.max_tokens, help="--model warm: tokens per generation")
    parser.add_argument("--max-turns", type=int, default=warm.max_turns, help="--model warm: assistant turns")
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        help="--model warm: the response budget in tokens (a tool environment that counts the response: reference)",
    )


def _report(task: str, what: str, tool_env: str, judge: str, runs: list[PathRun], seeds: bool) -> int:
    """Print each pair of paths, ``same`` or where they first differ; 1 when any differs."""
    print(f"{task}, {len(runs[0].samples)} samples, {what}, tool environment {tool_env}, judge {judge}")
    status = 0
    for a, b in ((runs[0], runs[1]), (runs[0], runs[2]), (runs[1], runs[2])):  # the trainers: contexts, rewards too
        where = first_difference(a, b, seeds=seeds)
        print(f"{a.path} vs {b.path}: {'same' if where is None else 'differ at ' + where}", flush=True)
        status |= where is not None
    return status


def main(args: argparse.Namespace) -> int:
    """Run the three paths with each frozen model under each tool environment and print, for each pair of paths,
    ``same`` or where it first differs; 1 when any differs."""
    models = list(dict.fromkeys(args.model))
    if args.script is not None and "replay" not in models:
        raise ParityError("--script is the replay model's: add --model replay")
    settings = _warm_settings(args) if "warm" in models else None  # refused before anything runs
    status = 0
    for model in models:
        if model == "warm":
            assert settings is not None
            status |= _warm(args, settings)
        else:
            status |= _replay(args)
    return status


def _replay(args: argparse.Namespace) -> int:
    script = resolve_script(args.script) if args.script is not None else SAAR_SCRIPT
    task, status = args.task or script.stem, 0
    for tool_env in args.tool_env:
        runs = run_paths(task, script, tool_env, judge=args.judge, seed=args.seed, log_dir=args.log_dir)
        status |= _report(task, f"replay {script.name}", tool_env, args.judge, runs, not args.no_seeds)
    return status


def _warm_settings(args: argparse.Namespace) -> WarmSettings:
    data = args.data if args.data == "fixture" else str(Path(args.data).resolve())
    settings = WarmSettings(args.limit, data, args.max_tokens, args.max_turns, args.budget)
    for tool_env in args.tool_env:
        settings.check(tool_env)
    return settings


def _warm(args: argparse.Namespace, settings: WarmSettings) -> int:
    task, status = args.task or "aime24", 0
    with warm_server() as server:
        print(f"vLLM ({WarmModel.dtype}) on {server.base_url}, started in {server.start_seconds:.0f} s", flush=True)
        model = WarmModel(server, settings)
        for tool_env in args.tool_env:
            runs = run_paths(task, model, tool_env, judge=args.judge, seed=args.seed, log_dir=args.log_dir)
            what = f"warm model on vLLM ({settings})"
            status |= _report(task, what, tool_env, args.judge, runs, not args.no_seeds)
    return status
