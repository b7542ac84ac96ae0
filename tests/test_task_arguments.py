"""The benchmark registry and the task arguments, each defined once, and every list of them in agreement.

The registry (harness.benchmarks.registry) is the one list of benchmarks: a task file in ``tasks/`` per entry,
each a few lines whose signature (what Inspect reads for ``-T``) and docstring come from the entry and from
:class:`harness.evals.tasks.TaskOptions`. The protocol settings among the arguments are
:class:`harness.benchmarks.presets.EvalProtocol`'s, README.md's table names every common argument, and a
benchmark registered here, with a fixture and a task file of its own, runs and is compared with nothing else
touched.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from inspect_ai._util.registry import registry_info
from inspect_ai.log import read_eval_log

from harness.benchmarks import registry
from harness.benchmarks.datasets import Problem
from harness.benchmarks.presets import PRESET_ONLY_FIELDS, PROTOCOL_ARGUMENTS, PROTOCOL_FIELDS
from harness.benchmarks.registry import BENCHMARKS, NAMES, Benchmark
from harness.cli import generate
from harness.core.prompts import DEFAULT_TEMPLATES_PATH, PromptTemplates, default_templates
from harness.evals import arms as arm_runs
from harness.evals.tasks import (
    ARGUMENT_DOCS,
    COMMON_ARGUMENTS,
    RUN_ARGUMENTS,
    TaskOptions,
    registered_task,
    task_signature,
)
from harness.reports import compare

ROOT = Path(__file__).resolve().parents[1]
INSPECT = Path(sys.executable).with_name("inspect")
COMMON = list(COMMON_ARGUMENTS)


def task_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"task_file_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readme_task_arguments() -> list[str]:
    """The names in README.md's table of task arguments (a row may name several: "`temperature`, `top_p`")."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("Task arguments (`-T name=value`)")
    names: list[str] = []
    in_table = False
    for line in readme[start:].splitlines():
        if line.startswith("|"):
            in_table = True
            first = line.split("|")[1].strip()
            if first.startswith("`"):
                names += re.findall(r"`(\w+)`", first)
        elif in_table:
            break
    return names


# --------------------------------------------------------------------------- one list of benchmarks


def test_every_task_file_is_a_registered_benchmark() -> None:
    assert sorted(p.stem for p in (ROOT / "tasks").glob("*.py")) == sorted(BENCHMARKS)
    assert list(compare.TASKS) == list(NAMES) == list(BENCHMARKS)
    # the paper's protocol and the warm-model measure: every benchmark today, each by its entry's say
    assert list(compare.DEFAULT_TASKS) == list(registry.PAPER) == ["aime24", "aime25", "gpqa", "livecodebench"]
    assert list(registry.WARM_MEASURE) == ["aime24", "aime25", "gpqa", "livecodebench"]
    for name in BENCHMARKS:
        assert compare.task_file(name) == f"{ROOT / 'tasks' / name}.py@{name}"


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_task_files_signature_and_docstring_are_its_registry_entrys(name: str) -> None:
    bench = BENCHMARKS[name]
    function = getattr(task_module(ROOT / "tasks" / f"{name}.py"), name)
    signature = inspect.signature(function)
    assert signature == task_signature(bench)
    expected = [*COMMON[: COMMON.index("data") + 1], *bench.arguments, *COMMON[COMMON.index("data") + 1 :]]
    assert list(signature.parameters) == expected
    assert registry_info(function).metadata["params"] == expected  # what Inspect matches -T arguments with
    assert [signature.parameters[p.name] for p in bench.parameters()] == bench.parameters()  # the loader's defaults
    doc = inspect.getdoc(function) or ""
    args = doc[doc.index("\nArgs:\n") :]
    assert re.findall(r"^    (\w+): ", args, flags=re.MULTILINE) == expected


def test_a_benchmarks_own_arguments_are_its_loaders_and_not_common_ones() -> None:
    for bench in BENCHMARKS.values():
        loader = inspect.signature(bench.loader).parameters
        assert not set(bench.arguments) & set(COMMON), bench.name
        for name, text in bench.arguments.items():
            assert text.strip() and loader[name].default is not inspect.Parameter.empty, (bench.name, name)
        assert set(bench.shared) <= set(COMMON) & set(loader), bench.name
    assert BENCHMARKS["gpqa"].shared == ("seed",)
    assert list(BENCHMARKS["livecodebench"].arguments) == ["start_date", "end_date", "release"]
    with pytest.raises(ValueError, match="its loader takes no \\['window'\\]"):
        aime = BENCHMARKS["aime24"]
        Benchmark("x", "X", "math", aime.loader, aime.fixture, data="d", score="s", arguments={"window": "w"})


# --------------------------------------------------------------------------- one list of task arguments


