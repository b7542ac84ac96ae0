"""One frozen model through the three rollout paths, compared: `python -m trainers parity --script <replay.yaml>`.

A replay script (:mod:`harness.engines.replay`) is the frozen model. The same problems (a benchmark's
fixture) and the same run seed go through

* ``inspect``: the benchmark's Inspect task (``tasks/<name>.py``, :mod:`harness.evals.solver`) with
  ``--model replay/<script>``, read back from its real eval log;
* ``executor``: the OpenRLHF agent executor (:class:`trainers.openrlhf_plugin.executor.AgentExecutor`), its
  engine a stand-in for OpenRLHF's vLLM actor that answers the script's turns as the tokenizer's ids;
* ``cpu``: the CPU trainer's rollout (:func:`trainers.cpu.rollouts.run_one`), its policy a stand-in sampler
  that answers the same ids;

each under one tool environment (``project`` or ``reference``), programs in the local sandbox.

What is compared (:class:`SampleRecord`), per problem: every message of the purified trajectory as
``(role, text)``, an assistant turn's text being its reasoning and its call as the harness writes it (the
form an Inspect log keeps; the token paths decode the same text from ids), a tool result with its ``ok`` and
error kind; the SAAR events without their token counts (a replay turn counts words on Inspect, tokens on the
token paths); the trajectory's stop reason, SAAR draw, turns, calls, failures and error kinds; the answer; the
verdict (the Inspect scorer's accuracy, the trainers' ``correct``); the seed each generation was asked with;
and, between the two trainer paths only, the reward (Inspect computes none) and each generation's context as the
engine got it, decoded (the rendered prompt, tool schema included: Inspect hands a provider messages, not ids).
:func:`first_difference` names the first field where
two paths part.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.core.messages import Message
from harness.core.rollout import Trajectory
from harness.core.saar import SaarConfig
from harness.core.seeds import trajectory_seed
from harness.core.toolenv import PROFILES, get_tool_env
from harness.engines.replay import ReplayScript

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
JUDGES = ("lenient", "reference")


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


@dataclass(frozen=True)
class PathRun:
    """Every problem's :class:`SampleRecord` on one path, by sample id."""

    path: str
    tool_env: str
    samples: dict[str, SampleRecord] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    """A problem as the paths share it: the Inspect sample's id, prompt, target and kind."""

    id: str
    prompt: str
    target: str
    kind: str


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


def trajectory_record(traj: Trajectory, correct: bool, reward: float, replay: ReplayTokens) -> SampleRecord:
    """A trainer path's trajectory in the compared form, with what its stand-in model was asked."""
    summary, events = summary_record(traj.summary())
    messages = [message_record(m) for m in traj.messages]
    return SampleRecord(messages, events, summary, traj.final_text, correct, reward, replay.seeds, replay.contexts)


# --- the Inspect path ---------------------------------------------------------------------------------------------


