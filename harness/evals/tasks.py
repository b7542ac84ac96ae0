"""The benchmark tasks: their arguments, defined once, and the one builder every ``tasks/<name>.py`` calls.

A task's arguments are :class:`TaskOptions`' fields: a preset name, the protocol settings
(:class:`harness.benchmarks.presets.EvalProtocol`; ``None`` means "the preset's, or the default"), where it
runs (data, sandbox, seed) and how it is measured; a benchmark may add arguments of its own (its
:class:`~harness.benchmarks.registry.Benchmark` entry's). :data:`ARGUMENT_DOCS` says what each means.

A task file is a few lines: ``@task`` over a function decorated with :func:`task_arguments`, which gives it
the benchmark's signature (what Inspect reads for ``-T``) and docstring, and whose body returns
:func:`registered_task`. :func:`benchmark_task` resolves the protocol for the task's problem kind and records
it, with the preset's name, in the task's metadata (so in every eval log).
"""

from __future__ import annotations

import inspect
import signal
import threading
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, TypeVar

from inspect_ai import Epochs, Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import Scorer, ScoreReducer
from inspect_ai.util import SandboxEnvironmentSpec

from harness.benchmarks.datasets import Problem
from harness.benchmarks.presets import PROTOCOL_ARGUMENTS, EvalProtocol, Judge, resolve
from harness.benchmarks.registry import Benchmark, benchmark
from harness.core.kinds import Kind
from harness.core.prompts import PromptTemplates, load_prompt_templates
from harness.core.saar import Similarity
from harness.evals.concurrency import METADATA_KEY, Concurrency, preset_concurrency
from harness.evals.scorers import code_scorer, gpqa_scorer, math_scorer
from harness.evals.solver import saar_agent
from harness.evals.tokenizers import check_tokenizer
from harness.reports.card import protocol_card
from sandboxes.backends import resolve_backend_name
from sandboxes.inspect_provider import CleanerSandboxConfig, expect_sandboxes, sandbox_metadata

SandboxName = Literal["auto", "local", "docker"]


@dataclass(frozen=True)
class TaskOptions:
    """The arguments every benchmark task takes (``-T name=value``), in the tasks' signature order.

    ``None``: the preset's value, or the default. What each means: :data:`ARGUMENT_DOCS`. The protocol
    settings among them are :data:`harness.benchmarks.presets.PROTOCOL_ARGUMENTS`, in the same order.
    """

    preset: str | None = None
    saar: bool | None = None
    saar_prob: float | None = None
    gamma: float | None = None
    similarity: Similarity | None = None
    max_retries: int | None = None
    max_turns: int | None = None
    max_total_tokens: int | None = None
    timeout: float | None = None
    output_chars: int | None = None
    epochs: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    sandbox: SandboxName = "auto"
    data: str | None = None
    seed: int = 0
    share_prefix: str | None = None
    tool_env: str | None = None
    judge: Judge | None = None
    prompt_template: str | None = None
    tokenizer: str | None = None

    @classmethod
    def of(cls, args: Mapping[str, Any]) -> TaskOptions:
        """The options among a task function's arguments (its ``locals()``); the rest are the task's own."""
        return cls(**{f.name: args[f.name] for f in fields(cls) if f.name in args})

    def protocol(self, kind: Kind) -> EvalProtocol:
        given = {k: v for k, v in asdict(self).items() if k in PROTOCOL_ARGUMENTS}
        return resolve(self.preset, kind, **given)

    def templates(self) -> PromptTemplates:
        """The prompt templates, loaded (and checked) now: a bad file fails before any sample runs."""
        return load_prompt_templates(self.prompt_template)


