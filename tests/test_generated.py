"""Every generated section is what the code generates now (``python -m harness generate`` writes them): README.md's
tables, docs/layout.md's modules, the task functions of ``tasks/`` and ``cleaner/tasks.py``; and after ``pip install``
the tasks run by name from any directory (``inspect eval cleaner/<name>``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log

from harness.benchmarks.registry import BENCHMARKS
from harness.cli import generate

ROOT = Path(__file__).resolve().parents[1]
INSPECT = Path(sys.executable).with_name("inspect")


def test_every_generated_section_is_current() -> None:
    assert generate.stale() == [], "run: python -m harness generate"
    assert {f"tasks/{name}.py" for name in BENCHMARKS} <= {path for path, _, _ in generate.sections()}


def test_a_stale_section_is_found_and_rewritten(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copy(ROOT / "tasks" / "gpqa.py", tmp_path / "tasks" / "gpqa.py")
    readme, task = tmp_path / "README.md", tmp_path / "tasks" / "gpqa.py"
    readme.write_text(readme.read_text(encoding="utf-8").replace("| `seed` |", "| `sed` |"), encoding="utf-8")
    task.write_text(task.read_text(encoding="utf-8").replace("seed: int = 0", "seed: int = 1"), encoding="utf-8")
    only = ["README.md", "tasks/gpqa.py", "tasks/aime24.py"]
    expected = ["README.md#task-arguments", "tasks/aime24.py#task", "tasks/gpqa.py#task"]
    assert sorted(generate.stale(tmp_path, only=only)) == expected
    assert not (tmp_path / "tasks" / "aime24.py").exists()  # a check writes nothing
    assert sorted(generate.stale(tmp_path, write=True, only=only)) == expected
    assert generate.stale(tmp_path, only=only) == []
    assert "| `seed` |" in readme.read_text(encoding="utf-8")
    assert task.read_text(encoding="utf-8") == (ROOT / "tasks" / "gpqa.py").read_text(encoding="utf-8")
    written = (tmp_path / "tasks" / "aime24.py").read_text(encoding="utf-8")  # a registered task without a file
    assert written.startswith('"""aime24: describe the benchmark here') and "def aime24(" in written


def test_a_file_without_its_section_or_a_missing_page_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="README.md: expected one generated section 'task-arguments', found 0"):
        generate.render("no markers here", "task-arguments", ["x"], "README.md")
    with pytest.raises(FileNotFoundError, match="a page with generated sections is missing"):
        generate.stale(tmp_path, only=["README.md"])


def _install(source: Path, into: Path, editable: bool) -> tuple[list[str], dict[str, str]]:
    """Install ``source`` as a user would; the command line that runs ``inspect`` there, and its environment.

    ``pip install .``: into a site-packages of its own, before the checkout's editable install on the path.
    ``pip install -e .``: into a virtual environment over this one's packages, where its finder comes before the
    checkout's editable install (``__editable__*.pth`` sorts before ``_parent.pth``) and the checkout is not on the
    path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if not editable:
        site = into / "site-packages"
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site)]
        subprocess.run([*pip, str(source)], check=True, capture_output=True, timeout=300)
        cmd = [str(INSPECT)] if INSPECT.exists() else [sys.executable, "-m", "inspect_ai"]
        return cmd, {**env, "PYTHONPATH": str(site)}
    venv = into / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = venv.glob("lib/python*/site-packages")  # this environment's packages (and its pip) beneath the copy's
    (site / "_parent.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(source)]
    subprocess.run(pip, check=True, capture_output=True, timeout=300, env=env)
    where = [python, "-c", "import cleaner; print(cleaner.__file__)"]
    found = subprocess.run(where, cwd=into, env=env, capture_output=True, text=True, check=True).stdout
    assert Path(found.strip()).is_relative_to(source), found  # the copy is what runs, not the checkout
    return [python, "-m", "inspect_ai"], env


@pytest.mark.slow
@pytest.mark.parametrize("editable", [False, True], ids=["pip-install", "pip-install-editable"])
def test_an_installed_harness_runs_a_task_by_name_from_any_directory(tmp_path: Path, editable: bool) -> None:
    """``pip install .`` or ``pip install -e .`` of a copy of the checkout, then ``inspect eval cleaner/aime24`` from
    a directory with no tasks/: Inspect finds the task by the entry point and names it with the package's prefix."""
    source = tmp_path / "src"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "pyproject.toml", "README.md", "cleaner", "harness",
         "sandboxes", "trainers"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for name in files:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, source / name)
    cmd, env = _install(source, tmp_path, editable)
    run = tmp_path / "elsewhere"
    run.mkdir()
    cmd += ["eval", "cleaner/aime24", "--model", "replay/aime24.yaml", "-T", "data=fixture", "-T", "sandbox=local"]
    cmd += ["--limit", "1", "--display", "none", "--log-dir", str(run / "logs")]
    done = subprocess.run(cmd, cwd=run, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [path] = (run / "logs").glob("*.eval")
    log = read_eval_log(str(path))
    assert log.status == "success", log.error
    assert log.eval.task == "cleaner/aime24"
    assert (log.eval.metadata or {})["sandbox"]["backend"] == "local"
    assert log.results is not None and log.results.scores[0].metrics["mean"].value == 1.0


def test_docs_benchmarks_names_the_source_of_every_registered_benchmark() -> None:
    """docs/benchmarks.md's table of sources (hub repository, revision, split) is written by hand: it has a row for
    each registered benchmark and none for another."""
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    table = page[page.index("| benchmark | hub repository |") :].split("\n\n", 1)[0]
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:]]
    assert rows == list(BENCHMARKS)
