"""The layering is a contract, not a drawing: pyproject's ``[tool.importlinter]`` contracts, run here.

A lower layer never imports a higher one: ``bench -> trainers -> harness -> sandboxes`` (the tools may import the
product, never the reverse); inside ``harness/``, ``evals -> reports -> engines | benchmarks -> core``; inside
``trainers/``, each face above ``core``.
"""

from __future__ import annotations

import ast
import gc
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bench", "cleaner", "harness", "sandboxes", "trainers")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        pytest.fail(f"lint-imports is not installed beside {sys.executable} (the test extra has import-linter)")
    env = {**os.environ, "PYTHONPATH": str(root)}  # before the editable install: a copy's own tree is analysed
    return subprocess.run(
        [str(exe), str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_project_keeps_its_layers() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" not in result.stdout.split("Contracts:")[-1].replace("0 broken", "")


@pytest.mark.parametrize(
    ("module", "forbidden", "message"),
    [
        ("harness/core/seeds.py", "from harness.reports import report", "harness.core is not allowed to import"),
        ("harness/benchmarks/lcb.py", "import harness.engines.replay", "harness.benchmarks is not allowed"),
        ("sandboxes/base.py", "import harness.core.protocol", "sandboxes is not allowed to import harness"),
        ("harness/core/rollout.py", "import trainers.core.reward", "harness is not allowed to import trainers"),
        ("trainers/cpu/trainer.py", "import trainers.openrlhf_plugin.executor", "trainers.cpu is not allowed"),
        ("sandboxes/base.py", "import bench.sandbox_speed", "sandboxes is not allowed to import bench"),
        ("harness/evals/solver.py", "import bench.standin", "harness is not allowed to import bench"),
    ],
)
def test_a_forbidden_import_breaks_the_contract(tmp_path: Path, module: str, forbidden: str, message: str) -> None:
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("data", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{forbidden}  # added by the test\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert message in result.stdout, result.stdout


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_nothing_imports_tasks() -> None:
    """tasks/ is the top: Inspect loads its files by path, and no package imports them.

    The garbage collector is held off while parsing. CPython 3.11 keeps one AST recursion counter per interpreter:
    a finalizer that ran inside a parse and parsed too (formatting an unraisable exception's traceback does) failed
    it with "AST constructor recursion depth mismatch" (the finalizer was a leaked subprocess transport, which
    ``test_a_flooded_call_closes_its_pipes`` now guards against).
    """
    gc.collect()
    gc.disable()
    try:
        offenders = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "tasks" in _imports(p)]
    finally:
        gc.enable()
    assert not offenders


def test_the_problem_kinds_import_nothing_of_the_project() -> None:
    """Every layer names a problem kind, so its module sits below all of them: it imports no package of ours."""
    assert not _imports(ROOT / "harness" / "core" / "kinds.py") & {*PACKAGES, "tasks"}


def test_harness_modules_live_in_their_concern() -> None:
    loose = sorted(p.name for p in (ROOT / "harness").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not loose, f"modules directly under harness/: {loose}; each belongs to a subpackage"


def _layout_map() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Layout\n", 1)[1]
    return section.split("```", 2)[1]


#: top-level folders the map leaves out: what tools write there (.gitignore keeps it out of the repository)
_UNMAPPED = {"logs", "build", "dist"}
_CODE = ("tasks", *PACKAGES)


def _top_folders() -> list[str]:
    return sorted(
        f"{p.name}/"
        for p in ROOT.iterdir()
        if p.is_dir()
        and not p.name.startswith((".", "_"))
        and not p.name.endswith(".egg-info")
        and p.name not in _UNMAPPED
    )


def _code_files(top: str) -> list[Path]:
    return sorted(p for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)


def _package_folders() -> list[str]:
    return sorted(
        {
            f"{p.parent.relative_to(ROOT).as_posix()}/"
            for top in PACKAGES
            for p in _code_files(top)
            if p.name == "__init__.py"
        }
    )


def _modules() -> list[str]:
    return [p.relative_to(ROOT).as_posix() for top in _CODE for p in _code_files(top) if p.name != "__init__.py"]


def test_the_readme_map_names_every_folder_and_module() -> None:
    """README's Layout names every top-level folder and package folder (one line each); docs/layout.md, "Where
    things live", names every module by its path and none that is gone. A new, moved or removed module gets its
    line there (docs/layout.md, "Keeping this page current", regenerates the tables)."""
    folders = set(re.findall(r"[\w.-]+(?:/[\w.-]+)*/", _layout_map()))
    missing = [f for f in _top_folders() + _package_folders() if f not in folders]
    assert not missing, f"README.md's Layout does not name {missing}"
    layout = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w./-]+\.py)`", layout))
    unnamed = [m for m in _modules() if m not in named]
    gone = sorted(m for m in named if m.split("/", 1)[0] in _CODE and not (ROOT / m).is_file())
    assert not unnamed, f"docs/layout.md does not name {unnamed}"
    assert not gone, f"docs/layout.md names modules that do not exist: {gone}"


def test_no_import_circle() -> None:
    """No module imports itself back, through any path (function-level imports included)."""
    grimp = pytest.importorskip("grimp")  # import-linter's own graph builder
    networkx = pytest.importorskip("networkx")
    graph = grimp.build_graph(*PACKAGES)
    edges = networkx.DiGraph(
        (module, imported) for module in graph.modules for imported in graph.find_modules_directly_imported_by(module)
    )
    circles = [sorted(c) for c in networkx.strongly_connected_components(edges) if len(c) > 1]
    assert not circles
