"""The benchmarks, each registered once: what the tasks, ``compare`` and the tests know of a benchmark.

A :class:`Benchmark` names its loader (:mod:`harness.benchmarks.datasets`), the project's fixture
(``-T data=fixture``), the kind of its problems (:data:`harness.core.kinds.Kind`, which decides the
prompt template, the preset's protocol and the scorer) and the task arguments of its own. From
:data:`BENCHMARKS` come:

- the Inspect tasks: ``tasks/<name>.py`` is a few lines over :func:`harness.evals.tasks.task_arguments`
  and :func:`harness.evals.tasks.registered_task`, which build its signature, docstring and task from
  the entry;
- the benchmarks ``python -m harness compare`` accepts and runs by default
  (:data:`harness.reports.compare.TASKS` is :data:`NAMES`);
- :func:`load` (a benchmark's problems by name) and the tests' lists of benchmarks.

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
from harness.core.kinds import Kind, check_kind

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
    arguments: Mapping[str, str] = field(default_factory=dict)  #: loader parameter -> its description
    shared: tuple[str, ...] = ()  #: common task arguments the loader takes (GPQA's shuffle: the seed)

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


#: Every benchmark, by name, in the order ``compare`` runs them.
BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark("aime24", "AIME 2024", "math", ds.load_aime24, ds.AIME24_FIXTURE),
        Benchmark("aime25", "AIME 2025", "math", ds.load_aime25, ds.AIME25_FIXTURE),
        Benchmark("gpqa", "GPQA-Diamond", "gpqa", ds.load_gpqa, ds.GPQA_FIXTURE, shared=("seed",)),
        Benchmark(
            "livecodebench",
            "LiveCodeBench",
            "code",
            ds.load_livecodebench,
            ds.LCB_FIXTURE,
            arguments={
                "start_date": "the first contest day of the window, YYYY-MM-DD (the reference's by default).",
                "end_date": "the last contest day of the window, inclusive (the reference's by default).",
                "release": "the dataset release: release_vN (cumulative) or vN (one file).",
            },
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
    """The registered benchmarks' names, read at each use: a benchmark registered later is in them."""

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return tuple(BENCHMARKS)[index]

    def __len__(self) -> int:
        return len(BENCHMARKS)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(BENCHMARKS))

    def __repr__(self) -> str:
        return repr(tuple(BENCHMARKS))


#: The registered benchmarks' names, in :data:`BENCHMARKS`' order (a live view).
NAMES: Sequence[str] = _Names()
