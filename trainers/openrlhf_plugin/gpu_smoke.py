"""``python -m trainers.openrlhf_plugin.gpu_smoke`` (``tox -e gpu-smoke``): a first run on one GPU before a long job.

Three stages, each a real command whose output goes to a log file; each is reported
PASS or FAIL with where its log is:

1. ``eval-saar-off``: ``inspect eval tasks/aime24.py --model sglang/<model> --limit 2 -T saar=false``
   (Inspect starts the SGLang server, with Qwen's tool-call parser);
2. ``eval-saar-on``: the same two problems with SAAR on;
3. ``train``: two OpenRLHF GRPO steps with the CLEANER executor (recipe ``qwen-gpu-smoke``:
   four big-number problems, two per step, one GPU, colocated vLLM and DeepSpeed).

An evaluation passes when the command exits 0 and its Inspect log says ``success``
(``inspect eval`` exits 0 even when the task errored); training passes when OpenRLHF exits 0.

``--dry-run`` runs nothing: it builds every command and validates it on this machine (no GPU
needed): Inspect's CLI knows each option, the task takes each ``-T`` argument, Inspect
resolves ``sglang/<model>`` to its SGLang provider (pointed at an unused loopback address so
that no server starts), the training command passes OpenRLHF's real argument parser and the
checks its ``__main__`` runs after parsing, and OpenRLHF can load the executor file the way
it does and build it from the job's configuration. It also says which GPU prerequisites are
missing here. This project has no GPU: the stages themselves have not been run.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from harness.core.environ import temporary_environ
from trainers.core.config import CONFIG_ENV
from trainers.core.recipes import EXECUTOR_PATH, PROJECT_ROOT, Recipe, load_recipe, openrlhf_checks

RECIPE = "qwen-gpu-smoke"
DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
TASK_FILE = PROJECT_ROOT / "tasks" / "aime24.py"
#: what the GPU stages import; a missing one is named before anything runs
GPU_PACKAGES = ("torch", "sglang", "vllm", "deepspeed", "ray", "openrlhf")


@dataclass(frozen=True)
class Stage:
    """One command of the smoke run and how its success is judged."""

    name: str
    argv: list[str]
    log: Path
    kind: Literal["eval", "train"]
    env: dict[str, str] = field(default_factory=dict)
    eval_dir: Path | None = None  #: eval stages: where Inspect writes its log

    def shell(self) -> str:
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"{prefix} {shlex.join(self.argv)}".strip()


@dataclass(frozen=True)
class SmokePlan:
    model: str
    run_dir: Path
    recipe: Recipe
    stages: list[Stage]


def eval_argv(model: str, log_dir: Path, saar: bool, *, limit: int, data: str | None) -> list[str]:
    """``inspect eval`` of ``limit`` AIME 2024 problems on SGLang, SAAR on or off, short turns for a smoke."""
    argv = [
        sys.executable, "-m", "inspect_ai", "eval", str(TASK_FILE),
        "--model", f"sglang/{model}",
        "-M", "tool_call_parser=qwen25",
        "--limit", str(limit),
        "--max-tokens", "2048",
        "--log-dir", str(log_dir),
        "-T", f"saar={str(saar).lower()}",
        "-T", "max_turns=4",
        "-T", "seed=0",
    ]  # fmt: skip
    if data:
        argv += ["-T", f"data={data}"]
    return argv


def plan(model: str = DEFAULT_MODEL, run_dir: Path | None = None, *, limit: int = 2, data: str | None = None):
    """The smoke run's stages for ``model``, with every path under ``run_dir``; writes the training prompts."""
    from trainers.core.data import bignum_items, export_openrlhf

    run_dir = (run_dir or PROJECT_ROOT / "results" / "gpu-smoke").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    prompts = export_openrlhf(bignum_items()[:4], run_dir / "prompts.jsonl")
    recipe = load_recipe(RECIPE)
    flags = {
        **recipe.openrlhf,
        "data.prompt_dataset": str(prompts),
        "ckpt.output_dir": str(run_dir / "ckpt"),
        "train.agent_func_path": str(EXECUTOR_PATH),
    }
    recipe = replace(recipe, model=model, openrlhf=flags)
    stages = []
    for saar in (False, True):
        name = f"eval-saar-{'on' if saar else 'off'}"
        eval_dir = run_dir / name
        argv = eval_argv(model, eval_dir, saar, limit=limit, data=data)
        stages.append(Stage(name, argv, run_dir / f"{name}.log", "eval", eval_dir=eval_dir))
    train_argv = [sys.executable, *recipe.train_args()]
    stages.append(Stage("train", train_argv, run_dir / "train.log", "train", {CONFIG_ENV: recipe.executor.to_json()}))
    return SmokePlan(model, run_dir, recipe, stages)


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
    """The task file defines an @task taking every ``-T`` argument of the command."""
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
    """Inspect resolves the command's ``--model`` and ``-M`` arguments to its SGLang provider.

    ``SGLANG_BASE_URL`` points at an unused loopback port so that the provider connects
    lazily instead of starting a server; nothing is sent. Returns the provider's class name.
    """
    from inspect_ai.model import get_model

    model = argv[argv.index("--model") + 1]
    with temporary_environ(SGLANG_BASE_URL="http://127.0.0.1:9/v1", SGLANG_API_KEY="smoke-dry-run"):
        resolved = get_model(model, memoize=False, **_options_of(argv, "-M"))
    api = type(resolved.api).__name__
    if api != "SGLangAPI":
        raise ValueError(f"{model} resolved to {api}, not Inspect's SGLang provider")
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