def run_inspect(
    task: str, script: Path, tool_env: str, *, judge: str = "lenient", seed: int = 0, log_dir: str | None = None
) -> tuple[PathRun, list[Problem]]:
    """The benchmark's Inspect task on its fixture with the replay model; the run and the problems it ran."""
    from inspect_ai import eval as inspect_eval  # noqa: PLC0415
    from inspect_ai.event import ModelEvent  # noqa: PLC0415
    from inspect_ai.log import read_eval_log  # noqa: PLC0415

    from harness.evals.convert import from_inspect  # noqa: PLC0415

    task_file = ROOT / "tasks" / f"{task}.py"
    if not task_file.is_file():
        raise ParityError(f"no task {task!r}: {task_file} does not exist (name the benchmark with --task)")
    args = {"data": "fixture", "sandbox": "local", "saar": True, "saar_prob": 1.0, "tool_env": tool_env}
    args |= {"judge": judge, "seed": seed}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(ROOT)  # Inspect resolves a task file relative to the working directory
        try:
            [log] = inspect_eval(
                f"tasks/{task}.py", model=f"replay/{script}", task_args=args, log_dir=log_dir or tmp, display="none"
            )
        finally:
            os.chdir(cwd)
        log = read_eval_log(log.location)  # the whole log as written, samples included
    if log.status != "success" or not log.samples:
        raise ParityError(f"the Inspect eval of {task} did not finish: {log.status} {log.error}")
    run, problems = PathRun("inspect", tool_env), []
    for sample in sorted(log.samples, key=lambda s: str(s.id)):
        if sample.error is not None:
            raise ParityError(f"Inspect sample {sample.id}: {sample.error.message}")
        kind = (sample.metadata or {}).get("kind")
        if kind == "code":
            raise ParityError(f"{task}: code problems are not compared (their tests are kept out of the eval log)")
        problems.append(Problem(str(sample.id), str(sample.input), str(sample.target), kind))
        # a tool result's outcome travels in the Inspect message's metadata
        pairs = zip(sample.messages, from_inspect(sample.messages), strict=True)
        messages = [message_record(m, (im.metadata or {}) if m.role == "tool" else None) for im, m in pairs]
        summary, events = summary_record(sample.metadata["trajectory"])
        [score] = (sample.scores or {}).values()
        assert isinstance(score.value, dict)
        seeds = [e.config.seed for e in sample.events if isinstance(e, ModelEvent)]
        run.samples[str(sample.id)] = SampleRecord(
            messages, events, summary, sample.output.completion, score.value["accuracy"] == 1.0, None, seeds
        )
    return run, problems


# --- the token paths: the replay script as token ids --------------------------------------------------------------


class ReplayTokens:
    """The replay script's next turn for one rollout, as the tokenizer's ids (end of turn appended when the turn
    was not cut); the sample is the script entry whose ``match`` the decoded context holds."""

    def __init__(self, script: ReplayScript, tokenizer: Any) -> None:
        self.script, self.tokenizer = script, tokenizer
        self.calls = 0
        self.seeds: list[int | None] = []
        self.contexts: list[str] = []

    def next(self, context_ids: list[int], seed: int | None) -> tuple[list[int], bool]:
        context = self.tokenizer.decode(context_ids, skip_special_tokens=False)
        self.seeds.append(seed)
        self.contexts.append(context)
        gen = self.script.generation(context, self.calls)
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

    return [TrainItem(p.id, p.prompt, p.target, p.kind) for p in problems]  # type: ignore[arg-type]


async def run_executor(
    problems: Sequence[Problem], script: Path, tool_env: str, *, judge: str = "lenient", tokenizer: Any = None
) -> PathRun:
    """The problems through the OpenRLHF executor, the replay script as its engine."""
    from trainers.core._compat import load_tokenizer  # noqa: PLC0415
    from trainers.openrlhf_plugin.executor import AgentExecutor  # noqa: PLC0415

    tok = tokenizer or load_tokenizer()
    replay = ReplayScript.load(script)
    executor = AgentExecutor(executor_config(tool_env, judge), backend=_Backend())
    run = PathRun("executor", tool_env)
    for item in _items(problems):
        engine = ReplayEngine(replay, tok)
        params = SimpleNamespace(max_tokens=None, logprobs=None, seed=None)  # stand-in for vllm.SamplingParams
        result, traj = await executor.run(item.prompt, item.label(), params, 1 << 20, tok, engine)
        correct = bool(result["extra_logs"]["correct"])
        run.samples[item.id] = trajectory_record(traj, correct, result["reward"], engine)
    return run


async def run_cpu(
    problems: Sequence[Problem],
    script: Path,
    tool_env: str,
    *,
    judge: str = "lenient",
    seed: int = 0,
    tokenizer: Any = None,
) -> PathRun:
    """The problems through the CPU trainer's rollout, the replay script as its policy; each trajectory seeded as
    the Inspect task seeds its (sample, epoch 1)."""
    from trainers.core._compat import load_tokenizer  # noqa: PLC0415
    from trainers.core.config import CpuConfig  # noqa: PLC0415
    from trainers.cpu.rollouts import run_one  # noqa: PLC0415

    tok = tokenizer or load_tokenizer()
    replay = ReplayScript.load(script)
    judge_cfg = executor_config(tool_env, judge)
    cfg = CpuConfig(max_total_tokens=1 << 20)
    backend, run = _Backend(), PathRun("cpu", tool_env)
    for item in _items(problems):
        sampler = ReplaySampler(replay, tok)
        traj_seed = trajectory_seed(seed, item.id, 1)
        rcfg = judge_cfg.rollout_config()
        record = await run_one(item, sampler, backend, rcfg, cfg, traj_seed, judge=judge_cfg)  # type: ignore[arg-type]
        run.samples[item.id] = trajectory_record(record.traj, record.correct, record.reward, sampler)
    return run


