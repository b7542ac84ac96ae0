"""Recipes (YAML) to OpenRLHF command lines and Ray jobs, validated before anything runs.

A recipe has these top-level keys (all but ``name`` optional)::

    name: qwen3-4b-cleaner
    model: Qwen/Qwen3-4B            # the policy (hub id or local dir); fills actor.model_name_or_path
    data:    {source: Gen-Verse/Open-AgentRL-30K, prepared: data/open_agentrl.jsonl, limit: null}
    executor: {saar: {enabled: true, prob: 1.0, gamma: 0.5, max_retries: 3}, max_turns: 16, ...}
    openrlhf: {algo.advantage.estimator: group_norm, actor.adam.lr: 2.0e-6, ...}   # dotted flags
    ray:     {address: http://127.0.0.1:8265, working_dir: ., env_vars: {DOCKER_HOST: ...}}
    gpu:     {memory_gib: 80, reserve_gib: 4, model: {vocab_size: ..., ...}}   # launch --check (trainers.core.memory)
    cpu:     {steps: 4, ...}            # the CPU embedded trainer (trainers.cpu.trainer)

Outputs: Ray's workers run in Ray's own copy of the working directory, which Ray deletes, so
``ckpt.output_dir`` and ``ckpt.path`` reach OpenRLHF as absolute paths: a relative one is resolved
against the directory the launcher runs in; ``ckpt.output_dir`` defaults to ``ckpt/<recipe name>`` and
``ckpt.path`` to ``<ckpt.output_dir>/checkpoints`` (OpenRLHF's own defaults are one path for every run).

A Ray job's runtime environment installs the project on every worker: the working
directory (the code, without environments, runs and checkpoints: :data:`EXCLUDES`) and
``pip`` with the project's own dependencies from ``pyproject.toml`` (Ray installs them
into a virtualenv on top of each node's Python, which already has OpenRLHF, vLLM and
torch). ``rollout.max_new_tokens`` is copied into the executor's configuration, whose
overlong penalty counts what the tool environment's budget counts; OpenRLHF's own
``reward.overlong_buffer_len`` is refused (it counts tool output whatever the environment, its issue #1243).

Every ``openrlhf`` key is checked against OpenRLHF's real argument parser, built from
``openrlhf/cli/train_ppo_ray.py`` of the installed package (its source is read, not
run, so neither Ray nor vLLM is needed to validate): an unknown flag, a value of the
wrong type or outside the flag's choices is an error naming the recipe and the key.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.metadata
import importlib.util
import io
import json
import shlex
import tomllib
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from trainers.core import memory
from trainers.core.config import CONFIG_ENV, ExecutorConfig

RECIPES = Path(__file__).parents[1] / "recipes"
EXECUTOR_PATH = Path(__file__).parents[1] / "openrlhf_plugin" / "executor.py"
TOP_KEYS = {"name", "description", "model", "data", "executor", "openrlhf", "ray", "gpu", "cpu"}
GPU_KEYS = {"memory_gib", "reserve_gib", "model"}
DATA_KEYS = {"source", "prepared", "limit"}
RAY_KEYS = {"address", "working_dir", "submit", "pip", "excludes", "env_vars"}
PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: never uploaded with the working directory (Ray refuses large uploads; none of these is needed on a worker)
EXCLUDES = [".git", ".tox", ".venv", "venv", "results", "logs", "ckpt", "**/__pycache__", "*.egg-info"]


class RecipeError(ValueError):
    """A recipe is invalid; the message names the file and the key."""


def project_requirements() -> list[str]:
    """The project's runtime dependencies (no extras): ``pyproject.toml`` in a checkout, else the package metadata."""
    pyproject = PROJECT_ROOT / "pyproject.toml"
    if pyproject.is_file():
        return list(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"])
    requires = importlib.metadata.requires("cleaner") or []
    return [r for r in requires if "extra ==" not in r]


@lru_cache(maxsize=1)
def _openrlhf_main() -> tuple[Path, list[ast.stmt], int]:
    """The ``__main__`` block of the installed ``openrlhf/cli/train_ppo_ray.py`` and where it parses its args."""
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise RecipeError("openrlhf is not installed: pip install --no-deps openrlhf==0.11.2")
    src_path = Path(next(iter(spec.submodule_search_locations))) / "cli" / "train_ppo_ray.py"
    tree = ast.parse(src_path.read_text(encoding="utf-8"), filename=str(src_path))
    main = next(
        (n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)),
        None,
    )
    if main is None:
        raise RecipeError(f"{src_path}: no __main__ block to read the argument parser from")
    parse_at = next((i for i, stmt in enumerate(main.body) if "parse_args" in ast.unparse(stmt)), None)
    if parse_at is None:
        raise RecipeError(f"{src_path}: the __main__ block never parses its arguments")
    return src_path, main.body, parse_at