#: What each of :class:`TaskOptions` means, in its order: the Args of every task's docstring. README.md's table of
#: task arguments lists the same names (tests/test_task_arguments.py checks that every list agrees).
ARGUMENT_DOCS: dict[str, str] = {
    "preset": 'a named protocol ("cleaner-paper", "cleaner-paper-7b": the authors\' 4B and 7B evaluations).',
    "saar": "SAAR (rollback) at inference. Unset: the preset's choice, else off.",
    "saar_prob": "the probability that SAAR is on for a trajectory (paper: 1.0).",
    "gamma": "SAAR's similarity threshold: at or above it a shallow replacement, below it a deep one (paper: 0.5).",
    "similarity": 'what SAAR compares, "code" (the two programs) or "call" (the calls as written). Unset: the '
    "tool environment's.",
    "max_retries": "SAAR's regenerations per failed call (paper: 3).",
    "max_turns": "assistant turns per trajectory.",
    "max_total_tokens": "the response budget in tokens, counted as the tool environment says.",
    "timeout": "seconds per tool call. Unset: the tool environment's.",
    "output_chars": "characters of tool output shown to the model. Unset: the tool environment's.",
    "epochs": "samples per problem: pass@1 is their mean, pass@k for k = epochs is reported too.",
    "temperature": "the sampling temperature.",
    "top_p": "the sampling's nucleus mass.",
    "max_tokens": "tokens per generation. Unset: the provider's default.",
    "sandbox": 'where programs run ("auto", "local" or "docker").',
    "data": 'a local file or directory, or "fixture" (default: the hub). A relative path resolves against the task '
    "file's directory, tasks/ (Inspect runs a task from there).",
    "seed": "the run's seed: per-(sample, epoch) sampling seeds and the SAAR draw derive from it, the same in both "
    "SAAR arms (GPQA's choices are shuffled with it too).",
    "share_prefix": "an id shared by both SAAR arms of one run: the requests they have in common (before SAAR "
    "first acts) are generated once and read from Inspect's cache by the other arm.",
    "tool_env": 'the tool environment, "project" or "reference" (Open-CLEANER\'s). Unset: the preset\'s, else project.',
    "judge": 'the reported accuracy, "lenient" (equivalence; LiveCodeBench\'s official grader) or "reference" (the '
    "strict box, or code-judge's exact output, on the whole response; the lenient verdict beside it). Unset: the "
    "preset's, else lenient.",
    "prompt_template": 'a prompt template file (docs/benchmarks.md, "Prompts"); unset: the project\'s. A relative '
    "path resolves against tasks/.",
    "tokenizer": "what a response budget counts tool output with (hub id or path); unset: the model's own.",
}


def generate_config(protocol: EvalProtocol) -> GenerateConfig:
    """The sampling of a protocol (the reference's: temperature 1.0, top_p 0.6); CLI options override it."""
    return GenerateConfig(temperature=protocol.temperature, top_p=protocol.top_p, max_tokens=protocol.max_tokens)


#: Problem fields kept out of sample metadata (and so out of logs): the scorer holds them.
HEAVY_FIELDS = ("public_test_cases", "private_test_cases")


def to_samples(problems: Sequence[Problem]) -> MemoryDataset:
    samples = []
    for p in problems:
        metadata = {k: v for k, v in p.metadata.items() if k not in HEAVY_FIELDS}
        samples.append(Sample(id=p.id, input=p.prompt, target=p.target, metadata={"kind": p.kind, **metadata}))
    return MemoryDataset(samples)


def sandbox_spec(backend: str, concurrency: Concurrency | None = None) -> SandboxEnvironmentSpec:
    """The Inspect sandbox spec for ``-T sandbox=docker|local|auto`` (the project's ``cleaner`` provider), its pool
    sized to ``concurrency`` when given (for ``auto``, to the backend it resolves to now)."""
    if backend not in ("auto", "local", "docker"):
        raise ValueError(f"-T sandbox={backend!r}: choose 'auto', 'local' or 'docker'")
    options = concurrency.sandbox_options(resolve_backend_name(backend)) if concurrency else {}
    return SandboxEnvironmentSpec("cleaner", CleanerSandboxConfig(backend=backend, options=options))  # type: ignore[arg-type]


def problem_kind(problems: Sequence[Problem]) -> Kind:
    """The one problem kind of a task's problems."""
    kinds = sorted({p.kind for p in problems})
    if len(kinds) != 1:
        raise ValueError(f"a benchmark task needs problems of one kind, got {kinds or 'no problems'}")
    return kinds[0]  # type: ignore[return-value]


def epoch_reducers(epochs: int) -> list[str]:
    """The reducers of ``epochs`` samples per problem: pass@1 as their mean, and pass@k for k = ``epochs``."""
    return ["mean"] if epochs <= 1 else ["mean", f"pass_at_{epochs}"]


