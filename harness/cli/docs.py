"""``python -m harness docs``: write the documentation's generated sections from the code (``--check``: say which
are stale, exit 1), so that a table of task arguments or benchmarks is never edited by hand.

A generated section sits between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->`` in a page;
:data:`SECTIONS` says which page holds which and what writes it. ``tests/test_docs_generated.py`` runs the check.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Callable
from pathlib import Path

from harness.benchmarks.registry import task_table
from harness.evals.tasks import argument_table

HELP = "write the docs' generated sections (task arguments, benchmarks) from the code; --check: report stale ones"

ROOT = Path(__file__).resolve().parents[2]

#: The folders whose modules docs/layout.md lists, in its order.
LAYOUT_TOPS = ("tasks", "harness", "sandboxes", "trainers")


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


#: (page, section name) -> what writes the section (its lines)
SECTIONS: dict[tuple[str, str], Callable[[], list[str]]] = {
    ("README.md", "tasks"): task_table,
    ("README.md", "task-arguments"): argument_table,
    ("docs/layout.md", "modules"): layout_modules,
}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- generated: {re.escape(name)} -->\n)(.*?)(<!-- end generated: {re.escape(name)} -->)", re.DOTALL
    )


def render(text: str, name: str, lines: list[str], page: str) -> str:
    """``text`` with section ``name`` holding ``lines``.

    Raises:
        ValueError: the page has no such section (or more than one).
    """
    pattern = _pattern(name)
    found = len(pattern.findall(text))
    if found != 1:
        raise ValueError(f"{page}: expected one generated section {name!r}, found {found}")
    return pattern.sub(lambda m: m.group(1) + "".join(f"{line}\n" for line in lines) + m.group(3), text)


def stale(root: Path = ROOT, write: bool = False) -> list[str]:
    """The sections whose text is not what the code generates (written anew when ``write``), as ``page#name``."""
    out = []
    for (page, name), generate in SECTIONS.items():
        path = root / page
        text = path.read_text(encoding="utf-8")
        new = render(text, name, generate(), page)
        if new != text:
            out.append(f"{page}#{name}")
            if write:
                path.write_text(new, encoding="utf-8")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a section is stale")


def run(args: argparse.Namespace) -> int:
    changed = stale(write=not args.check)
    for section in changed:
        print(f"{'stale' if args.check else 'wrote'}: {section}")
    return 1 if changed and args.check else 0
