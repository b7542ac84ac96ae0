"""``python -m trainers.openrlhf_plugin.gpu_smoke`` (``tox -e gpu-smoke``): a first run on one GPU before a long job.

It uses two environments, each built from its lock in ``packaging/gpu/`` (:mod:`trainers.openrlhf_plugin.gpu_envs`):
the SGLang server's, and the trainer's, which also holds the harness's Inspect client (``tox -e gpu-smoke`` runs
in it). Stages, each a real command with its output in a log file and one summary line (PASS, FAIL or SKIP,
seconds, what to look at):

0. ``preflight``: every environment matches its lock and imports what it must (flash-attn in the trainer's),
   a CUDA device, a Docker engine with the sandbox image; each miss is named with the command that fixes it;
1. ``engine``: the SGLang server, started from its environment on loopback with Qwen's tool-call parser;
2. ``eval-saar-off``, ``eval-saar-on``: ``inspect eval tasks/aime24.py`` on two problems through Inspect's
   ``sglang/`` provider pointed at that server, in the ``reference`` tool environment and the docker sandbox;
3. ``train``: two OpenRLHF GRPO steps with the CLEANER executor (recipe ``qwen-gpu-smoke``), a checkpoint
   after each; ``resume``: the same job with ``--ckpt.load_enable`` and a second episode, which must go on
   from the saved step.

The default model is the 4B recipe's (``Qwen/Qwen3-4B-Instruct-2507``, its Qwen3 chat template). An evaluation
passes when it exits 0 and its Inspect log says ``success``; training when OpenRLHF exits 0 and the
checkpoint of the expected step is on disk. The whole run has a hard time limit (``--timeout``): a stage
past it is killed with its process group and the rest are skipped.

``--dry-run`` runs nothing: it builds every command and validates it on this machine (no GPU needed):
Inspect's CLI knows each option, the task takes each ``-T`` argument, Inspect resolves ``sglang/<model>``
with the server's address to its SGLang provider, the training commands pass OpenRLHF's real argument parser
and the checks its ``__main__`` runs after parsing, and OpenRLHF can load the executor file the way it does.
It then prints the preflight's findings without stopping. This project has no GPU: the stages themselves
have not been run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from trainers.core.config import CONFIG_ENV
from trainers.core.recipes import EXECUTOR_PATH, PROJECT_ROOT, Recipe, load_recipe
from trainers.openrlhf_plugin.gpu_checks import (
    TASK_FILE,
    check_inspect_cli,
    check_model_resolution,
    check_task_args,
    check_training,
    preflight,
)
from trainers.openrlhf_plugin.gpu_envs import ENGINE_SGLANG, TRAINER

RECIPE = "qwen-gpu-smoke"
DEFAULT_MODEL = "Qwen/Qwen3-4B-Instruct-2507"
DEFAULT_PORT = 30371
#: seconds the SGLang server may take to load the model and answer /health
ENGINE_START = 300
StageKind = Literal["engine", "eval", "train"]


@dataclass(frozen=True)
class Stage:
    """One command of the smoke run and how its success is judged."""

    name: str
    argv: list[str]
    log: Path
    kind: StageKind
    env: dict[str, str] = field(default_factory=dict)
    eval_dir: Path | None = None  #: eval stages: where Inspect writes its log
    checkpoint: Path | None = None  #: train stages: the checkpoint directory the run must leave

    def shell(self) -> str:
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"{prefix} {shlex.join(self.argv)}".strip()


@dataclass(frozen=True)
class SmokePlan:
    model: str
    run_dir: Path
    port: int
    recipe: Recipe
    stages: list[Stage]


def base_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1"


def engine_argv(model: str, port: int, python: Path) -> list[str]:
    """The SGLang server in its own environment, on loopback, with Qwen's tool-call parser."""
    return [
        str(python), "-m", "sglang.launch_server",
        "--model-path", model,
        "--host", "127.0.0.1", "--port", str(port),
        "--tool-call-parser", "qwen25",
        "--mem-fraction-static", "0.8",
        "--context-length", "16384",
    ]  # fmt: skip


def eval_argv(
    model: str, log_dir: Path, saar: bool, *, python: Path, port: int, limit: int, data: str | None
) -> list[str]:
    """``inspect eval`` of ``limit`` AIME 2024 problems against the running server, SAAR on or off, short turns,
    in the 4B recipe's tool environment and sandbox."""
    argv = [
        str(python), "-m", "inspect_ai", "eval", TASK_FILE.relative_to(PROJECT_ROOT).as_posix(),
        "--model", f"sglang/{model}",
        "--model-base-url", base_url(port),
        "--limit", str(limit),
        "--max-tokens", "2048",
        "--log-dir", str(log_dir),
        "-T", f"saar={str(saar).lower()}",
        "-T", "tool_env=reference",
        "-T", "sandbox=docker",
        "-T", "max_turns=4",
        "-T", "seed=0",
    ]  # fmt: skip
    if data:
        argv += ["-T", f"data={data}"]
    return argv