# --- comparing -----------------------------------------------------------------------------------------------------


def first_difference(a: PathRun, b: PathRun, *, seeds: bool = True) -> str | None:
    """Where ``b`` first departs from ``a`` (sample, field, both values), or None when they agree.

    Fields are compared in the order a rollout meets them: the prompt (the first context), the messages, the SAAR
    events and the rest. A reward and the contexts are compared only where both paths have them; ``seeds=False``
    leaves the generation seeds out.
    """
    if sorted(a.samples) != sorted(b.samples):
        return f"samples: {a.path} ran {sorted(a.samples)}, {b.path} ran {sorted(b.samples)}"
    for sid in sorted(a.samples):
        x, y = _compared(a.samples[sid], seeds), _compared(b.samples[sid], seeds)
        for key in ("reward", "prompt", "contexts"):
            if x.get(key) is None or y.get(key) is None:
                x.pop(key, None), y.pop(key, None)
        if (where := _diff(x, y, "")) is not None:
            name, left, right = where
            return f"sample {sid}, {name}: {a.path} {left!r} vs {b.path} {right!r}"
    return None


def _compared(record: SampleRecord, seeds: bool) -> dict[str, Any]:
    """``record``'s fields in the order :func:`first_difference` compares them (``prompt``: the first context)."""
    fields = asdict(record)
    contexts = fields.pop("contexts")
    if not seeds:
        del fields["seeds"]
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
    task: str, script: Path, tool_env: str, *, judge: str = "lenient", seed: int = 0, log_dir: str | None = None
) -> list[PathRun]:
    """The three paths on ``task``'s fixture with ``script`` under ``tool_env`` (the Inspect run gives the problems;
    its eval log is kept in ``log_dir`` when given)."""
    inspect_run, problems = run_inspect(task, script, tool_env, judge=judge, seed=seed, log_dir=log_dir)
    from trainers.core._compat import load_tokenizer  # noqa: PLC0415

    tok = load_tokenizer()

    async def trainers() -> list[PathRun]:
        return [
            await run_executor(problems, script, tool_env, judge=judge, tokenizer=tok),
            await run_cpu(problems, script, tool_env, judge=judge, seed=seed, tokenizer=tok),
        ]

    return [inspect_run, *asyncio.run(trainers())]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--script", required=True, help="a replay script: a path, or a bundled name (aime24.yaml)")
    parser.add_argument(
        "--task", default=None, help="the benchmark whose fixture runs (default: the script's name, e.g. aime24)"
    )
    parser.add_argument("--tool-env", default="project", choices=sorted(PROFILES), help="the tool environment")
    parser.add_argument("--judge", default="lenient", choices=JUDGES, help="the verdict and reward's judge")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed")
    parser.add_argument("--log-dir", default=None, help="keep the Inspect eval log there (default: not kept)")
    parser.add_argument(
        "--no-seeds", action="store_true", help="leave the seeds each generation was asked with out of the comparison"
    )


def main(args: argparse.Namespace) -> int:
    """Run the three paths and print, for each path against Inspect, ``same`` or where it first differs; 1 when
    any differs."""
    script = resolve_script(args.script)
    task = args.task or script.stem
    runs = run_paths(task, script, args.tool_env, judge=args.judge, seed=args.seed, log_dir=args.log_dir)
    n = len(runs[0].samples)
    print(f"{task} fixture, {n} samples, replay {script.name}, tool environment {args.tool_env}, judge {args.judge}")
    status = 0
    for other in runs[1:]:
        where = first_difference(runs[0], other, seeds=not args.no_seeds)
        print(f"inspect vs {other.path}: {'same' if where is None else 'differ at ' + where}")
        status |= where is not None
    return status
