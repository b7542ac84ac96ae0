"""docs/adding-a-benchmark.md's example runs: its loader reads a fixture with the helpers it names, its registry
entry registers, and ``python -m harness generate`` writes its task file. A helper renamed in the code fails here
until the page names the new one."""

from __future__ import annotations

import ast
import builtins
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.benchmarks import datasets, registry
from harness.benchmarks.registry import BENCHMARKS, Benchmark
from harness.cli import generate

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "adding-a-benchmark.md"

#: Two rows in MATH-500's upstream schema.
ROWS = [
    {"problem": "Compute $2^{10}$.", "answer": "1024", "subject": "Algebra", "level": 1, "unique_id": "a/1.json"},
    {"problem": "What is $1/2 + 1/3$?", "answer": "\\frac{5}{6}", "subject": "Prealgebra", "level": 2},
]


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.DOTALL)


def unresolved(source: str, namespace: dict[str, Any]) -> list[str]:
    """The names ``source`` reads that neither it, ``namespace`` nor the builtins define."""
    tree = ast.parse(source)
    defined = set(namespace) | set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.FunctionDef):
            defined.add(node.name)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return sorted(read - defined)


def test_the_pages_example_loads_registers_and_gets_its_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loader, entry, arguments, docstring = python_blocks()
    namespace = dict(vars(datasets))
    assert unresolved(loader, namespace) == [], "docs/adding-a-benchmark.md names helpers datasets.py does not have"
    exec(compile(loader, str(PAGE), "exec"), namespace)
    fixture = tmp_path / "math500_fixture.jsonl"
    fixture.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    namespace["MATH500_FIXTURE"] = fixture

    bench = eval(entry.strip().rstrip(","), {"Benchmark": Benchmark, "ds": SimpleNamespace(**namespace)})
    assert (bench.name, bench.kind, bench.paper, bench.warm_measure) == ("math500", "math", False, False)
    monkeypatch.setitem(BENCHMARKS, "math500", bench)
    problems = registry.load("math500", path="fixture")
    assert [(p.id, p.target, p.kind) for p in problems] == [
        ("a/1.json", "1024", "math"),
        ("math500-1", "\\frac{5}{6}", "math"),
    ]
    assert "math500" not in registry.PAPER and "math500" not in registry.WARM_MEASURE
    with pytest.raises(datasets.DatasetError, match="answer"):  # a broken row names its field
        namespace["load_math500"](_broken(tmp_path))

    assert generate.stale(tmp_path, write=True, only=["tasks/math500.py"]) == ["tasks/math500.py#task"]
    task_file = (tmp_path / "tasks" / "math500.py").read_text(encoding="utf-8")
    assert "def math500(" in task_file and 'return registered_task("math500", **locals())' in task_file
    assert "| `tasks/math500.py` | MATH-500, 500 problems (hub, pinned revision) |" in "\n".join(registry.task_table())
    ast.parse(f"arguments = dict({arguments.strip().removeprefix('arguments=')})")
    assert ast.get_docstring(ast.parse(docstring), clean=True).startswith("MATH-500: ")


def _broken(tmp_path: Path) -> Path:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps({"problem": "Compute $1+1$.", "unique_id": "b/1.json"}) + "\n", encoding="utf-8")
    return path
