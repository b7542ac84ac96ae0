"""The frozen models the three paths share: a replay script (:class:`ReplayModel`) or the warm model on vLLM's
OpenAI server (:class:`WarmModel`, :func:`warm_server`), each as Inspect's provider, OpenRLHF's engine and the CPU
trainer's sampler; and the trainers' settings that match the Inspect task's (:func:`executor_config`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.core.saar import SaarConfig
from harness.core.toolenv import PROJECT, get_tool_env
from harness.engines.replay import ReplayScript
from trainers.core.engine_sync import EngineSampler
from trainers.parity.records import ParityError

ROOT = Path(__file__).resolve().parents[2]
REPLAY_DIR = ROOT / "harness" / "data" / "replay"
JUDGES = ("lenient", "reference")
#: The frozen models: a replay script, or the warm model on vLLM (float32, its OpenAI server on loopback).
MODELS = ("replay", "warm")
#: The check's own replay script, on the aime24 fixture: a call that runs, a failed call regenerated shallow and
#: deep, retries exhausted, a right and a wrong answer.
SAAR_SCRIPT = Path(__file__).with_name("aime24.yaml")


def resolve_script(script: str | Path) -> Path:
    """A replay script by path, or a bundled one by name (as ``--model replay/<name>`` finds it)."""
    path = Path(script)
    if path.is_file():
        return path.resolve()
    if (REPLAY_DIR / path).is_file():
        return REPLAY_DIR / path
    raise ParityError(f"replay script {script} not found (nor in {REPLAY_DIR})")


def profile_script(script: Path, tool_env: str, turn_end: str, directory: Path) -> Path:
    """``script`` as the model it stands for writes it under ``tool_env``: its calls of the project's tool name
    that environment's tool (the tool its prompt shows), and a script that names no end-of-turn token takes
    ``turn_end`` (the token paths' tokenizer's, so that the three paths run one model). Written into
    ``directory``; ``script`` itself when nothing changes."""
    env = get_tool_env(tool_env, "--tool-env")
    data = ReplayScript.load(script)  # checked as the paths will read it
    raw = json.loads(script.read_text()) if script.suffix == ".json" else _yaml(script)
    call, ours = f'"name": "{PROJECT.tool_name}"', f'"name": "{env.tool_name}"'

    def named(turn: Any) -> Any:
        if isinstance(turn, dict):
            return {**turn, "text": turn["text"].replace(call, ours)}
        return turn.replace(call, ours)

    changed = dict(raw)
    for key in ("samples", "default"):
        if key == "samples" and key in raw:
            changed[key] = [{**entry, "turns": [named(t) for t in entry["turns"]]} for entry in raw[key]]
        elif key in raw:
            changed[key] = [named(t) for t in raw[key]]
    if data.turn_end is None and env.spans_turn:
        changed["turn_end"] = turn_end
    if changed == raw:
        return script
    path = directory / f"{script.stem}-{env.name}.json"
    path.write_text(json.dumps(changed, indent=1))
    return path


def _yaml(path: Path) -> Any:
    import yaml  # noqa: PLC0415

    return yaml.safe_load(path.read_text())


@dataclass(frozen=True)
class WarmSettings:
    """What a warm-model run holds the same on every path: a few problems, short budgets, plain sampling."""

    limit: int = 2  #: problems, from the first
    #: the task's problems: its fixture, or a file of its schema (an absolute path: Inspect runs a task from tasks/)
    data: str = "fixture"
    max_tokens: int = 64  #: tokens per generation (Inspect's max_tokens, OpenRLHF's max_new_tokens, the CPU trainer's)
    max_turns: int = 3
    #: the ``reference`` tool environment's response budget (every response token, tool output included)
    budget: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0

    def check(self, tool_env: str) -> None:
        if self.budget is not None and not get_tool_env(tool_env, "--tool-env").counts_response:
            raise ParityError(
                f"--budget is a response budget, which only a tool environment that counts the response has; "
                f"{tool_env!r} does not (its trainers bound a trajectory by the engine's length, not a budget)"
            )


class Asked:
    """What a model was asked on a token path: each generation's seed and its context, decoded."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.seeds: list[int | None] = []
        self.contexts: list[str] = []

    def ask(self, context_ids: Sequence[int], seed: int | None) -> None:
        self.seeds.append(seed)
        self.contexts.append(self.tokenizer.decode(list(context_ids), skip_special_tokens=False))