def missing_prerequisites() -> list[str]:
    """What the GPU stages need and this machine lacks (packages, a CUDA device)."""
    missing = [name for name in GPU_PACKAGES if importlib.util.find_spec(name) is None]
    if "torch" in GPU_PACKAGES and "torch" not in missing:
        import torch

        if not torch.cuda.is_available():
            missing.append("a CUDA device (torch.cuda.is_available() is False)")
    return missing


def validate(smoke: SmokePlan) -> list[str]:
    """Check every command of ``smoke`` on this machine; returns one line per check (raises on the first failure)."""
    lines = []
    for stage in smoke.stages:
        if stage.kind == "eval":
            check_inspect_cli(stage.argv)
            check_task_args(stage.argv)
            api = check_model_resolution(stage.argv)
            lines.append(f"{stage.name}: Inspect CLI options, task arguments and model ({api}) check out")
        else:
            warnings = openrlhf_checks(smoke.recipe.train_args()[2:], str(smoke.recipe.path))
            check_executor_loads(stage.env[CONFIG_ENV])
            note = f" (OpenRLHF notes: {'; '.join(warnings)})" if warnings else ""
            lines.append(f"{stage.name}: OpenRLHF's parser and checks accept the flags; the executor loads{note}")
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


def run_stage(stage: Stage) -> tuple[bool, str]:
    """Run one stage with its output in its log file; (passed, detail)."""
    stage.log.parent.mkdir(parents=True, exist_ok=True)
    with stage.log.open("w", encoding="utf-8") as log:
        log.write(f"$ {stage.shell()}\n")
        log.flush()
        code = subprocess.call(
            stage.argv, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT, env={**os.environ, **stage.env}
        )
    if code != 0:
        return False, f"exit code {code}"
    if stage.kind == "eval" and stage.eval_dir is not None:
        return eval_status(stage.eval_dir)
    return True, "exit code 0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainers.openrlhf_plugin.gpu_smoke", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a small Qwen2.5 / Qwen3-2507 instruct model")
    parser.add_argument("--run-dir", type=Path, default=None, help="default: results/gpu-smoke")
    parser.add_argument("--limit", type=int, default=2, help="AIME problems per evaluation")
    parser.add_argument("--data", default=None, help="a local AIME 2024 file or directory (default: the hub)")
    parser.add_argument("--dry-run", action="store_true", help="validate and print the commands, run nothing")
    args = parser.parse_args(argv)
    smoke = plan(args.model, args.run_dir, limit=args.limit, data=args.data)
    for stage in smoke.stages:
        print(f"[{stage.name}] {stage.shell()}\n    log: {stage.log}")
    if args.dry_run:
        try:
            for line in validate(smoke):
                print(f"ok  {line}")
        except Exception as exc:  # every failure of a check is reported the same way
            print(f"FAIL dry run: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        missing = missing_prerequisites()
        print("GPU prerequisites missing here: " + (", ".join(missing) if missing else "none"))
        print(json.dumps({"dry_run": "ok", "stages": [s.name for s in smoke.stages], "run_dir": str(smoke.run_dir)}))
        return 0
    missing = missing_prerequisites()
    if missing:
        print(f"FAIL preflight: missing {', '.join(missing)} (see docs/training.md, 'GPU smoke')", file=sys.stderr)
        return 2
    failed = 0
    for stage in smoke.stages:
        passed, detail = run_stage(stage)
        failed += not passed
        print(f"{'PASS' if passed else 'FAIL'} {stage.name}: {detail} (log: {stage.log})", flush=True)
    print(f"{len(smoke.stages) - failed}/{len(smoke.stages)} stages passed; logs in {smoke.run_dir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
