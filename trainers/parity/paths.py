"""The three rollout paths, one frozen model through each: the benchmark's Inspect task (:func:`run_inspect`),
the OpenRLHF agent executor (:func:`run_executor`) and the CPU trainer's rollout (:func:`run_cpu`); all three in
turn (:func:`run_paths`)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.benchmarks.problem import Problem
from harness.benchmarks.registry import TASKS_DIR
from harness.core.rollout import Trajectory
from harness.core.seeds import trajectory_seed
from trainers.parity.models import Asked, FrozenModel, frozen_model, profile_script
from trainers.parity.records import (
    ParityError,
    PathRun,
    SampleRecord,
    count_record,
    message_record,
    summary_record,
)


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

    frozen = frozen_model(model)
    task_file = TASKS_DIR / f"{task}.py"
    if not task_file.is_file():
        raise ParityError(f"no task {task!r}: {task_file} does not exist (name the benchmark with --task)")
    name, model_args, options = frozen.inspect(tool_env)
    args = {"data": "fixture", "sandbox": "local", "saar": True, "saar_prob": 1.0, "tool_env": tool_env}
    args |= {"judge": judge, "seed": seed, **model_args}  # the model's arguments last (its data, its budgets)
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(TASKS_DIR.parent)  # Inspect resolves a task file relative to the working directory
        try:
            [log] = inspect_eval(
                f"{TASKS_DIR.name}/{task}.py",
                model=name,
                task_args=args,
                log_dir=log_dir or tmp,
                display="none",
                **options,
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
    from trainers.core.data import label  # noqa: PLC0415
    from trainers.openrlhf_plugin.executor import AgentExecutor  # noqa: PLC0415

    frozen = frozen_model(model)
    tok = tokenizer or load_tokenizer()
    executor = AgentExecutor(frozen.executor_config(tool_env, judge, seed), backend=_Backend())
    run = PathRun("executor", tool_env)
    for item in problems:
        engine = frozen.engine(tok)
        result, traj = await executor.run(
            item.prompt, label(item), frozen.sampling_params(), frozen.max_length, tok, engine
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

    frozen = frozen_model(model)
    tok = tokenizer or load_tokenizer()
    judge_cfg = frozen.executor_config(tool_env, judge, seed)
    cfg = frozen.cpu_config()
    backend, run = _Backend(), PathRun("cpu", tool_env)
    for item in problems:
        sampler = frozen.sampler(tok)
        traj_seed = trajectory_seed(seed, item.id, 1)
        rcfg = judge_cfg.rollout_config()
        record = await run_one(item, sampler, backend, rcfg, cfg, traj_seed, judge=judge_cfg)
        run.samples[item.id] = trajectory_record(record.traj, record.correct, record.reward, sampler)
    return run


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
    """The three paths on ``task``'s fixture with the frozen model (a replay script's path: that script, as the
    model writes it under ``tool_env``: :func:`~trainers.parity.models.profile_script`) under ``tool_env`` (the
    Inspect run gives the problems; its eval log is kept in ``log_dir`` when given)."""
    from harness.core.chat import end_of_turn  # noqa: PLC0415
    from trainers.core._compat import load_tokenizer  # noqa: PLC0415

    tok = tokenizer or load_tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        if isinstance(model, Path):
            model = profile_script(model, tool_env, end_of_turn(tok), Path(tmp))
        inspect_run, problems = run_inspect(task, model, tool_env, judge=judge, seed=seed, log_dir=log_dir)

        async def trainers() -> list[PathRun]:
            return [
                await run_executor(problems, model, tool_env, judge=judge, seed=seed, tokenizer=tok),
                await run_cpu(problems, model, tool_env, judge=judge, seed=seed, tokenizer=tok),
            ]

        return [inspect_run, *asyncio.run(trainers())]
