"""The benchmark tasks: their arguments, defined once, and the one builder every ``tasks/<name>.py`` calls.

A task's arguments are settings fields, each with its type, default and help, defined once: a preset name, the
protocol settings (:class:`harness.benchmarks.presets.EvalProtocol`'s fields, SAAR's those of its
:class:`~harness.core.saar.SaarConfig`; unset means "the preset's, or the default") and where and how it runs
(:class:`TaskOptions`); a benchmark may add arguments of its own (its :class:`~harness.benchmarks.registry.Benchmark`
entry's). The tasks' signature, their docstrings' Args (:data:`ARGUMENT_DOCS`) and README.md's table
(:func:`argument_table`) come from those fields.

A task function (``tasks/<name>.py``, :mod:`cleaner.tasks`) is generated from the registry entry and these fields
(:mod:`harness.evals.task_code`): every argument a named parameter with its type and default, the Args in its
docstring, and a body that returns :func:`registered_task`. :func:`benchmark_task` resolves the protocol for the
task's problem kind and records it, with the preset's name, in the task's metadata (so in every eval log).
"""

from __future__ import annotations

import inspect
import signal
import threading
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, dataclass, field, fields
from typing import Any, Literal

from inspect_ai import Epochs, Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import ScoreReducer
from inspect_ai.util import SandboxEnvironmentSpec

from harness.benchmarks.datasets import Problem
from harness.benchmarks.presets import PROTOCOL_ARGUMENTS, EvalProtocol, protocol_field, protocol_hint, resolve
from harness.benchmarks.registry import Benchmark, benchmark
from harness.core.kinds import Kind
from harness.core.prompts import PromptTemplates, load_prompt_templates
from harness.core.settings import setting, setting_default, setting_help
from harness.evals.concurrency import METADATA_KEY, Concurrency, preset_concurrency
from harness.evals.scorers import SCORERS, MakeScorer
from harness.evals.solver import saar_agent
from harness.evals.tokenizers import check_tokenizer
from harness.reports.card import protocol_card
from sandboxes.backends import BACKEND_NAMES, resolve_backend_name
from sandboxes.inspect_provider import CleanerSandboxConfig, expect_sandboxes, sandbox_metadata

#: ``-T sandbox``'s values: the sandbox backends' names (:data:`sandboxes.backends.BACKEND_NAMES`, checked by a test).
SandboxName = Literal["auto", "local", "docker"]


@dataclass(frozen=True)
class TaskOptions:
    """The arguments every benchmark task takes (``-T name=value``) besides the protocol's settings.

    The protocol settings (:data:`~harness.benchmarks.presets.PROTOCOL_ARGUMENTS`: the SAAR arguments and
    :class:`harness.benchmarks.presets.EvalProtocol`'s other fields but the preset-only ones) are task arguments too,
    unset by default (None: the preset's value, or the protocol's default); ``given`` holds those a task was given.
    :func:`task_signature` orders the two into the tasks' signature.
    """

    preset: str | None = setting(
        None, "a named protocol: `cleaner-paper` (the 4B model's), `cleaner-paper-7b` (the 7B model's; below)"
    )
    sandbox: SandboxName = setting(
        "auto",
        "`docker`, `local`, or `auto` (docker when an engine and the image are there; the `reference` tool "
        "environment has an image of its own: `python -m sandboxes.image build --variant reference`)",
    )
    data: str | None = setting(
        None,
        "a local file or directory with the upstream schema (a relative path resolves against `tasks/`), the "
        "reference's `.parquet`, or `fixture`",
        shown="hub",
    )
    seed: int = setting(
        0, "the run's seed (and the GPQA shuffle): each (sample, epoch) samples from its own seed derived from it"
    )
    share_prefix: str | None = setting(
        None,
        "an id both SAAR arms of one run pass: a request the arms have in common (before SAAR first acts) is "
        "generated once and read from Inspect's cache by the other arm (`compare` and `demo` set it)",
    )
    prompt_template: str | None = setting(
        None,
        'a prompt template file (`docs/benchmarks.md`, "Prompts"); a relative path resolves against `tasks/`; its '
        "sha256 is in the log",
        shown="the project's",
    )
    tokenizer: str | None = setting(
        None,
        "the model's tokenizer, which a `reference` budget counts tool output with and SAAR's `reference` call span "
        "ends with (its end-of-turn token): a hub id or a path (needed for models whose name is not one, e.g. "
        "`replay/`)",
        shown="the model's",
    )
    given: Mapping[str, Any] = field(default_factory=dict)  # the protocol settings given (not None)

    @classmethod
    def of(cls, args: Mapping[str, Any]) -> TaskOptions:
        """The options among a task function's arguments; the rest are the benchmark's own."""
        given = {k: args[k] for k in PROTOCOL_ARGUMENTS if args.get(k) is not None}
        return cls(**{name: args[name] for name in RUN_ARGUMENTS if name in args}, given=given)

    def protocol(self, kind: Kind) -> EvalProtocol:
        return resolve(self.preset, kind, **self.given)

    def templates(self) -> PromptTemplates:
        """The prompt templates, loaded (and checked) now: a bad file fails before any sample runs."""
        return load_prompt_templates(self.prompt_template)


#: The task arguments of :class:`TaskOptions`' own (not the protocol's), in its order.
RUN_ARGUMENTS = tuple(f.name for f in fields(TaskOptions) if f.name != "given")


def _argument_fields() -> dict[str, Field[Any]]:
    """Every common task argument's settings field, by argument name, in the tasks' signature order: the preset, the
    protocol's settings (SAAR's are :class:`~harness.core.saar.SaarConfig`'s fields), then the run's."""
    run = {f.name: f for f in fields(TaskOptions)}
    return (
        {"preset": run["preset"]}
        | {n: protocol_field(n) for n in PROTOCOL_ARGUMENTS}
        | {n: run[n] for n in RUN_ARGUMENTS[1:]}
    )