@lru_cache(maxsize=1)
def openrlhf_parser() -> argparse.ArgumentParser:
    """OpenRLHF's own ``train_ppo_ray`` parser, rebuilt from the installed source."""
    src_path, body, parse_at = _openrlhf_main()
    namespace: dict[str, Any] = {"argparse": argparse, "datetime": datetime}
    exec(compile(ast.Module(body=body[:parse_at], type_ignores=[]), str(src_path), "exec"), namespace)  # noqa: S102
    parser = namespace.get("parser")
    if not isinstance(parser, argparse.ArgumentParser):
        raise RecipeError(f"{src_path}: could not rebuild the argument parser")
    parser.exit_on_error = False
    return parser


def openrlhf_checks(argv: list[str], where: str) -> list[str]:
    """Run OpenRLHF's own checks of a parsed command line, everything its ``__main__`` does but ``train(args)``.

    Those checks (``n_samples_per_prompt > 1`` for group estimators, enough samples per actor
    process, packing needs vLLM, ...) otherwise fail only on the cluster. Importing OpenRLHF's
    config helper needs torch, not a GPU. Returns the warnings it printed.

    Raises:
        RecipeError: OpenRLHF refuses the settings (its assertion message is kept).
    """
    src_path, body, parse_at = _openrlhf_main()
    checks = [s for s in body[parse_at + 1 :] if not ("train(args)" in ast.unparse(s) and isinstance(s, ast.Expr))]
    namespace: dict[str, Any] = {"args": openrlhf_parser().parse_args(argv)}
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(ast.Module(body=checks, type_ignores=[]), str(src_path), "exec"), namespace)  # noqa: S102
    except AssertionError as exc:
        raise RecipeError(f"{where}: OpenRLHF refuses the settings: {exc}") from exc
    return [line for line in out.getvalue().splitlines() if line.strip()]


def _actions() -> dict[str, argparse.Action]:
    return {opt: a for a in openrlhf_parser()._actions for opt in a.option_strings}


def flag_args(flags: dict[str, Any], where: str) -> list[str]:
    """Dotted flags as argv, validated by OpenRLHF's parser."""
    actions = _actions()
    argv: list[str] = []
    for key, value in flags.items():
        opt = f"--{key}"
        action = actions.get(opt)
        if action is None:
            close = [o[2:] for o in actions if o.split(".")[-1] == opt.split(".")[-1]]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise RecipeError(f"{where}: openrlhf.{key} is not an OpenRLHF 0.11 train_ppo_ray flag{hint}")
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            if not isinstance(value, bool):
                raise RecipeError(f"{where}: openrlhf.{key} is a switch; give true or false, not {value!r}")
            if value != action.default:
                argv.append(opt)
            continue
        values = value if isinstance(value, list) else [value]
        if action.nargs in (None, "?") and isinstance(value, list):
            raise RecipeError(f"{where}: openrlhf.{key} takes one value, got a list")
        if isinstance(action.nargs, int) and len(values) != action.nargs:
            raise RecipeError(f"{where}: openrlhf.{key} takes {action.nargs} values, got {len(values)}")
        for v in values:
            if isinstance(v, dict | list) or v is None:
                raise RecipeError(f"{where}: openrlhf.{key} has a value of the wrong type: {v!r}")
            text = str(v).lower() if isinstance(v, bool) else str(v)
            try:
                converted = action.type(text) if action.type else text
            except (TypeError, ValueError) as exc:
                kind = getattr(action.type, "__name__", "value")
                raise RecipeError(f"{where}: openrlhf.{key} must be {kind}, got {v!r}") from exc
            if action.choices is not None and converted not in action.choices:
                raise RecipeError(f"{where}: openrlhf.{key} must be one of {list(action.choices)}, got {v!r}")
        argv += [opt, *[str(v) for v in values]]
    try:
        openrlhf_parser().parse_known_args(argv)
    except argparse.ArgumentError as exc:
        raise RecipeError(f"{where}: OpenRLHF rejects the flags: {exc}") from exc
    return argv


