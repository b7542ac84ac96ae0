"""The GPU smoke's checks that need no GPU: each command validated against the installed Inspect and OpenRLHF,
and the preflight (what the GPU stages need and this machine lacks).

:mod:`trainers.openrlhf_plugin.gpu_smoke` runs them in ``--dry-run`` and before its stages.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from harness.core.environ import temporary_environ
from trainers.core.config import CONFIG_ENV
from trainers.core.recipes import EXECUTOR_PATH, PROJECT_ROOT, openrlhf_checks
from trainers.openrlhf_plugin.gpu_envs import ENGINE_SGLANG, TRAINER, GpuEnv, check_env

#: the task file the smoke's evaluations run
TASK_FILE = PROJECT_ROOT / "tasks" / "aime24.py"


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
        "import json, sys; from trainers.openrlhf_plugin.gpu_checks import training_checks as c; "
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