def test_the_protocol_arguments_are_evalprotocols_fields() -> None:
    """The common arguments are the preset, every EvalProtocol field but the preset-only ones (in its order, unset
    by default) and TaskOptions' own; a given protocol argument reaches the protocol, an unset one does not."""
    assert COMMON == ["preset", *PROTOCOL_ARGUMENTS, *RUN_ARGUMENTS[1:]]
    assert set(PROTOCOL_FIELDS) - set(PROTOCOL_ARGUMENTS) == set(PRESET_ONLY_FIELDS)
    assert not set(PRESET_ONLY_FIELDS) & set(COMMON)
    signature = task_signature(BENCHMARKS["aime24"])
    assert all(signature.parameters[name].default is None for name in PROTOCOL_ARGUMENTS)
    options = TaskOptions.of({**dict.fromkeys(COMMON), "sandbox": "local", "seed": 3, "gamma": 0.25})
    assert options.given == {"gamma": 0.25} and (options.sandbox, options.seed) == ("local", 3)
    assert options.protocol("math").saar.gamma == 0.25 and options.protocol("math").saar.enabled is False
    with pytest.raises(ValueError, match="not protocol settings"):
        TaskOptions(given={"gama": 0.25}).protocol("math")


def test_every_common_argument_is_described_once() -> None:
    assert list(ARGUMENT_DOCS) == COMMON
    assert all(text.strip() for text in ARGUMENT_DOCS.values())
    assert "tasks/" in ARGUMENT_DOCS["data"]  # a relative path resolves against the task file's directory


def test_the_readme_table_names_every_common_argument() -> None:
    names = readme_task_arguments()
    assert sorted(names) == sorted(COMMON), "README.md's task-arguments table and TaskOptions differ"
    assert len(names) == len(set(names))


def test_an_argument_the_task_does_not_take_is_refused() -> None:
    with pytest.raises(TypeError, match="saar_probability"):
        registered_task("aime24", data="fixture", sandbox="local", saar_probability=0.5)