@dataclass
class Recipe:
    name: str
    path: Path
    model: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    openrlhf: dict[str, Any] = field(default_factory=dict)
    ray: dict[str, Any] = field(default_factory=dict)
    gpu: dict[str, Any] = field(default_factory=dict)
    cpu: dict[str, Any] = field(default_factory=dict)

    @property
    def shown_path(self) -> str:
        """The recipe's path as written into results: relative to the project when inside it, so reports
        name no machine's directories."""
        try:
            return self.path.resolve().relative_to(PROJECT_ROOT.resolve()).as_posix()
        except ValueError:
            return self.path.name

    def train_args(self) -> list[str]:
        """The ``python -m openrlhf.cli.train_ppo_ray`` argv (without the interpreter)."""
        where = str(self.path)
        flags = dict(self.openrlhf)
        if self.model:
            flags.setdefault("actor.model_name_or_path", self.model)
        flags.setdefault(
            "train.agent_func_path", "trainers/openrlhf_plugin/executor.py"
        )  # relative to the Ray working_dir
        if self.data.get("prepared"):
            flags.setdefault("data.prompt_dataset", str(self.data["prepared"]))
        flags.setdefault("data.input_key", "prompt")
        flags.setdefault("data.label_key", "label")
        flags.update(self.outputs())
        for required in ("actor.model_name_or_path", "data.prompt_dataset"):
            if not flags.get(required):
                raise RecipeError(f"{where}: no {required} (set 'model' / data.prepared or openrlhf.{required})")
        if flags.get("reward.overlong_buffer_len") is not None:
            raise RecipeError(
                f"{where}: openrlhf.reward.overlong_buffer_len counts tool output as response length in OpenRLHF "
                "0.11.2 (its issue #1243); set executor.overlong_buffer_len instead, which counts what the tool "
                "environment's budget counts"
            )
        if flags.get("algo.kl.target") is not None:
            raise RecipeError(
                f"{where}: openrlhf.algo.kl.target (an adaptive KL coefficient) reads every sample's mean KL, which "
                "is 0/0 for a failed rollout's placeholder (it has no action tokens, docs/training.md): leave it "
                "unset and give algo.kl.init_coef"
            )
        level = flags.get("algo.advantage.is_correction_level", "off")
        sampling = {k: flags.get(f"rollout.{k}", 1.0) for k in ("temperature", "top_p")}
        if level != "off" and self.executor.saar.enabled and any(v != 1.0 for v in sampling.values()):
            raise RecipeError(
                f"{where}: openrlhf.algo.advantage.is_correction_level {level} with SAAR on needs "
                f"rollout.temperature 1.0 and rollout.top_p 1.0 (got {sampling}): the executor rescores SAAR's "
                "replaced spans with a prefill, whose log-probs skip temperature and top-p (docs/training.md)"
            )
        if flags.get("data.apply_chat_template"):
            raise RecipeError(
                f"{where}: openrlhf.data.apply_chat_template must be false: the executor renders the "
                "chat itself, with the same template rendering as evaluation"
            )
        return ["-m", "openrlhf.cli.train_ppo_ray", *flag_args(flags, where)]

    def outputs(self) -> dict[str, str]:
        """``ckpt.output_dir`` (default ``ckpt/<name>``) and ``ckpt.path`` (default ``<ckpt.output_dir>/checkpoints``)
        as absolute paths."""
        out_dir = self.openrlhf.get("ckpt.output_dir") or Path("ckpt") / self.name
        out = {"ckpt.output_dir": str(Path(str(out_dir)).expanduser().resolve())}
        ckpt = self.openrlhf.get("ckpt.path") or Path(out["ckpt.output_dir"]) / "checkpoints"
        out["ckpt.path"] = str(Path(str(ckpt)).expanduser().resolve())
        return out

    def memory_plan(self, gpu_gib: float | None = None) -> memory.MemoryPlan:
        """The GPU memory estimate of this recipe (:mod:`trainers.core.memory`) on its ``gpu`` or on ``gpu_gib``."""
        where = f"{self.path}: gpu"
        gpu_gib = gpu_gib if gpu_gib is not None else self.gpu.get("memory_gib")
        if gpu_gib is None:
            raise RecipeError(f"{where}.memory_gib is not set: state the GPU's memory (or pass --gpu-memory-gib)")
        config = self.gpu.get("model") or memory.local_model_config(self.model or "")
        if config is None:
            raise RecipeError(
                f"{where}.model is not set and {self.model}'s config.json is not on this machine: copy vocab_size, "
                "hidden_size, num_hidden_layers, intermediate_size, num_attention_heads, num_key_value_heads, "
                "head_dim and tie_word_embeddings from it into gpu.model"
            )
        try:
            shape = memory.ModelShape.from_config(config, f"{where}.model")
        except ValueError as exc:
            raise RecipeError(str(exc)) from exc
        return memory.plan(self.openrlhf, shape, float(gpu_gib), float(self.gpu.get("reserve_gib", memory.RESERVE_GIB)))

    def command(self) -> list[str]:
        """The full command: a Ray job submission when ``ray.submit`` (default), else a local run."""
        train = ["python3", *self.train_args()]
        env = {CONFIG_ENV: self.executor.to_json()}
        if not self.ray.get("submit", True):
            return ["env", f"{CONFIG_ENV}={env[CONFIG_ENV]}", *train]
        return [
            "ray", "job", "submit",
            "--address", str(self.ray.get("address", "http://127.0.0.1:8265")),
            "--runtime-env-json", json.dumps(self.runtime_env(), sort_keys=True),
            "--", *train,
        ]  # fmt: skip

    def runtime_env(self) -> dict[str, Any]:
        """The Ray job's runtime environment: the project's code and dependencies, and the executor's settings."""
        env_vars = {str(k): str(v) for k, v in (self.ray.get("env_vars") or {}).items()}
        env_vars[CONFIG_ENV] = self.executor.to_json()
        return {
            "working_dir": str(self.ray.get("working_dir", ".")),
            "excludes": list(self.ray.get("excludes", EXCLUDES)),
            "pip": {"packages": list(self.ray.get("pip", project_requirements())), "pip_check": False},
            "env_vars": env_vars,
        }

    def shell(self) -> str:
        return shlex.join(self.command())