class ReplayTokens(Asked):
    """The replay script's next turn for one rollout, as the tokenizer's ids (end of turn appended when the turn
    was not cut); the sample is the script entry whose ``match`` the decoded context holds."""

    def __init__(self, script: ReplayScript, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.script = script
        self.calls = 0

    def next(self, context_ids: list[int], seed: int | None) -> tuple[list[int], bool]:
        self.ask(context_ids, seed)
        gen = self.script.generation(self.contexts[-1], self.calls)
        self.calls += 1
        ids = list(self.tokenizer(gen.text, add_special_tokens=False)["input_ids"])
        return (ids, True) if gen.truncated else ([*ids, self.tokenizer.eos_token_id], False)


class ReplayEngine(ReplayTokens):
    """Stand-in for OpenRLHF's vLLM rollout actor (``generate(prompt_token_ids, sampling_params)``)."""

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        ids, truncated = self.next(list(prompt_token_ids), getattr(sampling_params, "seed", None))
        out = SimpleNamespace(token_ids=ids, finish_reason="length" if truncated else "stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


class ReplaySampler(ReplayTokens):
    """Stand-in for the CPU trainer's policy (:class:`trainers.cpu.rollouts.PolicySampler`)."""

    def __init__(self, script: ReplayScript, tokenizer: Any) -> None:
        from harness.core import chat  # noqa: PLC0415

        super().__init__(script, tokenizer)
        self.stop_token_ids = tuple(chat.stop_token_ids(tokenizer, at_call=False))

    async def __call__(self, context_ids: list[int], budget: int, seed: int | None) -> tuple[list[int], bool]:
        return self.next(context_ids, seed)


#: the keys of a vLLM ``SamplingParams`` a completions request carries (vLLM's own names)
_SAMPLING_KEYS = (
    "max_tokens",
    "min_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "stop_token_ids",
    "include_stop_str_in_output",
    "skip_special_tokens",
)


class ServedEngine(Asked):
    """vLLM's OpenAI server as a trainer's engine: ``generate(prompt_token_ids, sampling_params)`` (the method of
    OpenRLHF's rollout actor and of :class:`trainers.core.engine_sync.EngineSampler`) sends the ids and the
    ``SamplingParams`` as a completions request (ids in, ``return_token_ids``: ids out), so the three paths share
    one engine (one model load, one process)."""

    def __init__(self, base_url: str, model: str, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.url, self.model = f"{base_url}/completions", model

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        import json  # noqa: PLC0415
        import urllib.request  # noqa: PLC0415

        if getattr(sampling_params, "logprobs", None) is not None:
            raise ParityError("the parity check's served engine returns no log-probs")
        self.ask(prompt_token_ids, sampling_params.seed)
        body = {k: getattr(sampling_params, k) for k in _SAMPLING_KEYS}
        body |= {"model": self.model, "prompt": list(prompt_token_ids), "return_token_ids": True}
        request = urllib.request.Request(
            self.url, json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )

        def post() -> dict[str, Any]:
            with urllib.request.urlopen(request, timeout=600) as response:
                return json.loads(response.read())

        [choice] = (await asyncio.to_thread(post))["choices"]
        out = SimpleNamespace(
            token_ids=choice["token_ids"], text=choice["text"], finish_reason=choice["finish_reason"], logprobs=None
        )
        return SimpleNamespace(outputs=[out])


class ReplayModel:
    """A replay script as the frozen model (:mod:`harness.engines.replay`): Inspect's ``replay/`` provider, the
    script's turns as the tokenizer's ids on the token paths; its turns count words on Inspect."""

    counts_tokens = False
    max_length = 1 << 20

    def __init__(self, script: Path) -> None:
        self.script = script
        self.replay = ReplayScript.load(script)

    def inspect(self, tool_env: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """Inspect's model name, the task's arguments and eval options this model adds."""
        return f"replay/{self.script}", {}, {}

    def executor_config(self, tool_env: str, judge: str, seed: int) -> Any:
        return executor_config(tool_env, judge, seed)

    def engine(self, tokenizer: Any) -> ReplayEngine:
        return ReplayEngine(self.replay, tokenizer)

    def sampling_params(self) -> Any:
        return SimpleNamespace(max_tokens=None, logprobs=None, seed=None)  # stand-in for vllm.SamplingParams

    def sampler(self, tokenizer: Any) -> ReplaySampler:
        return ReplaySampler(self.replay, tokenizer)

    def cpu_config(self) -> Any:
        from trainers.core.config import CpuConfig  # noqa: PLC0415

        return CpuConfig(max_total_tokens=self.max_length)


class WarmModel:
    """The warm model on vLLM in float32, behind its OpenAI server on loopback (:class:`harness.engines.serve.Server`):
    Inspect's ``vllm/`` provider talks to it as a GPU user's eval does (the served chat template, the hermes
    tool parser), the trainers through :class:`ServedEngine` with OpenRLHF's sampling params and the CPU trainer's
    vLLM sampler (:class:`trainers.core.engine_sync.EngineSampler`)."""

    counts_tokens = True
    dtype = "float32"

    def __init__(self, server: Any, settings: WarmSettings) -> None:
        from harness.engines.serve import MAX_MODEL_LEN  # noqa: PLC0415

        self.server, self.settings = server, settings
        self.max_length = MAX_MODEL_LEN

    def inspect(self, tool_env: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
        s = self.settings
        args = {"max_tokens": s.max_tokens, "max_turns": s.max_turns, "temperature": s.temperature, "top_p": s.top_p}
        args |= {"tokenizer": str(self.server.model_dir), "data": s.data}
        if s.budget is not None:
            args["max_total_tokens"] = s.budget
        # one sample at a time, as the trainer paths run: a request's numbers do not depend on its batch
        options = {"model_base_url": self.server.base_url, "limit": s.limit, "max_samples": 1, "max_connections": 1}
        return f"vllm/{self.server.model}", args, options

    def executor_config(self, tool_env: str, judge: str, seed: int) -> Any:
        base = executor_config(tool_env, judge, seed)
        return replace(base, max_turns=self.settings.max_turns, max_new_tokens=self.settings.budget)

    def engine(self, tokenizer: Any) -> ServedEngine:
        return ServedEngine(self.server.base_url, self.server.model, tokenizer)

    def sampling_params(self) -> Any:
        """OpenRLHF's own (``samples_generator._dispatch_prompts_to_vllm``), rollout log-probs off."""
        from vllm import SamplingParams  # noqa: PLC0415

        s = self.settings
        return SamplingParams(
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=-1,
            max_tokens=s.max_tokens,
            min_tokens=1,
            skip_special_tokens=False,
            logprobs=None,
        )

    def sampler(self, tokenizer: Any) -> Any:
        return ServedSampler(self.engine(tokenizer), tokenizer, self.cpu_config())

    def cpu_config(self) -> Any:
        from trainers.core.config import CpuConfig  # noqa: PLC0415

        s = self.settings
        return CpuConfig(
            max_new_tokens=s.max_tokens,
            max_total_tokens=self.max_length,
            temperature=s.temperature,
            top_p=s.top_p,
            engine="vllm",
            engine_dtype=self.dtype,
        )


class ServedSampler(EngineSampler):
    """The CPU trainer's vLLM sampler (its ``__call__``: the sampling params it builds), its engine the server."""

    def __init__(self, engine: ServedEngine, tokenizer: Any, cfg: Any) -> None:  # no engine of its own
        from harness.core import chat  # noqa: PLC0415

        self.served, self.tokenizer, self.cfg, self.dtype = engine, tokenizer, cfg, cfg.engine_dtype
        self.stop_token_ids = tuple(chat.stop_token_ids(tokenizer, at_call=False))
        self.requests = 0

    @property
    def seeds(self) -> list[int | None]:
        return self.served.seeds

    @property
    def contexts(self) -> list[str]:
        return self.served.contexts

    async def generate(self, ids: list[int], params: Any) -> Any:
        return await self.served.generate(ids, params)


FrozenModel = ReplayModel | WarmModel


def frozen_model(model: Path | FrozenModel) -> FrozenModel:
    """The frozen model; a replay script's path: that script."""
    return ReplayModel(model) if isinstance(model, Path) else model


def executor_config(tool_env: str, judge: str, seed: int = 0) -> Any:
    """The trainers' settings that match the Inspect task's arguments of :func:`run_inspect`."""
    from trainers.core.config import ExecutorConfig  # noqa: PLC0415

    if judge not in JUDGES:
        raise ParityError(f"judge must be one of {', '.join(JUDGES)}, got {judge!r}")
    env = get_tool_env(tool_env, "--tool-env")
    saar = SaarConfig(enabled=True, prob=1.0, similarity=env.similarity)
    lenient = judge == "lenient"
    return ExecutorConfig(
        saar=saar, tool_env=env.name, sandbox="local", lenient_reward=lenient, reward_on_response=not lenient, seed=seed
    )


def warm_server() -> Any:
    """vLLM's OpenAI server on the warm model in float32 (:class:`harness.engines.serve.Server`), not started.

    Without prefix caching, as OpenRLHF builds its engines (``create_vllm_engines``): a request's prompt is then
    computed whole, so its numbers depend on its tokens alone, not on which path met the prompt first and left part
    of it in the cache (a prompt computed in two parts rounds otherwise).
    """
    from harness.engines.serve import Server  # noqa: PLC0415

    server = Server("smollm2-tools", dtype=WarmModel.dtype)
    server.argv.append("--no-enable-prefix-caching")
    return server
