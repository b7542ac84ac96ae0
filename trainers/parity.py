"""One frozen model through the three rollout paths, compared: `python -m trainers parity --script <replay.yaml>`.

The frozen model is a replay script (:mod:`harness.engines.replay`), or with ``--model warm`` the warm model on
vLLM in float32 (:class:`WarmModel`). The same problems (a benchmark's fixture, or a file) and the same run seed go
through

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
import asyncio
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.core.messages import Message
from harness.core.rollout import Trajectory
from harness.core.saar import SaarConfig
from harness.core.seeds import trajectory_seed
from harness.core.toolenv import PROFILES, get_tool_env
from harness.engines.replay import ReplayScript
from trainers.core.engine_sync import EngineSampler

ROOT = Path(__file__).resolve().parents[1]
REPLAY_DIR = ROOT / "harness" / "data" / "replay"
#: The SAAR events' fields that are compared (``tokens`` counts a replay turn differently per path).
EVENT_FIELDS = ("turn", "retry", "action", "error_kind", "similarity", "ok", "failed_code", "new_code")
#: The trajectory summary's fields that are compared.
SUMMARY_FIELDS = (
    "stop_reason",
    "saar_on",
    "assistant_turns",
    "tool_calls",
    "tool_failures",
    "failures_kept",
    "error_kinds",
)
#: The trajectory's token counts, compared where every path counts tokens (a real model; :class:`SampleRecord`).
COUNT_FIELDS = ("tokens_generated", "tokens_kept", "response_tokens")
JUDGES = ("lenient", "reference")
#: The frozen models: a replay script, or the warm model on vLLM (float32, its OpenAI server on loopback).
MODELS = ("replay", "warm")


class ParityError(ValueError):
    """A parity run cannot be made as asked (a script, task or option); the message says which."""


@dataclass(frozen=True)
class SampleRecord:
    """One problem's rollout on one path, in the normalized form every path can give (module docstring)."""

    messages: list[dict[str, Any]]
    saar_events: list[dict[str, Any]]
    summary: dict[str, Any]
    final_text: str
    correct: bool
    reward: float | None  #: the training reward (None on the Inspect path, which computes none)
    seeds: list[int | None]  #: the seed each generation was asked with, in order
    #: the token paths: each generation's context, decoded (the prompt as the model saw it; None on Inspect)
    contexts: list[str] | None = None
    #: the token counts the budgets read (:data:`COUNT_FIELDS`, each SAAR event's ``tokens``); None where a path
    #: counts otherwise (a replay turn counts words on Inspect)
    counts: dict[str, Any] | None = None


@dataclass(frozen=True)
class PathRun:
    """Every problem's :class:`SampleRecord` on one path, by sample id."""

    path: str
    tool_env: str
    samples: dict[str, SampleRecord] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    """A problem as the paths share it: the Inspect sample's id, prompt, target and kind; a code problem's tests
    and function name (:func:`code_tests`)."""

    id: str
    prompt: str
    target: str
    kind: str
    tests: list[dict[str, Any]] = field(default_factory=list)
    fn_name: str | None = None


def resolve_script(script: str | Path) -> Path:
    """A replay script by path, or a bundled one by name (as ``--model replay/<name>`` finds it)."""
    path = Path(script)
    if path.is_file():
        return path.resolve()
    if (REPLAY_DIR / path).is_file():
        return REPLAY_DIR / path
    raise ParityError(f"replay script {script} not found (nor in {REPLAY_DIR})")


def message_record(m: Message, outcome: dict[str, Any] | None = None) -> dict[str, Any]:
    """A message in the compared form: role and text; a tool result with its ``ok`` and error kind, from
    ``outcome`` when given (an Inspect message's metadata), else from the message's own."""
    record: dict[str, Any] = {"role": m.role, "text": m.text}
    if m.role == "tool":
        meta = m.meta if outcome is None else outcome
        record |= {"ok": meta.get("ok", True), "error_kind": meta.get("error_kind")}
    return record


