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
import importlib.util
import inspect
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

from harness.core.environ import temporary_environ
from trainers.core.config import CONFIG_ENV
from trainers.core.recipes import EXECUTOR_PATH, PROJECT_ROOT, Recipe, load_recipe, openrlhf_checks
from trainers.openrlhf_plugin.gpu_envs import ENGINE_SGLANG, TRAINER, GpuEnv, check_env

RECIPE = "qwen-gpu-smoke"
DEFAULT_MODEL = "Qwen/Qwen3-4B-Instruct-2507"
TASK_FILE = PROJECT_ROOT / "tasks" / "aime24.py"
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


# --- validation without a GPU --------------------------------------------------------------------------


def _options_of(argv: list[str], flag: str) -> dict[str, str]:
    out = {}
    for i, tok in enumerate(argv[:-1]):
        if tok == flag:
            key, _, value = argv[i + 1].partition("=")
            out[key] = value
    return out


def check_inspect_cli(argv: list[str]) -> None:
    """Every option of an ``inspect eval`` command is one the installed Inspect CLI documents."""
    help_text = subprocess.run(
        [sys.executable, "-m", "inspect_ai", "eval", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for opt in (tok for tok in argv if tok.startswith("-")):
        if opt == "-m":  # python's own -m
            continue
        if f"{opt} " not in help_text and f"{opt}," not in help_text and f"{opt}\n" not in help_text:
            raise ValueError(f"`inspect eval` has no option {opt} (Inspect's CLI changed?)")


def check_task_args(argv: list[str]) -> None:
    """Inspect's CLI finds the command's task file from the stage's working directory (the project; Inspect
    refuses an absolute path there), and the file defines an @task taking every ``-T`` argument of the command."""
    from inspect_ai._eval.list import task_files

    given = argv[argv.index("eval") + 1]
    try:
        found = task_files([given], PROJECT_ROOT)
    except NotImplementedError as exc:  # pathlib's glob of an absolute pattern
        raise ValueError(f"`inspect eval {given}`: Inspect's CLI cannot load it ({exc}); give it relative") from exc
    if [f.resolve() for f in found] != [TASK_FILE.resolve()]:
        raise ValueError(f"`inspect eval {given}` from {PROJECT_ROOT} finds {found}, not {TASK_FILE}")
    spec = importlib.util.spec_from_file_location("smoke_task", TASK_FILE)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {TASK_FILE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    params = inspect.signature(module.aime24).parameters
    unknown = set(_options_of(argv, "-T")) - set(params)
    if unknown:
        raise ValueError(f"{TASK_FILE.name}: the task takes no argument {sorted(unknown)} (it takes {sorted(params)})")


def check_model_resolution(argv: list[str]) -> str:
    """Inspect resolves the command's ``--model``, ``--model-base-url`` and ``-M`` arguments as its CLI does
    (``resolve_models``) to its SGLang provider, which then connects lazily: nothing is sent and no server
    starts. Returns the provider's class name."""
    from inspect_ai.model._model import resolve_models

    model = argv[argv.index("--model") + 1]
    url = argv[argv.index("--model-base-url") + 1] if "--model-base-url" in argv else None
    (resolved,) = resolve_models(model, url, _options_of(argv, "-M"))
    api = type(resolved.api).__name__
    if api != "SGLangAPI":
        raise ValueError(f"{model} resolved to {api}, not Inspect's SGLang provider")
    if getattr(resolved.api, "server_process", None) is not None:
        raise ValueError(f"{model}: Inspect started its own SGLang server instead of using the one at {url}")
    return api


def check_executor_loads(config_json: str) -> None:
    """Load the executor file as OpenRLHF does (by path, no arguments) with the job's configuration."""
    from openrlhf.utils.agent import AgentExecutorBase

    with temporary_environ(**{CONFIG_ENV: config_json}):
        spec = importlib.util.spec_from_file_location("agent_module", EXECUTOR_PATH)
        if spec is None or spec.loader is None:
            raise ValueError(f"cannot load {EXECUTOR_PATH}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        executor = module.AgentExecutor()
    if not isinstance(executor, AgentExecutorBase):
        raise ValueError("trainers/openrlhf_plugin/executor.py's AgentExecutor is not an OpenRLHF AgentExecutorBase")
    if executor.config.to_json() != config_json:
        raise ValueError("the executor did not take the job's configuration from " + CONFIG_ENV)


def cuda_device(python: Path) -> str | None:
    """What is missing for CUDA in the environment of ``python`` (None when torch sees a device)."""
    probe = "import torch; print(torch.cuda.is_available(), torch.version.cuda)"
    proc = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        return f"torch does not import at {python}"
    available, version = proc.stdout.split()
    if available != "True":
        return f"no CUDA device (torch.cuda.is_available() is False; torch built for CUDA {version}); check nvidia-smi"
    return None


def docker_sandbox() -> str | None:
    """What is missing for the docker sandbox (None when the engine answers and the image is there)."""
    from sandboxes.docker.engine import default_image, docker_available, image_present

    if not docker_available():
        return "docker sandbox: no Docker engine answers (start dockerd, or set DOCKER_HOST); see docs/docker.md"
    if not image_present():
        return f"docker sandbox: no image {default_image()}; build it: python -m sandboxes.image build"
    return None


def preflight(
    envs: tuple[GpuEnv, ...] = (ENGINE_SGLANG, TRAINER),
    pythons: dict[str, Path] | None = None,
    *,
    extra: tuple[Callable[[], str | None], ...] = (docker_sandbox,),
) -> list[str]:
    """Everything the GPU stages need and this machine lacks, one line each with the command that fixes it.

    ``pythons`` maps a role to the interpreter of its environment (default: its tox environment). A CUDA device
    is looked for with the trainer's torch once that environment is sound.
    """
    pythons = pythons or {}
    problems = []
    for env in envs:
        found = check_env(env, pythons.get(env.role))
        problems += found
        if env is TRAINER and not found:
            problems += [p for p in [cuda_device(pythons.get(env.role) or env.python())] if p]
    problems += [p for p in (check() for check in extra) if p]
    return problems


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


def training_checks(args: list[str], config_json: str, where: str) -> str:
    """OpenRLHF's parser and post-parse checks on ``args``, and the executor loaded as OpenRLHF loads it."""
    warnings = openrlhf_checks(args, where)
    check_executor_loads(config_json)
    note = f" (OpenRLHF notes: {'; '.join(warnings)})" if warnings else ""
    return f"OpenRLHF's parser and checks accept the flags; the executor loads{note}"


def _openrlhf_here() -> bool:
    """OpenRLHF and the torch it imports are installed here (the harness's environment has neither)."""
    return all(importlib.util.find_spec(name) is not None for name in ("openrlhf", "torch"))


def check_training(args: list[str], config_json: str, where: str, trainer: Path | None = None) -> str:
    """:func:`training_checks` where OpenRLHF imports: in this process, else in the trainer's environment,
    else a line saying that nothing was checked."""
    if _openrlhf_here():
        return training_checks(args, config_json, where)
    trainer = trainer or TRAINER.python()
    if not trainer.exists():
        return f"not checked: no OpenRLHF here and no trainer environment at {trainer} ({TRAINER.install_hint()})"
    code = (
        "import json, sys; from trainers.openrlhf_plugin.gpu_smoke import training_checks as c; "
        "print(c(*json.load(sys.stdin)))"
    )
    proc = subprocess.run(
        [str(trainer), "-c", code], input=json.dumps([args, config_json, where]), capture_output=True, text=True,
        cwd=PROJECT_ROOT, timeout=300,
    )  # fmt: skip
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]  # the exception's line
        raise ValueError(f"in the trainer's environment ({trainer}): {last}")
    return proc.stdout.strip().splitlines()[-1] + " (in the trainer's environment)"


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