class BenchmarkTask(Task):
    """A task whose epoch reducers follow its epoch count, wherever the count comes from.

    Inspect replaces a task's count with ``inspect eval --epochs N`` (``eval(epochs=N)``) by
    assigning ``task.epochs`` and keeps the task's reducers unless ``--epochs-reducer`` is given.
    Fixed reducers would then be those of the task's own count (no pass@N, or a pass@k that
    Inspect refuses for fewer epochs); here they are computed from the count that runs
    (:func:`epoch_reducers`), and reducers set explicitly (the user's) are kept as they are.
    """

    @property  # type: ignore[override]
    def epochs_reducer(self) -> list[ScoreReducer] | None:
        given = self.__dict__.get("_given_reducers")
        if given is not None:
            return given
        count = self.epochs or 1
        cached = self.__dict__.get("_auto_reducers")
        if cached is None or cached[0] != count:
            cached = (count, Epochs(count, epoch_reducers(count)).reducer)
            self.__dict__["_auto_reducers"] = cached
        return cached[1]

    @epochs_reducer.setter
    def epochs_reducer(self, value: list[ScoreReducer] | None) -> None:
        self.__dict__["_given_reducers"] = value


#: Loads a task's problems with the given prompt templates.
LoadProblems = Callable[[PromptTemplates], Sequence[Problem]]
#: Makes a task's scorer for its problems and the protocol's judge.
MakeScorer = Callable[[Sequence[Problem], Judge], Scorer]


def benchmark_task(load: LoadProblems, scorer: MakeScorer, options: TaskOptions) -> Task:
    """A benchmark task: the shared rollout solver with the protocol of ``options``, a scorer, pass@1 over epochs
    and pass@k for k = the epochs that run (``-T epochs``, the preset's, or ``inspect eval --epochs``).

    Everything a bad argument can break (the tool environment, the judge, the prompt template file, the data,
    the tokenizer a response budget counts with) is loaded and checked here, before any sample runs; SIGTERM
    then ends the eval as Ctrl-C does (:func:`end_on_sigterm`). The log's task metadata records the resolved protocol,
    the whole tool environment (``tool_env``), the prompt templates' file and hash (``prompt_template``) and
    the protocol card (``card``: :mod:`harness.evals.card`). A task on docker records its pool's bound with the
    sandbox provider (:func:`sandboxes.inspect_provider.expect_sandboxes`), so that Inspect runs no more samples'
    sandboxes at once than the pool can give.
    """
    templates = options.templates()
    problems = load(templates)
    kind = problem_kind(problems)
    templates.require([kind])
    protocol = options.protocol(kind)
    concurrency = preset_concurrency(options.preset, len(problems) * protocol.epochs)
    sandbox = sandbox_spec(options.sandbox, concurrency)
    where = sandbox_metadata(sandbox.config)
    expect_sandboxes(where)  # a docker pool's bound becomes Inspect's limit on sandboxes at once
    config = generate_config(protocol)
    metadata: dict[str, Any] = {
        "preset": options.preset,
        "kind": kind,
        "protocol": protocol.to_dict(),
        "tool_env": protocol.env.to_dict(),
        "prompt_template": {"source": templates.source, "sha256": templates.sha256},
        "card": protocol_card(options.preset, kind, protocol, templates),
        "tokenizer": options.tokenizer,
        "seed": options.seed,
        "share_prefix": options.share_prefix,
        # the resolved switches, also at the top level (reports read "saar" from here)
        "saar": protocol.saar,
        "saar_prob": protocol.saar_prob,
        "gamma": protocol.gamma,
        "similarity": protocol.similarity,
        # where the programs run (backend, isolation), decided now as the sandbox provider will
        "sandbox": where,
        # samples at once (a preset's; None: Inspect's defaults), read by the idle-engine warning
        METADATA_KEY: concurrency.to_dict() if concurrency else None,
    }
    rollout_config = protocol.rollout_config(kind)
    if rollout_config.response_budget:
        check_tokenizer(options.tokenizer)  # no tokenizer to count with: the eval fails here, before any sample
    end_on_sigterm()
    solver = saar_agent(
        rollout_config,
        run_seed=options.seed,
        share_prefix=options.share_prefix,
        max_tokens=protocol.max_tokens,
        tokenizer=options.tokenizer,
    )
    return BenchmarkTask(
        dataset=to_samples(problems),
        solver=solver,
        scorer=scorer(problems, protocol.judge),
        sandbox=sandbox,
        config=config.merge(concurrency.generate_config()) if concurrency else config,
        epochs=Epochs(protocol.epochs),  # reducers: BenchmarkTask.epochs_reducer
        metadata=metadata,
    )


