"""The benchmarks, each registered once: what the tasks, ``compare`` and the tests know of a benchmark.

A :class:`Benchmark` names its loader (:mod:`harness.benchmarks.datasets`), the project's fixture
(``-T data=fixture``), the kind of its problems (:data:`harness.core.problems.Kind`, which decides the
prompt template, the preset's protocol and the scorer) and the task arguments of its own. From
:data:`BENCHMARKS` come:

- the Inspect tasks: ``tasks/<name>.py`` is a few lines over :func:`harness.evals.tasks.task_arguments`
  and :func:`harness.evals.tasks.registered_task`, which build its signature, docstring and task from
  the entry;
- the benchmarks ``python -m harness compare`` accepts (:data:`NAMES`) and those it runs by default, the paper's
  protocol (:data:`PAPER`: the entries with ``paper=True``);
- the fixtures ``python -m trainers warmup-measure`` runs (:data:`WARM_MEASURE`: ``warm_measure=True``), so a new
  entry changes neither set (nor the figures committed from them) unless it says so;
- README.md's table of tasks (:func:`task_table`, written by ``python -m harness docs``);
- :func:`load` (a benchmark's problems by name) and the tests' lists of benchmarks.

Nothing depends on the entries' order but the order the lists above show them in.

``docs/adding-a-benchmark.md`` walks through adding one.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from harness.benchmarks import datasets as ds
from harness.benchmarks.datasets import Problem
from harness.core.problems import Kind, check_kind

#: A benchmark's loader: ``loader(path, limit=None, *, templates=None, **options)``; ``path`` None is the hub,
#: ``"fixture"`` the project's fixture (see :mod:`harness.benchmarks.datasets`).
Loader = Callable[..., list[Problem]]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: its name, loader, fixture, problem kind and the task arguments of its own.

    ``arguments`` are parameters of the loader offered as task arguments of this benchmark's task
    (``-T name=value``), each with its description; their types and defaults are the loader's.
    ``shared`` are common task arguments (:class:`harness.evals.tasks.TaskOptions`) that the loader
    takes too, under the same name.
    """

    name: str  #: the task's name and file (``tasks/<name>.py``), compare's name, the replay script's
    title: str  #: the benchmark's name in prose ("AIME 2024")
    kind: Kind  #: its problems' kind: their prompt template, the preset's protocol and the scorer
    loader: Loader
    fixture: Path  #: the project's small copy in the upstream schema, what ``-T data=fixture`` loads
    data: str  #: what the data is and where it comes from, for README.md's table of tasks
    score: str  #: how an answer is scored, for README.md's table of tasks
    arguments: Mapping[str, str] = field(default_factory=dict)  #: loader parameter -> its description
    shared: tuple[str, ...] = ()  #: common task arguments the loader takes (GPQA's shuffle: the seed)
    paper: bool = False  #: in the paper's protocol: ``compare`` runs it by default
    warm_measure: bool = False  #: its fixture is in the warm-model measure (``trainers warmup-measure``)

    def __post_init__(self) -> None:
        check_kind(self.kind, f"benchmark {self.name!r}")
        params = inspect.signature(self.loader).parameters
        missing = [name for name in (*self.arguments, *self.shared) if name not in params]
        if missing:
            raise ValueError(f"benchmark {self.name!r}: its loader takes no {missing}")
        required = [name for name in self.arguments if params[name].default is inspect.Parameter.empty]
        if required:
            raise ValueError(f"benchmark {self.name!r}: task arguments need a default in the loader: {required}")

    def parameters(self) -> list[inspect.Parameter]:
        """The task arguments of this benchmark's own, as the loader declares them (type and default)."""
        params = inspect.signature(self.loader).parameters
        hints = typing.get_type_hints(self.loader)
        return [
            inspect.Parameter(
                name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=params[name].default, annotation=hints[name]
            )
            for name in self.arguments
        ]


#: Every benchmark, by name, in the order ``compare`` runs them and the docs list them.
BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "aime24",
            "AIME 2024",
            "math",
            ds.load_aime24,
            ds.AIME24_FIXTURE,
            data="AIME 2024, 30 problems (hub, pinned revision)",
            score="integer in the last `\\boxed{}`, equivalence (leading zeros do not matter)",
            paper=True,
            warm_measure=True,
        ),
        Benchmark(
            "aime25",
            "AIME 2025",
            "math",
            ds.load_aime25,
            ds.AIME25_FIXTURE,
            data="AIME 2025, 30 problems",
            score="same",
            paper=True,
            warm_measure=True,
        ),
        Benchmark(
            "gpqa",
            "GPQA-Diamond",
            "gpqa",
            ds.load_gpqa,
            ds.GPQA_FIXTURE,
            data="GPQA-Diamond, 198 questions (gated: accept the terms on the dataset page and set `HF_TOKEN`)",
            score="letter A-D, choices shuffled with a fixed seed per question",
            shared=("seed",),
            paper=True,
            warm_measure=True,
        ),
        Benchmark(
            "livecodebench",
            "LiveCodeBench",
            "code",
            ds.load_livecodebench,
            ds.LCB_FIXTURE,
            data="LiveCodeBench `code_generation_lite` release_v6, problems from February to May 2025 by default "
            "(`-T start_date`, `end_date`)",
            score="every public and private test passes, run in the sandbox",
            arguments={
                "start_date": "the first contest day of the window, YYYY-MM-DD (the reference's by default).",
                "end_date": "the last contest day of the window, inclusive (the reference's by default).",
                "release": "the dataset release: release_vN (cumulative) or vN (one file).",
            },
            paper=True,
            warm_measure=True,
        ),
    )
}


def benchmark(name: str) -> Benchmark:
    """The registered benchmark ``name``; a ValueError naming the choices for any other."""
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; choose one of {', '.join(BENCHMARKS)}") from None


def load(name: str, **kwargs: Any) -> list[Problem]:
    """The problems of benchmark ``name``: ``kwargs`` go to its loader (``path``, ``limit``, ``templates``, ...)."""
    return benchmark(name).loader(**kwargs)


class _Names(Sequence[str]):
    """The names of the registered benchmarks that ``keep`` keeps, read at each use: a benchmark registered later
    is in them."""

    def __init__(self, keep: Callable[[Benchmark], bool] = lambda b: True) -> None:
        self._keep = keep

    def _names(self) -> tuple[str, ...]:
        return tuple(name for name, b in BENCHMARKS.items() if self._keep(b))

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


#: The registered benchmarks' names, in :data:`BENCHMARKS`' order (a live view).
NAMES: Sequence[str] = _Names()
#: The paper's protocol: the benchmarks ``python -m harness compare`` runs by default (a live view).
PAPER: Sequence[str] = _Names(lambda b: b.paper)
#: The benchmarks whose fixtures the warm-model measure runs (``trainers warmup-measure``; a live view).
WARM_MEASURE: Sequence[str] = _Names(lambda b: b.warm_measure)


def task_table() -> list[str]:
    """README.md's table of tasks: each benchmark's task file, data, scoring and the sets it is in."""
    rows = ["| task | data | score | in |", "|---|---|---|---|"]
    for b in BENCHMARKS.values():
        sets = [label for label, on in (("paper", b.paper), ("warm measure", b.warm_measure)) if on]
        rows.append(f"| `tasks/{b.name}.py` | {b.data} | {b.score} | {', '.join(sets) or '-'} |")
    return rows
