"""``python -m bench``: the tools, listed; ``python -m bench NAME ARGS...`` runs ``python -m bench.<module> ARGS...``.

The list is read from this folder (each module that runs as a command: its name and the first line of its
docstring), so a tool added here is listed without editing anything else; a module without a ``__main__`` block is
a part of the tools. Nothing is imported to list them: a tool's own imports (vLLM, torch, Docker) are paid only by the
tool that runs.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _runs(tree: ast.Module) -> bool:
    """Whether a module runs as a command (``if __name__ == "__main__":``); the others are the tools' parts."""
    return any(
        isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test)
        for node in tree.body
    )


def tools() -> dict[str, tuple[str, str]]:
    """Each tool's command name -> (its module, the first line of its docstring), in name order."""
    found = {}
    for path in sorted(HERE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if path.name.startswith("_") or not _runs(tree):
            continue
        doc = ast.get_docstring(tree) or ""
        found[path.stem.replace("_", "-")] = (f"bench.{path.stem}", doc.splitlines()[0] if doc else "")
    return found


def usage() -> str:
    found = tools()
    width = max(len(name) for name in found) + 2
    lines = ["usage: python -m bench NAME [ARGS...]   (python -m bench NAME --help: its options)", "", "tools:"]
    lines += [f"  {name.ljust(width)}{line}" for name, (_, line) in found.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    found = tools()
    if argv[0] not in found:
        print(f"error: no tool {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", found[argv[0]][0], *argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":  # in place of this process: signals and the exit status are the tool's own
        os.execv(sys.executable, command)
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