def end_on_sigterm() -> None:
    """Make SIGTERM end an eval as Ctrl-C does: Inspect cancels the samples and writes the log as cancelled.

    SIGTERM's default action kills the process with its log unfinished. Only where it still has that action
    (a handler someone installed decides for itself), and in the main thread, where handlers are set.
    """
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM as SIGINT: the SIGINT handler in place (asyncio's cancels the eval's main task, Python's raises
    KeyboardInterrupt), or a KeyboardInterrupt where SIGINT is ignored (a background job of a script)."""
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        raise KeyboardInterrupt
    handler(signal.SIGINT, frame)


#: The scorer of each problem kind, made for the problems and the protocol's judge.
SCORERS: dict[Kind, MakeScorer] = {
    "math": lambda problems, judge: math_scorer(judge=judge),
    "gpqa": lambda problems, judge: gpqa_scorer(judge=judge),
    "code": lambda problems, judge: code_scorer(problems, judge=judge),
}


def task_signature(bench: Benchmark) -> inspect.Signature:
    """The signature of ``bench``'s task: :class:`TaskOptions`' fields, with the benchmark's own arguments after
    ``data`` (they select among its data, as LiveCodeBench's window does)."""
    hints = typing.get_type_hints(TaskOptions)
    common = [
        inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=f.default, annotation=hints[f.name])
        for f in fields(TaskOptions)
    ]
    after = [p.name for p in common].index("data") + 1
    return inspect.Signature([*common[:after], *bench.parameters(), *common[after:]], return_annotation=Task)


def task_docstring(bench: Benchmark, summary: str) -> str:
    """``summary`` with an Args section: :data:`ARGUMENT_DOCS`, then the benchmark's own arguments."""
    described = {**ARGUMENT_DOCS, **bench.arguments}
    lines = [f"    {name}: {described[name]}" for name in task_signature(bench).parameters]
    return f"{summary.rstrip()}\n\nArgs:\n" + "\n".join(lines) + "\n"


TaskFunction = TypeVar("TaskFunction", bound=Callable[..., Task])


def task_arguments(name: str) -> Callable[[TaskFunction], TaskFunction]:
    """Give a task function the signature and the docstring's Args of the registered benchmark ``name``.

    The function (``def <name>(**args: Any) -> Task``, returning :func:`registered_task`) keeps its own
    summary line; Inspect reads the signature set here for the task's ``-T`` arguments (``@task`` goes above).
    """
    bench = benchmark(name)

    def decorate(func: TaskFunction) -> TaskFunction:
        if func.__name__ != name:
            raise ValueError(f"the task of benchmark {name!r} must be named {name!r}, not {func.__name__!r}")
        signature = task_signature(bench)
        func.__signature__ = signature  # type: ignore[attr-defined]
        func.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()} | {"return": Task}
        func.__doc__ = task_docstring(bench, func.__doc__ or f"{bench.title} with the shared rollout core.")
        return func

    return decorate


def registered_task(name: str, **args: Any) -> Task:
    """The task of the registered benchmark ``name`` with its task arguments ``args`` (unset: their defaults).

    Its loader gets ``-T data`` as the path, the prompt templates, the common arguments it takes (the entry's
    ``shared``) and the benchmark's own; the scorer is its problem kind's (:data:`SCORERS`).

    Raises:
        TypeError: an argument the task does not take.
        ValueError: the loader returned problems of another kind than the benchmark's.
    """
    bench = benchmark(name)
    bound = task_signature(bench).bind(**args)
    bound.apply_defaults()
    options = TaskOptions.of(bound.arguments)
    loader_args = {k: bound.arguments[k] for k in (*bench.shared, *bench.arguments)}

    def load(templates: PromptTemplates) -> Sequence[Problem]:
        problems = bench.loader(options.data, templates=templates, **loader_args)
        other = sorted({p.kind for p in problems} - {bench.kind})
        if other:
            raise ValueError(f"benchmark {name!r} has problems of kind {bench.kind!r}; its loader returned {other}")
        return problems

    return benchmark_task(load, SCORERS[bench.kind], options)