def _train_stage(name: str, recipe: Recipe, run_dir: Path, python: Path, step: int) -> Stage:
    argv = [str(python), *recipe.train_args()]
    env = {CONFIG_ENV: recipe.executor.to_json()}
    checkpoint = Path(recipe.openrlhf["ckpt.path"]) / "_actor" / f"global_step{step}"
    return Stage(name, argv, run_dir / f"{name}.log", "train", env, checkpoint=checkpoint)


def plan(
    model: str = DEFAULT_MODEL,
    run_dir: Path | None = None,
    *,
    limit: int = 2,
    data: str | None = None,
    port: int = DEFAULT_PORT,
    envs_root: Path = PROJECT_ROOT,
) -> SmokePlan:
    """The smoke run's stages for ``model``, with every path under ``run_dir``; writes the training prompts."""
    from trainers.core.data import bignum_items, export_openrlhf

    run_dir = (run_dir or PROJECT_ROOT / "results" / "gpu-smoke").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    prompts = export_openrlhf(bignum_items()[:4], run_dir / "prompts.jsonl")
    recipe = load_recipe(RECIPE)
    flags = {
        **recipe.openrlhf,
        "data.prompt_dataset": str(prompts),
        "ckpt.output_dir": str(run_dir / "model"),
        "ckpt.path": str(run_dir / "ckpt"),
        "train.agent_func_path": str(EXECUTOR_PATH),
    }
    recipe = replace(recipe, model=model, openrlhf=flags)
    steps = len(prompts.read_text(encoding="utf-8").splitlines()) // int(flags["rollout.batch_size"])
    resumed = replace(recipe, openrlhf={**flags, "ckpt.load_enable": True, "train.num_episodes": 2})
    engine = engine_argv(model, port, ENGINE_SGLANG.python(envs_root))
    stages = [Stage("engine", engine, run_dir / "engine.log", "engine")]
    trainer = TRAINER.python(envs_root)
    for saar in (False, True):
        name = f"eval-saar-{'on' if saar else 'off'}"
        eval_dir = run_dir / name
        argv = eval_argv(model, eval_dir, saar, python=trainer, port=port, limit=limit, data=data)
        stages.append(Stage(name, argv, run_dir / f"{name}.log", "eval", eval_dir=eval_dir))
    stages.append(_train_stage("train", recipe, run_dir, trainer, steps))
    stages.append(_train_stage("resume", resumed, run_dir, trainer, 2 * steps))
    return SmokePlan(model, run_dir, port, recipe, stages)


def validate(smoke: SmokePlan) -> list[str]:
    """Check every command of ``smoke`` on this machine; returns one line per check (raises on the first failure)."""
    lines = []
    for stage in smoke.stages:
        if stage.kind == "engine":
            lines.append(f"{stage.name}: SGLang on {base_url(smoke.port)} (started from {stage.argv[0]})")
        elif stage.kind == "eval":
            check_inspect_cli(stage.argv)
            check_task_args(stage.argv)
            api = check_model_resolution(stage.argv)
            lines.append(f"{stage.name}: Inspect CLI options, task arguments and model ({api}) check out")
        else:
            args = stage.argv[3:]  # after the interpreter and -m openrlhf.cli.train_ppo_ray
            lines.append(f"{stage.name}: {check_training(args, stage.env[CONFIG_ENV], str(smoke.recipe.path))}")
    return lines


# --- the run ---------------------------------------------------------------------------------------------


def eval_status(eval_dir: Path) -> tuple[bool, str]:
    """Whether the newest Inspect log in ``eval_dir`` finished with success, and a one-line summary."""
    from inspect_ai.log import list_eval_logs, read_eval_log

    logs = list_eval_logs(str(eval_dir))
    if not logs:
        return False, f"no Inspect log in {eval_dir}"
    log = read_eval_log(logs[0], header_only=True)
    scores = ", ".join(
        f"{s.name} {m.name}={m.value:.3f}"
        for s in (log.results.scores if log.results else [])
        for m in s.metrics.values()
    )
    return log.status == "success", f"{log.status}; {scores or 'no scores'}; log {logs[0].name}"


def _start(stage: Stage, log) -> subprocess.Popen:  # noqa: ANN001 - an open text file
    log.write(f"$ {stage.shell()}\n")
    log.flush()
    return subprocess.Popen(
        stage.argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=PROJECT_ROOT,
        env={**os.environ, **stage.env},
        start_new_session=True,  # its own process group: a timeout ends Ray's and the server's children too
    )