@pytest.mark.slow
def test_inspect_eval_takes_every_task_argument(tmp_path: Path, qwen3_tokenizer_dir: str) -> None:
    """The real CLI with every argument given: each reaches the task, and relative paths resolve against tasks/."""
    given: dict[str, Any] = {
        "preset": "cleaner-paper",
        "saar": True,
        "saar_prob": 1.0,
        "gamma": 0.5,
        "similarity": "call",
        "max_retries": 3,
        "max_turns": 16,
        "max_total_tokens": 20480,
        "timeout": 4.0,
        "output_chars": 256,
        "epochs": 1,
        "temperature": 1.0,
        "top_p": 0.6,
        "max_tokens": 20480,
        "tool_env": "reference",
        "judge": "reference",
        "sandbox": "local",
        "data": "../harness/data/aime24_fixture.jsonl",  # relative to tasks/, not to the working directory
        "seed": 7,
        "share_prefix": None,  # an id would need the model's weights (the replay model has none)
        "prompt_template": f"../harness/data/prompts/{DEFAULT_TEMPLATES_PATH.name}",
        "tokenizer": qwen3_tokenizer_dir,
    }
    assert list(given) == COMMON
    cmd = [str(INSPECT)] if INSPECT.exists() else [sys.executable, "-m", "inspect_ai"]
    cmd += ["eval", "tasks/aime24.py", "--model", "replay/aime24.yaml", "--limit", "1"]
    for name, value in given.items():
        cmd += ["-T", f"{name}={'' if value is None else json.dumps(value) if not isinstance(value, str) else value}"]
    cmd += ["--log-dir", str(tmp_path), "--display", "none"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "not used by task" not in done.stderr
    [path] = tmp_path.glob("*.eval")
    log = read_eval_log(str(path))
    assert log.status == "success", log.error
    assert log.eval.task_args_passed == given
    assert len(log.samples or []) == 1 and all(s.error is None for s in log.samples or [])
    meta = log.eval.metadata or {}
    assert (meta["preset"], meta["seed"], meta["saar"]) == ("cleaner-paper", 7, True)
    assert meta["tokenizer"] == qwen3_tokenizer_dir
    assert meta["protocol"]["similarity"] == "call" and meta["protocol"]["timeout"] == 4.0
    assert meta["protocol"]["tool_env"] == meta["tool_env"]["name"] == "reference"
    assert meta["prompt_template"]["sha256"] == default_templates().sha256  # the file, found from tasks/


# --------------------------------------------------------------------------- a benchmark added by a registry entry

#: Two MATH-style problems in the upstream schema of MATH-500 (problem, answer, subject, unique_id).
TINY_ROWS = [
    {"problem": "Compute $2^{10}$.", "answer": "1024", "subject": "Algebra", "unique_id": "tiny/algebra/1.json"},
    {
        "problem": "Simplify $\\frac{1}{2} + \\frac{1}{3}$.",
        "answer": "\\frac{5}{6}",
        "subject": "Prealgebra",
        "unique_id": "tiny/prealgebra/2.json",
    },
]

#: The replay model's turns: a failed call then a good one, then the answer; an answer straight away.
TINY_SCRIPT = {
    "samples": [
        {
            "match": "Compute $2^{10}$",
            "turns": [
                'Compute it.\n<tool_call>\n{"name": "python", "arguments": {"code": "print(2**10"}}\n</tool_call>',
                'Fixed.\n<tool_call>\n{"name": "python", "arguments": {"code": "print(2**10)"}}\n</tool_call>',
                "So the answer is \\boxed{1024}.",
            ],
        },
        {"match": "Simplify", "turns": ["The sum is \\boxed{\\frac{5}{6}}."]},
    ]
}


def tiny_loader(fixture: Path):
    """A loader as datasets.py's are written: path None (the hub), "fixture" or a file; one argument of its own."""

    def load_tiny(
        path: str | None = None,
        limit: int | None = None,
        *,
        templates: PromptTemplates | None = None,
        subject: str = "",
    ) -> list[Problem]:
        chosen = templates or default_templates()
        source = fixture if path == "fixture" else Path(str(path))
        rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
        problems = [
            Problem(
                id=row["unique_id"],
                prompt=chosen.render("math", row["problem"]),
                target=row["answer"],
                kind="math",
                metadata={"problem": row["problem"], "subject": row["subject"], "source": str(source)},
            )
            for row in rows
            if not subject or row["subject"] == subject
        ]
        return problems[:limit]

    return load_tiny


def test_a_registered_benchmark_gets_a_task_and_is_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry entry, a fixture and a task file: the task runs, takes its own argument, and compare runs it."""
    fixture = tmp_path / "tiny_fixture.jsonl"
    fixture.write_text("".join(json.dumps(row) + "\n" for row in TINY_ROWS), encoding="utf-8")
    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    script = tmp_path / "tiny.yaml"
    script.write_text(yaml.safe_dump(TINY_SCRIPT), encoding="utf-8")
    bench = Benchmark(
        "tiny",
        "Tiny MATH",
        "math",
        tiny_loader(fixture),
        fixture,
        data="two MATH-style problems",
        score="the last `\\boxed{}`, equivalence",
        arguments={"subject": "only this subject's problems"},
    )
    monkeypatch.setitem(BENCHMARKS, "tiny", bench)
    monkeypatch.setattr(registry, "TASKS_DIR", tasks_dir)
    # its task file, as python -m harness generate writes it for a new entry
    assert generate.stale(tmp_path, write=True, only=["tasks/tiny.py"]) == ["tasks/tiny.py#task"]
    assert "def tiny(" in (tasks_dir / "tiny.py").read_text(encoding="utf-8")

    assert "tiny" in compare.TASKS and list(compare.TASKS)[-1] == "tiny"
    # a new entry joins neither the paper's set (compare's default) nor the warm-model measure unless it says so
    assert "tiny" not in compare.DEFAULT_TASKS and "tiny" not in registry.WARM_MEASURE
    assert (
        "| `tasks/tiny.py` | two MATH-style problems | the last `\\boxed{}`, equivalence | - |" in registry.task_table()
    )
    spec = compare.task_file("tiny")
    assert spec == f"{tasks_dir / 'tiny.py'}@tiny"
    assert [p.id for p in registry.load("tiny", path="fixture")] == ["tiny/algebra/1.json", "tiny/prealgebra/2.json"]
    task = arm_runs.build_task(spec, {"data": "fixture", "sandbox": "local", "subject": "Algebra"})
    assert [s.id for s in task.dataset] == ["tiny/algebra/1.json"] and task.metadata["kind"] == "math"

    dirs = arm_runs.run_arms(
        ["tiny"],
        f"replay/{script}",
        log_dir=tmp_path / "logs",
        task_args={"data": "fixture", "sandbox": "local"},
        display="none",
    )
    arms, _ = compare.read_arms(dirs)
    assert {(a.task, a.arm, a.status) for a in arms} == {("tiny", "off", "success"), ("tiny", "on", "success")}
    for arm in arms:
        assert sorted((r.sample_id, r.correct) for r in arm.samples) == [
            ("tiny/algebra/1.json", 1.0),
            ("tiny/prealgebra/2.json", 1.0),
        ]
    on = next(a for a in arms if a.arm == "on")
    assert any(e["action"] in ("shallow", "deep") for r in on.samples for e in r.events)  # SAAR replaced the call