#: Every common task argument, in the tasks' signature order.
COMMON_ARGUMENTS = tuple(_argument_fields())

#: What each common task argument means, in the signature's order: the Args of every task's docstring and the
#: meaning column of README.md's table (:func:`argument_table`), from the fields' help.
ARGUMENT_DOCS: dict[str, str] = {name: setting_help(f) for name, f in _argument_fields().items()}


def argument_table() -> list[str]:
    """README.md's table of task arguments (argument, default, meaning), generated from the fields."""
    rows = ["| argument | default | meaning |", "|---|---|---|"]
    return rows + [f"| `{n}` | {setting_default(f)} | {setting_help(f)} |" for n, f in _argument_fields().items()]


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


def sandbox_spec(backend: str, runtime: str, concurrency: Concurrency | None = None) -> SandboxEnvironmentSpec:
    """The Inspect sandbox spec for ``-T sandbox=docker|local|auto`` (the project's ``cleaner`` provider), its programs
    meeting ``runtime`` (the tool environment's), its pool sized to ``concurrency`` when given (for ``auto``, to the
    backend it resolves to now)."""
    if backend not in BACKEND_NAMES:
        raise ValueError(f"-T sandbox={backend!r}: choose one of {', '.join(map(repr, BACKEND_NAMES))}")
    options = concurrency.sandbox_options(resolve_backend_name(backend, runtime)) if concurrency else {}
    config = CleanerSandboxConfig(backend=backend, options=options, runtime=runtime)  # type: ignore[arg-type]
    return SandboxEnvironmentSpec("cleaner", config)


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


def benchmark_task(load: LoadProblems, scorer: MakeScorer, options: TaskOptions) -> Task:
    """A benchmark task: the shared rollout solver with the protocol of ``options``, a scorer, pass@1 over epochs
    and pass@k for k = the epochs that run (``-T epochs``, the preset's, or ``inspect eval --epochs``).

    Everything a bad argument can break (the tool environment, the judge, the prompt template file, the data,
    the tokenizer a response budget counts with and the ``reference`` call span ends with) is loaded and checked
    here, before any sample runs; SIGTERM then ends the eval as Ctrl-C does (:func:`end_on_sigterm`). The log's
    task metadata records the resolved protocol, the whole tool environment for the model (``tool_env``: its
    end-of-turn token included), the prompt templates' file and hash (``prompt_template``) and
    the protocol card (``card``: :mod:`harness.reports.card`). A task on docker records its pool's bound with the
    sandbox provider (:func:`sandboxes.inspect_provider.expect_sandboxes`), so that Inspect runs no more samples'
    sandboxes at once than the pool can give.
    """
    templates = options.templates()
    problems = load(templates)
    kind = problem_kind(problems)
    templates.require([kind])
    protocol = options.protocol(kind)
    concurrency = preset_concurrency(options.preset, len(problems) * protocol.epochs)
    sandbox = sandbox_spec(options.sandbox, protocol.env.runtime, concurrency)
    where = sandbox_metadata(sandbox.config)
    expect_sandboxes(where)  # a docker pool's bound becomes Inspect's limit on sandboxes at once
    config = generate_config(protocol)
    rollout_config = protocol.rollout_config(kind)
    # a tokenizer needed and none: it fails here, before a sample; the profile for the model being evaluated
    env = check_tokenizer(rollout_config, options.tokenizer).tool_env
    metadata: dict[str, Any] = {
        "preset": options.preset,
        "kind": kind,
        "protocol": protocol.to_dict(),
        "tool_env": env.to_dict(),
        "prompt_template": {"source": templates.source, "sha256": templates.sha256},
        "card": protocol_card(options.preset, kind, protocol, templates),
        "tokenizer": options.tokenizer,
        "seed": options.seed,
        "share_prefix": options.share_prefix,
        # the resolved switches, also at the top level (reports read "saar" from here)
        "saar": protocol.saar.enabled,
        "saar_prob": protocol.saar.prob,
        "gamma": protocol.saar.gamma,
        "similarity": protocol.saar.similarity,
        # where the programs run (backend, isolation), decided now as the sandbox provider will
        "sandbox": where,
        # samples at once (a preset's; None: Inspect's defaults), read by the idle-engine warning
        METADATA_KEY: concurrency.to_dict() if concurrency else None,
    }
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


def task_signature(bench: Benchmark) -> inspect.Signature:
    """The signature of ``bench``'s task: the common arguments (:data:`COMMON_ARGUMENTS`; the protocol's unset, None),
    with the benchmark's own arguments after ``data`` (they select among its data, as LiveCodeBench's window does)."""
    run = typing.get_type_hints(TaskOptions)
    common = [
        inspect.Parameter(
            name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=f.default if name in RUN_ARGUMENTS else None,
            annotation=run[name] if name in RUN_ARGUMENTS else protocol_hint(name) | None,
        )
        for name, f in _argument_fields().items()
    ]
    after = list(COMMON_ARGUMENTS).index("data") + 1
    return inspect.Signature([*common[:after], *bench.parameters(), *common[after:]], return_annotation=Task)


def registered_task(name: str, **args: Any) -> Task:
    """The task of the registered benchmark ``name`` with its task arguments ``args`` (unset: their defaults).

    Its loader gets ``-T data`` as the path, the prompt templates, the common arguments it takes (the entry's
    ``shared``) and the benchmark's own; the scorer is its problem kind's (:data:`harness.evals.scorers.SCORERS`).

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