def _stop(proc: subprocess.Popen, grace: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_stage(stage: Stage, timeout: float | None = None) -> tuple[bool, str]:
    """Run one stage to its end with its output in its log file, at most ``timeout`` seconds; (passed, detail)."""
    stage.log.parent.mkdir(parents=True, exist_ok=True)
    with stage.log.open("w", encoding="utf-8") as log:
        proc = _start(stage, log)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            return False, f"timed out after {timeout:.0f} s (the run's --timeout), killed"
    if code != 0:
        return False, f"exit code {code}"
    if stage.kind == "eval" and stage.eval_dir is not None:
        return eval_status(stage.eval_dir)
    if stage.checkpoint is not None and not stage.checkpoint.is_dir():
        return False, f"exit code 0 but no checkpoint {stage.checkpoint}"
    return True, "exit code 0" + (f"; checkpoint {stage.checkpoint.name}" if stage.checkpoint else "")


def start_engine(stage: Stage, port: int, timeout: float) -> tuple[subprocess.Popen | None, bool, str]:
    """Start the server of ``stage`` and wait until it answers ``/health`` on ``port``; (process, passed, detail)."""
    stage.log.parent.mkdir(parents=True, exist_ok=True)
    log = stage.log.open("w", encoding="utf-8")
    proc = _start(stage, log)
    log.close()  # the child holds its own descriptor
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None, False, f"the server exited with code {proc.returncode} before it answered"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                if response.status == 200:
                    return proc, True, f"answers on {base_url(port)}"
        except OSError:
            pass
        time.sleep(2)
    _stop(proc)
    return None, False, f"no answer on {base_url(port)} within {timeout:.0f} s, killed"


def _say(line: str) -> None:
    print(line, flush=True)


def run(smoke: SmokePlan, timeout: float, report: Callable[[str], None] = _say) -> int:
    """Run the stages in order within ``timeout`` seconds in all; one summary line per stage; the exit code."""
    deadline = time.monotonic() + timeout
    server: subprocess.Popen | None = None
    failed = 0
    engine_ok = False
    try:
        for stage in smoke.stages:
            left = deadline - time.monotonic()
            start = time.monotonic()
            if left <= 0:
                passed, detail, verdict = False, "no time left (--timeout)", "SKIP"
            elif stage.kind == "eval" and not engine_ok:
                passed, detail, verdict = False, "the engine did not start", "SKIP"
            else:
                if stage.kind == "engine":
                    server, passed, detail = start_engine(stage, smoke.port, min(left, ENGINE_START))
                    engine_ok = passed
                else:
                    if stage.kind == "train" and server is not None:
                        _stop(server)  # the GPU's memory goes to the trainer
                        server = None
                    passed, detail = run_stage(stage, left)
                verdict = "PASS" if passed else "FAIL"
            failed += not passed
            report(f"{verdict} {stage.name} ({time.monotonic() - start:.0f} s): {detail} (log: {stage.log})")
    finally:
        if server is not None:
            _stop(server)
    report(f"{len(smoke.stages) - failed}/{len(smoke.stages)} stages passed; logs in {smoke.run_dir}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainers.openrlhf_plugin.gpu_smoke", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a Qwen2.5 / Qwen3-2507 instruct model")
    parser.add_argument("--run-dir", type=Path, default=None, help="default: results/gpu-smoke")
    parser.add_argument("--limit", type=int, default=2, help="AIME problems per evaluation")
    parser.add_argument("--data", default=None, help="a local AIME 2024 file or directory (default: the hub)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="the SGLang server's loopback port")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole run (a hard limit)")
    parser.add_argument("--dry-run", action="store_true", help="validate and print the commands, run nothing")
    args = parser.parse_args(argv)
    started = time.monotonic()  # the time limit counts the preflight too
    smoke = plan(args.model, args.run_dir, limit=args.limit, data=args.data, port=args.port)
    for stage in smoke.stages:
        print(f"[{stage.name}] {stage.shell()}\n    log: {stage.log}")
    problems = preflight()
    if args.dry_run:
        try:
            for line in validate(smoke):
                print(f"ok  {line}")
        except Exception as exc:  # every failure of a check is reported the same way
            print(f"FAIL dry run: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        print("preflight here (a GPU machine must have none of these):")
        for line in problems or ["nothing missing"]:
            print(f"  {line}")
        print(json.dumps({"dry_run": "ok", "stages": [s.name for s in smoke.stages], "run_dir": str(smoke.run_dir)}))
        return 0
    for line in problems:
        print(f"FAIL preflight: {line}", file=sys.stderr)
    if problems:
        print(f"FAIL preflight: {len(problems)} problems; nothing ran (docs/training.md, 'GPU smoke')", file=sys.stderr)
        return 2
    _say(
        f"PASS preflight ({time.monotonic() - started:.0f} s): the environments match their locks; CUDA, "
        "flash-attn, Docker and the sandbox image are there"
    )
    return run(smoke, args.timeout - (time.monotonic() - started))


if __name__ == "__main__":
    sys.exit(main())
