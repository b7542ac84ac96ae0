"""Building blocks of the four benchmark tasks (``tasks/*.py`` are thin wrappers over these).

A task's arguments are its :class:`TaskOptions`: a preset name, the protocol settings
(:class:`harness.benchmarks.presets.EvalProtocol`; ``None`` means "the preset's, or the default") and
where it runs (data, sandbox, seed). :func:`benchmark_task` resolves the protocol for the
task's problem kind and records it, with the preset's name, in the task's metadata (so in
every eval log).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from inspect_ai import Epochs, Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import Scorer, ScoreReducer
from inspect_ai.util import SandboxEnvironmentSpec

from harness.benchmarks.datasets import Problem
from harness.benchmarks.presets import PROTOCOL_FIELDS, EvalProtocol, Judge, resolve
from harness.core.problems import Kind
from harness.core.prompts import PromptTemplates, load_prompt_templates
from harness.core.saar import Similarity
from harness.evals.solver import saar_agent
from harness.reports.card import protocol_card
from sandboxes.inspect_provider import CleanerSandboxConfig, sandbox_metadata

SandboxName = Literal["auto", "local", "docker"]


@dataclass(frozen=True)
class TaskOptions:
    """The arguments every benchmark task takes (``-T name=value``); None: the preset's value or the default."""

    preset: str | None = None  #: a named protocol of harness.benchmarks.presets (e.g. "cleaner-paper")
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
    seed: int = 0  #: the run's seed: per-(sample, epoch) sampling seeds and the SAAR draw derive from it
    #: arms with the same id generate their common requests once (harness.evals.shared_prefix); None: off
    share_prefix: str | None = None
    tool_env: str | None = None  #: the tool environment ("project", "reference"); None: the preset's or project
    judge: Judge | None = None  #: the reported accuracy ("lenient", "reference"); None: the preset's or lenient
    prompt_template: str | None = None  #: a prompt template file (harness.core.prompts); None: the project's
    #: the tokenizer a response budget counts tool output with (hub id or path); None: the model's own
    tokenizer: str | None = None

    @classmethod
    def of(cls, args: Mapping[str, Any]) -> TaskOptions:
        """The options among a task function's arguments (its ``locals()``); the rest are the task's own."""
        return cls(**{f.name: args[f.name] for f in fields(cls) if f.name in args})

    def protocol(self, kind: Kind) -> EvalProtocol:
        given = {k: v for k, v in asdict(self).items() if k in PROTOCOL_FIELDS}
        return resolve(self.preset, kind, **given)

    def templates(self) -> PromptTemplates:
        """The prompt templates, loaded (and checked) now: a bad file fails before any sample runs."""
        return load_prompt_templates(self.prompt_template)


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


def sandbox_spec(backend: str) -> SandboxEnvironmentSpec:
    """The Inspect sandbox spec for ``-T sandbox=docker|local|auto`` (the project's ``cleaner`` provider)."""
    if backend not in ("auto", "local", "docker"):
        raise ValueError(f"-T sandbox={backend!r}: choose 'auto', 'local' or 'docker'")
    return SandboxEnvironmentSpec("cleaner", CleanerSandboxConfig(backend=backend))  # type: ignore[arg-type]


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

    Everything a bad argument can break (the tool environment, the judge, the prompt template file, the data)
    is loaded and checked here, before any sample runs. The log's task metadata records the resolved protocol,
    the whole tool environment (``tool_env``), the prompt templates' file and hash (``prompt_template``) and
    the protocol card (``card``: :mod:`harness.evals.card`).
    """
    templates = options.templates()
    problems = load(templates)
    kind = problem_kind(problems)
    templates.require([kind])
    protocol = options.protocol(kind)
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
        "sandbox": sandbox_metadata(sandbox_spec(options.sandbox).config),
    }
    solver = saar_agent(
        protocol.rollout_config(kind),
        run_seed=options.seed,
        share_prefix=options.share_prefix,
        max_tokens=protocol.max_tokens,
        tokenizer=options.tokenizer,
    )
    return BenchmarkTask(
        dataset=to_samples(problems),
        solver=solver,
        scorer=scorer(problems, protocol.judge),
        sandbox=sandbox_spec(options.sandbox),
        config=generate_config(protocol),
        epochs=Epochs(protocol.epochs),  # reducers: BenchmarkTask.epochs_reducer
        metadata=metadata,
    )
