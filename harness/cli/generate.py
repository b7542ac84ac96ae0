"""``python -m harness generate``: write every generated section from the code (``--check``: say which are stale and
exit 1), so that no list of task arguments, benchmarks or modules is edited by hand.

A generated section sits between ``generated: NAME`` and ``end generated: NAME`` markers (HTML comments in a page,
``#`` comments in a Python file): README.md's tables of tasks and task arguments, docs/layout.md's modules,
docs/evaluation.md's presets, each registered benchmark's task function in ``tasks/<name>.py`` (a file written anew,
under a one-line docstring, where none is there) and every task in ``cleaner/tasks.py``. ``tests/test_generated.py``
runs the check.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Callable, Collection
from pathlib import Path

from harness.benchmarks.presets import preset_table
from harness.benchmarks.registry import BENCHMARKS, task_table
from harness.evals.task_code import installed_tasks, task_file
from harness.evals.tasks import argument_table

HELP = "write the generated sections (docs' tables, task functions) from the code; --check: report stale ones"

ROOT = Path(__file__).resolve().parents[2]

#: The folders whose modules docs/layout.md lists, in its order.
LAYOUT_TOPS = ("tasks", "cleaner", "harness", "sandboxes", "trainers", "bench")


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line, as Markdown."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = " ".join(doc.split("\n\n")[0].split()).replace("``", "`").replace("|", "\\|")
    return re.sub(r":(?:mod|class|func|meth|data):`~?([^`]+)`", r"`\1`", text)


def layout_modules(root: Path = ROOT) -> list[str]:
    """docs/layout.md's tables: each folder's modules, one line each (its ``__init__``'s summary above them)."""
    rows: list[str] = []
    for top in LAYOUT_TOPS:
        files = (p for p in (root / top).rglob("*.py") if "__pycache__" not in p.parts)
        for folder in sorted({p.parent for p in files}):
            modules = sorted(m for m in folder.glob("*.py") if m.name != "__init__.py")
            if not modules:
                continue
            init = folder / "__init__.py"
            rows += ["", f"### `{folder.relative_to(root).as_posix()}/`", ""]
            rows += [summary(init), ""] if init.exists() and summary(init) else []
            rows += ["| module | what it holds |", "|---|---|"]
            rows += [f"| `{m.relative_to(root).as_posix()}` | {summary(m)} |" for m in modules]
    return rows[1:] + [""]


def sections() -> list[tuple[str, str, Callable[[], list[str]]]]:
    """Every generated section: (file, section name, what writes its lines), read from the registry at each call."""
    found: list[tuple[str, str, Callable[[], list[str]]]] = [
        ("README.md", "tasks", task_table),
        ("README.md", "task-arguments", argument_table),
        ("docs/layout.md", "modules", layout_modules),
        ("docs/evaluation.md", "presets", preset_table),
        ("cleaner/tasks.py", "tasks", installed_tasks),
    ]
    for name in BENCHMARKS:
        found.append((f"tasks/{name}.py", "task", lambda name=name: task_file(name)))
    return found


def _markers(path: str, name: str) -> tuple[str, str]:
    if path.endswith(".py"):
        return f"# generated: {name}\n", f"# end generated: {name}\n"
    return f"<!-- generated: {name} -->\n", f"<!-- end generated: {name} -->"


def render(text: str, name: str, lines: list[str], path: str) -> str:
    """``text`` with section ``name`` holding ``lines``.

    Raises:
        ValueError: the file has no such section (or more than one).
    """
    start, end = _markers(path, name)
    pattern = re.compile(f"({re.escape(start)})(.*?)({re.escape(end)})", re.DOTALL)
    found = len(pattern.findall(text))
    if found != 1:
        raise ValueError(f"{path}: expected one generated section {name!r}, found {found}")
    return pattern.sub(lambda m: m.group(1) + "".join(f"{line}\n" for line in lines) + m.group(3), text)


def _new_file(path: str, name: str) -> str:
    """A Python file written anew: a one-line docstring to replace, and the empty section."""
    start, end = _markers(path, name)
    doc = f"{Path(path).stem}: describe the benchmark here (its data, its answer, how to run it)."
    return f'"""{doc}"""\n\n{start}{end}'


def stale(root: Path = ROOT, write: bool = False, only: Collection[str] | None = None) -> list[str]:
    """The sections whose text is not what the code generates (written anew when ``write``), as ``file#name``;
    ``only``: of these files only.

    Raises:
        FileNotFoundError: a page (not a task file, which is written anew) is missing.
    """
    out = []
    for path, name, generate in sections():
        if only is not None and path not in only:
            continue
        file = root / path
        if not file.exists() and not path.endswith(".py"):
            raise FileNotFoundError(f"{file}: a page with generated sections is missing")
        text = file.read_text(encoding="utf-8") if file.exists() else _new_file(path, name)
        new = render(text, name, generate(), path)
        if new != text or not file.exists():
            out.append(f"{path}#{name}")
            if write:
                file.parent.mkdir(parents=True, exist_ok=True)
                file.write_text(new, encoding="utf-8")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a section is stale")


def run(args: argparse.Namespace) -> int:
    changed = stale(write=not args.check)
    for section in changed:
        print(f"{'stale' if args.check else 'wrote'}: {section}")
    return 1 if changed and args.check else 0