def summary_record(summary: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The compared part of a trajectory summary (:meth:`harness.core.rollout.Trajectory.summary`) and its events."""
    events = [{k: e.get(k) for k in EVENT_FIELDS} for e in summary["saar_events"]]
    return {k: summary[k] for k in SUMMARY_FIELDS}, events


def count_record(summary: dict[str, Any], turn_tokens: list[int | None]) -> dict[str, Any]:
    """A trajectory's token counts: :data:`COUNT_FIELDS` of its summary, each assistant turn's generated tokens
    (``turn_tokens``, in order) and each SAAR event's."""
    return {
        **{k: summary[k] for k in COUNT_FIELDS},
        "turn_tokens": turn_tokens,
        "event_tokens": [e["tokens"] for e in summary["saar_events"]],
    }


def trajectory_record(traj: Trajectory, correct: bool, reward: float, asked: Asked) -> SampleRecord:
    """A trainer path's trajectory in the compared form, with what its model was asked."""
    summary = traj.summary()
    compared, events = summary_record(summary)
    messages = [message_record(m) for m in traj.messages]
    return SampleRecord(
        messages,
        events,
        compared,
        traj.final_text,
        correct,
        reward,
        asked.seeds,
        asked.contexts,
        count_record(summary, [m.tokens for m in traj.messages if m.role == "assistant"]),
    )


# --- the frozen models ----------------------------------------------------------------------------------------------


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
        self.stop_token_ids = tuple(chat.stop_token_ids(tokenizer))

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
        self.stop_token_ids = tuple(chat.stop_token_ids(tokenizer))
        self.stop_strings = tuple(s for s in chat.stop_strings(tokenizer) if s not in tokenizer.get_vocab())
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


def _frozen(model: Path | FrozenModel) -> FrozenModel:
    """The frozen model; a replay script's path: that script."""
    return ReplayModel(model) if isinstance(model, Path) else model


# --- the Inspect path ---------------------------------------------------------------------------------------------


def code_tests(task: str, data: str) -> dict[str, tuple[list[dict[str, Any]], str | None]]:
    """Every code problem's graded tests (public, then private) and function name, by id, from the task's own loader
    on ``data``: the eval log keeps them out of its samples (the tests are the benchmark's hidden answers)."""
    from harness.benchmarks.lcb import problem_tests  # noqa: PLC0415
    from harness.benchmarks.registry import benchmark  # noqa: PLC0415

    problems = benchmark(task).loader(data)
    return {p.id: (problem_tests(p.metadata, where=p.id), p.metadata.get("fn_name")) for p in problems}


def run_inspect(
    task: str,
    model: Path | FrozenModel,
    tool_env: str,
    *,
    judge: str = "lenient",
    seed: int = 0,
    log_dir: str | None = None,
) -> tuple[PathRun, list[Problem]]:
    """The benchmark's Inspect task on its fixture with the frozen model (a replay script's path: that script); the
    run and the problems it ran."""
    from inspect_ai import eval as inspect_eval  # noqa: PLC0415
    from inspect_ai.event import ModelEvent  # noqa: PLC0415
    from inspect_ai.log import read_eval_log  # noqa: PLC0415

    from harness.evals.convert import from_inspect  # noqa: PLC0415

    frozen = _frozen(model)
    task_file = ROOT / "tasks" / f"{task}.py"
    if not task_file.is_file():
        raise ParityError(f"no task {task!r}: {task_file} does not exist (name the benchmark with --task)")
    name, model_args, options = frozen.inspect(tool_env)
    args = {"data": "fixture", "sandbox": "local", "saar": True, "saar_prob": 1.0, "tool_env": tool_env}
    args |= {"judge": judge, "seed": seed, **model_args}  # the model's arguments last (its data, its budgets)
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(ROOT)  # Inspect resolves a task file relative to the working directory
        try:
            [log] = inspect_eval(
                f"tasks/{task}.py", model=name, task_args=args, log_dir=log_dir or tmp, display="none", **options
            )
        finally:
            os.chdir(cwd)
        log = read_eval_log(log.location)  # the whole log as written, samples included
    if log.status != "success" or not log.samples:
        raise ParityError(f"the Inspect eval of {task} did not finish: {log.status} {log.error}")
    run, problems = PathRun("inspect", tool_env), []
    tests: dict[str, tuple[list[dict[str, Any]], str | None]] = {}
    for sample in sorted(log.samples, key=lambda s: str(s.id)):
        if sample.error is not None:
            raise ParityError(f"Inspect sample {sample.id}: {sample.error.message}")
        kind = (sample.metadata or {}).get("kind")
        problem = Problem(str(sample.id), str(sample.input), str(sample.target), kind)
        if kind == "code":
            tests = tests or code_tests(task, args["data"])
            if problem.id not in tests:
                raise ParityError(
                    f"{task}: code problem {problem.id} is not among the task's problems on {args['data']}"
                )
            problem = replace(problem, tests=tests[problem.id][0], fn_name=tests[problem.id][1])
        problems.append(problem)
        # a tool result's outcome travels in the Inspect message's metadata
        pairs = zip(sample.messages, from_inspect(sample.messages), strict=True)
        messages = [message_record(m, (im.metadata or {}) if m.role == "tool" else None) for im, m in pairs]
        trajectory = sample.metadata["trajectory"]
        summary, events = summary_record(trajectory)
        [score] = (sample.scores or {}).values()
        assert isinstance(score.value, dict)
        seeds = [e.config.seed for e in sample.events if isinstance(e, ModelEvent)]
        correct = score.value["accuracy"] == 1.0
        turns = [(m.metadata or {}).get("tokens") for m in sample.messages if m.role == "assistant"]
        counts = count_record(trajectory, turns) if frozen.counts_tokens else None
        run.samples[str(sample.id)] = SampleRecord(
            messages, events, summary, sample.output.completion, correct, None, seeds, counts=counts
        )
    return run, problems


# --- the token paths ---------------------------------------------------------------------------------------------


class _Backend:
    """One local sandbox as a backend (acquire/release), shared by a path's rollouts."""

    def __init__(self) -> None:
        from sandboxes.local.sandbox import LocalSandbox  # noqa: PLC0415

        self.sandbox = LocalSandbox()

    async def acquire(self) -> Any:
        return self.sandbox

    async def release(self, sandbox: Any) -> None:
        return None


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


def _items(problems: Sequence[Problem]) -> list[Any]:
    from trainers.core.data import TrainItem  # noqa: PLC0415

    return [TrainItem(p.id, p.prompt, p.target, p.kind, p.tests, p.fn_name) for p in problems]  # type: ignore[arg-type]


async def run_executor(
    problems: Sequence[Problem],
    model: Path | FrozenModel,
    tool_env: str,
    *,
    judge: str = "lenient",
    seed: int = 0,
    tokenizer: Any = None,
) -> PathRun:
    """The problems through the OpenRLHF executor, the frozen model (a replay script's path: that script) its
    engine."""
    from trainers.core._compat import load_tokenizer  # noqa: PLC0415
    from trainers.openrlhf_plugin.executor import AgentExecutor  # noqa: PLC0415

    frozen = _frozen(model)
    tok = tokenizer or load_tokenizer()
    executor = AgentExecutor(frozen.executor_config(tool_env, judge, seed), backend=_Backend())
    run = PathRun("executor", tool_env)
    for item in _items(problems):
        engine = frozen.engine(tok)
        result, traj = await executor.run(
            item.prompt, item.label(), frozen.sampling_params(), frozen.max_length, tok, engine
        )
        correct = bool(result["extra_logs"]["correct"])
        run.samples[item.id] = trajectory_record(traj, correct, result["reward"], engine)
    return run


async def run_cpu(
    problems: Sequence[Problem],
    model: Path | FrozenModel,
    tool_env: str,
    *,
    judge: str = "lenient",
    seed: int = 0,
    tokenizer: Any = None,
) -> PathRun:
    """The problems through the CPU trainer's rollout, the frozen model (a replay script's path: that script) its
    policy; each trajectory seeded as the Inspect task seeds its (sample, epoch 1)."""
    from trainers.core._compat import load_tokenizer  # noqa: PLC0415
    from trainers.cpu.rollouts import run_one  # noqa: PLC0415

    frozen = _frozen(model)
    tok = tokenizer or load_tokenizer()
    judge_cfg = frozen.executor_config(tool_env, judge, seed)
    cfg = frozen.cpu_config()
    backend, run = _Backend(), PathRun("cpu", tool_env)
    for item in _items(problems):
        sampler = frozen.sampler(tok)
        traj_seed = trajectory_seed(seed, item.id, 1)
        rcfg = judge_cfg.rollout_config()
        record = await run_one(item, sampler, backend, rcfg, cfg, traj_seed, judge=judge_cfg)
        run.samples[item.id] = trajectory_record(record.traj, record.correct, record.reward, sampler)
    return run


# --- comparing -----------------------------------------------------------------------------------------------------


def first_difference(a: PathRun, b: PathRun, *, seeds: bool = True, counts: bool = True) -> str | None:
    """Where ``b`` first departs from ``a`` (sample, field, both values), or None when they agree.

    Fields are compared in the order a rollout meets them: the prompt (the first context), the messages, the SAAR
    events and the rest. A reward, the contexts and the token counts are compared only where both paths have them;
    ``seeds=False`` leaves the generation seeds out, ``counts=False`` the token counts.
    """
    if sorted(a.samples) != sorted(b.samples):
        return f"samples: {a.path} ran {sorted(a.samples)}, {b.path} ran {sorted(b.samples)}"
    for sid in sorted(a.samples):
        x, y = _compared(a.samples[sid], seeds, counts), _compared(b.samples[sid], seeds, counts)
        for key in ("reward", "prompt", "contexts", "counts"):
            if x.get(key) is None or y.get(key) is None:
                x.pop(key, None), y.pop(key, None)
        if (where := _diff(x, y, "")) is not None:
            name, left, right = where
            return f"sample {sid}, {name}: {a.path} {left!r} vs {b.path} {right!r}"
    return None


def _compared(record: SampleRecord, seeds: bool, counts: bool) -> dict[str, Any]:
    """``record``'s fields in the order :func:`first_difference` compares them (``prompt``: the first context)."""
    fields = asdict(record)
    contexts = fields.pop("contexts")
    if not seeds:
        del fields["seeds"]
    if not counts:
        del fields["counts"]
    return fields if contexts is None else {"prompt": contexts[0], **fields, "contexts": contexts}


def _diff(x: Any, y: Any, name: str) -> tuple[str, Any, Any] | None:
    if isinstance(x, dict) and isinstance(y, dict):
        for key in [*x, *(k for k in y if k not in x)]:
            if (d := _diff(x.get(key), y.get(key), f"{name}.{key}" if name else str(key))) is not None:
                return d
        return None
    if isinstance(x, list) and isinstance(y, list):
        for i, (u, v) in enumerate(zip(x, y, strict=False)):
            if (d := _diff(u, v, f"{name}[{i}]")) is not None:
                return d
        if len(x) != len(y):
            return f"{name} length", len(x), len(y)
        return None
    return None if x == y else (name, x, y)


def run_paths(
    task: str,
    model: Path | FrozenModel,
    tool_env: str,
    *,
    judge: str = "lenient",
    seed: int = 0,
    log_dir: str | None = None,
    tokenizer: Any = None,
) -> list[PathRun]:
    """The three paths on ``task``'s fixture with the frozen model (a replay script's path: that script) under
    ``tool_env`` (the Inspect run gives the problems; its eval log is kept in ``log_dir`` when given)."""
    inspect_run, problems = run_inspect(task, model, tool_env, judge=judge, seed=seed, log_dir=log_dir)
    from trainers.core._compat import load_tokenizer  # noqa: PLC0415

    tok = tokenizer or load_tokenizer()

    async def trainers() -> list[PathRun]:
        return [
            await run_executor(problems, model, tool_env, judge=judge, seed=seed, tokenizer=tok),
            await run_cpu(problems, model, tool_env, judge=judge, seed=seed, tokenizer=tok),
        ]

    return [inspect_run, *asyncio.run(trainers())]


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="replay",
        choices=MODELS,
        help="the frozen model: a replay script (--script), or the warm model on vLLM in float32 (its server on "
        "loopback, one engine for the three paths)",
    )
    parser.add_argument("--script", default=None, help="a replay script: a path, or a bundled name (aime24.yaml)")
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
    """Run the three paths under each tool environment and print, for each pair of paths, ``same`` or where
    it first differs; 1 when any differs."""
    if args.model == "replay":
        if args.script is None:
            raise ParityError("--model replay needs --script (a replay script)")
        script = resolve_script(args.script)
        task = args.task or script.stem
        status = 0
        for tool_env in args.tool_env:
            runs = run_paths(task, script, tool_env, judge=args.judge, seed=args.seed, log_dir=args.log_dir)
            status |= _report(task, f"replay {script.name}", tool_env, args.judge, runs, not args.no_seeds)
        return status
    if args.script is not None:
        raise ParityError("--script is the replay model's; --model warm runs the warm model")
    data = args.data if args.data == "fixture" else str(Path(args.data).resolve())
    settings = WarmSettings(args.limit, data, args.max_tokens, args.max_turns, args.budget)
    for tool_env in args.tool_env:
        settings.check(tool_env)
    task, status = args.task or "aime24", 0
    with warm_server() as server:
        print(f"vLLM ({WarmModel.dtype}) on {server.base_url}, started in {server.start_seconds:.0f} s", flush=True)
        model = WarmModel(server, settings)
        for tool_env in args.tool_env:
            runs = run_paths(task, model, tool_env, judge=args.judge, seed=args.seed, log_dir=args.log_dir)
            what = f"warm model on vLLM ({settings})"
            status |= _report(task, what, tool_env, args.judge, runs, not args.no_seeds)
    return status