def _section(data: dict[str, Any], key: str, where: str, known: set[str] | None = None) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise RecipeError(f"{where}: '{key}' must be a mapping, got {type(value).__name__}")
    if known is not None and (unknown := set(value) - known):
        raise RecipeError(f"{where}: unknown keys in '{key}': {sorted(unknown)}; known: {sorted(known)}")
    return value


def _recipe_file(path: str | Path) -> Path:
    """A recipe's file: a path, or a name under ``trainers/recipes``."""
    p = Path(path)
    if not p.exists() and (RECIPES / f"{path}.yaml").exists():
        p = RECIPES / f"{path}.yaml"
    if not p.is_file():
        shipped = sorted(x.stem for x in RECIPES.glob("*.yaml"))
        raise RecipeError(f"recipe {path}: no such file (recipes shipped: {shipped})")
    return p


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: mappings merged key by key, any other value replaced."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _recipe_data(p: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A recipe file's mapping, on top of its ``base:`` recipe's (which may name a base of its own)."""
    where = str(p)
    if p.resolve() in seen:
        raise RecipeError(f"{where}: 'base' recipes form a loop: {' -> '.join(str(s) for s in (*seen, p.resolve()))}")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RecipeError(f"{where}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise RecipeError(f"{where}: a recipe is a mapping of {sorted(TOP_KEYS)}")
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise RecipeError(f"{where}: 'base' must name a recipe (a name under trainers/recipes or a path)")
    return _merged(_recipe_data(_recipe_file(base), (*seen, p.resolve())), data)


def load_recipe(path: str | Path, *, check_files: bool = True) -> Recipe:
    """Read and validate a recipe file (a path, or a name under ``trainers/recipes``).

    A recipe may name a ``base:`` recipe and hold only what differs from it: its sections are merged
    key by key on top of the base's (``name`` and ``description`` are its own).
    """
    p = _recipe_file(path)
    where = str(p)
    data = _recipe_data(p)
    if unknown := set(data) - TOP_KEYS:
        raise RecipeError(f"{where}: unknown top-level keys {sorted(unknown)}; known: {sorted(TOP_KEYS)}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise RecipeError(f"{where}: 'name' must be a non-empty string")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise RecipeError(f"{where}: 'model' must be a string (hub id or path)")
    executor_data = dict(_section(data, "executor", where))
    budget = _section(data, "openrlhf", where).get("rollout.max_new_tokens")
    if budget is not None:  # the executor's overlong penalty is relative to OpenRLHF's generation budget
        if executor_data.setdefault("max_new_tokens", budget) != budget:
            raise RecipeError(
                f"{where}: executor.max_new_tokens ({executor_data['max_new_tokens']}) differs from "
                f"openrlhf.rollout.max_new_tokens ({budget}); give it once, under openrlhf"
            )
    try:
        executor = ExecutorConfig.from_json(json.dumps(executor_data), where=f"{where}: executor")
    except (TypeError, ValueError) as exc:
        raise RecipeError(str(exc)) from exc
    recipe = Recipe(
        name=name,
        path=p,
        model=model,
        data=_section(data, "data", where, DATA_KEYS),
        executor=executor,
        openrlhf=_section(data, "openrlhf", where),
        ray=_section(data, "ray", where, RAY_KEYS),
        gpu=_section(data, "gpu", where, GPU_KEYS),
        cpu=_section(data, "cpu", where),
    )
    for key in ("memory_gib", "reserve_gib"):
        value = recipe.gpu.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
            raise RecipeError(f"{where}: gpu.{key} must be a positive number of GiB, got {value!r}")
    if "model" in recipe.gpu and not isinstance(recipe.gpu["model"], dict):
        raise RecipeError(f"{where}: gpu.model must be a mapping of the model's config.json numbers")
    for key, kind in (("pip", list), ("excludes", list), ("env_vars", dict)):
        if key in recipe.ray and not isinstance(recipe.ray[key], kind):
            raise RecipeError(f"{where}: ray.{key} must be a {kind.__name__}")
    if check_files:
        for key in ("train.agent_func_path",):
            if key in recipe.openrlhf and not Path(recipe.openrlhf[key]).is_file():
                raise RecipeError(f"{where}: openrlhf.{key}: file {recipe.openrlhf[key]} does not exist")
        model_path = recipe.model or ""
        if model_path.startswith((".", "/")) and not Path(model_path).exists():
            raise RecipeError(f"{where}: model {model_path} does not exist")
    if recipe.openrlhf:  # validate the flags now, with OpenRLHF's parser and its post-parse checks
        openrlhf_checks(recipe.train_args()[2:], where)
    return recipe
