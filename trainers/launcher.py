"""Recipes (YAML) to OpenRLHF command lines and Ray jobs, validated before anything runs.

A recipe has these top-level keys (all but ``name`` optional)::

    name: qwen3-4b-cleaner
    model: Qwen/Qwen3-4B            # the policy (hub id or local dir); fills actor.model_name_or_path
    data:    {source: Gen-Verse/Open-AgentRL-30K, prepared: data/open_agentrl.jsonl, limit: null}
    executor: {saar: {enabled: true, prob: 1.0, gamma: 0.5, max_retries: 3}, max_turns: 16, ...}
    openrlhf: {algo.advantage.estimator: group_norm, actor.adam.lr: 2.0e-6, ...}   # dotted flags
    ray:     {address: http://127.0.0.1:8265, working_dir: .}
    cpu:     {steps: 4, ...}            # the CPU embedded trainer (trainers.cpu_trainer)

Every ``openrlhf`` key is checked against OpenRLHF's real argument parser, built from
``openrlhf/cli/train_ppo_ray.py`` of the installed package (its source is read, not
run, so neither Ray nor vLLM is needed to validate): an unknown flag, a value of the
wrong type or outside the flag's choices is an error naming the recipe and the key.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import shlex
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from trainers.config import CONFIG_ENV, ExecutorConfig

RECIPES = Path(__file__).parent / "recipes"
EXECUTOR_PATH = Path(__file__).parent / "executor.py"
TOP_KEYS = {"name", "description", "model", "data", "executor", "openrlhf", "ray", "cpu"}
DATA_KEYS = {"source", "prepared", "limit"}
RAY_KEYS = {"address", "working_dir", "submit"}


class RecipeError(ValueError):
    """A recipe is invalid; the message names the file and the key."""


@lru_cache(maxsize=1)
def openrlhf_parser() -> argparse.ArgumentParser:
    """OpenRLHF's own ``train_ppo_ray`` parser, rebuilt from the installed source."""
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
    body = []
    for stmt in main.body:
        if "parse_args" in ast.unparse(stmt):
            break
        body.append(stmt)
    namespace: dict[str, Any] = {"argparse": argparse, "datetime": datetime}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(src_path), "exec"), namespace)  # noqa: S102
    parser = namespace.get("parser")
    if not isinstance(parser, argparse.ArgumentParser):
        raise RecipeError(f"{src_path}: could not rebuild the argument parser")
    parser.exit_on_error = False
    return parser


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
    cpu: dict[str, Any] = field(default_factory=dict)

    def train_args(self) -> list[str]:
        """The ``python -m openrlhf.cli.train_ppo_ray`` argv (without the interpreter)."""
        where = str(self.path)
        flags = dict(self.openrlhf)
        if self.model:
            flags.setdefault("actor.model_name_or_path", self.model)
        flags.setdefault("train.agent_func_path", "trainers/executor.py")  # relative to the Ray working_dir
        if self.data.get("prepared"):
            flags.setdefault("data.prompt_dataset", str(self.data["prepared"]))
        flags.setdefault("data.input_key", "prompt")
        flags.setdefault("data.label_key", "label")
        for required in ("actor.model_name_or_path", "data.prompt_dataset"):
            if not flags.get(required):
                raise RecipeError(f"{where}: no {required} (set 'model' / data.prepared or openrlhf.{required})")
        level = flags.get("algo.advantage.is_correction_level", "off")
        if level != "off":
            raise RecipeError(
                f"{where}: openrlhf.algo.advantage.is_correction_level must be off: the executor returns no "
                "rollout log-probs because SAAR replaces spans sampled under another context (see docs/training.md)"
            )
        if flags.get("data.apply_chat_template"):
            raise RecipeError(
                f"{where}: openrlhf.data.apply_chat_template must be false: the executor renders the "
                "chat itself, with the same template rendering as evaluation"
            )
        return ["-m", "openrlhf.cli.train_ppo_ray", *flag_args(flags, where)]

    def command(self) -> list[str]:
        """The full command: a Ray job submission when ``ray.submit`` (default), else a local run."""
        train = ["python3", *self.train_args()]
        env = {CONFIG_ENV: self.executor.to_json()}
        if not self.ray.get("submit", True):
            return ["env", f"{CONFIG_ENV}={env[CONFIG_ENV]}", *train]
        runtime = {"working_dir": str(self.ray.get("working_dir", ".")), "env_vars": env}
        return [
            "ray", "job", "submit",
            "--address", str(self.ray.get("address", "http://127.0.0.1:8265")),
            "--runtime-env-json", json.dumps(runtime, sort_keys=True),
            "--", *train,
        ]  # fmt: skip

    def shell(self) -> str:
        return shlex.join(self.command())


def _section(data: dict[str, Any], key: str, where: str, known: set[str] | None = None) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise RecipeError(f"{where}: '{key}' must be a mapping, got {type(value).__name__}")
    if known is not None and (unknown := set(value) - known):
        raise RecipeError(f"{where}: unknown keys in '{key}': {sorted(unknown)}; known: {sorted(known)}")
    return value


def load_recipe(path: str | Path, *, check_files: bool = True) -> Recipe:
    """Read and validate a recipe file (a path, or a name under ``trainers/recipes``)."""
    p = Path(path)
    if not p.exists() and (RECIPES / f"{path}.yaml").exists():
        p = RECIPES / f"{path}.yaml"
    if not p.is_file():
        shipped = sorted(x.stem for x in RECIPES.glob("*.yaml"))
        raise RecipeError(f"recipe {path}: no such file (recipes shipped: {shipped})")
    where = str(p)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RecipeError(f"{where}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise RecipeError(f"{where}: a recipe is a mapping of {sorted(TOP_KEYS)}")
    if unknown := set(data) - TOP_KEYS:
        raise RecipeError(f"{where}: unknown top-level keys {sorted(unknown)}; known: {sorted(TOP_KEYS)}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise RecipeError(f"{where}: 'name' must be a non-empty string")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise RecipeError(f"{where}: 'model' must be a string (hub id or path)")
    executor_data = _section(data, "executor", where)
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
        cpu=_section(data, "cpu", where),
    )
    if check_files:
        for key in ("train.agent_func_path",):
            if key in recipe.openrlhf and not Path(recipe.openrlhf[key]).is_file():
                raise RecipeError(f"{where}: openrlhf.{key}: file {recipe.openrlhf[key]} does not exist")
        model_path = recipe.model or ""
        if model_path.startswith((".", "/")) and not Path(model_path).exists():
            raise RecipeError(f"{where}: model {model_path} does not exist")
    if recipe.openrlhf:
        recipe.train_args()  # validate the flags now
    return recipe
