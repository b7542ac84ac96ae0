"""The reference's runtime under the ``reference`` tool environment: its packages and its output allowance.

Open-CLEANER (commit 91e40ad) runs a call with the ``python3`` of its training environment (code-judge's
``PYTHON_EXECUTOR_PATH``, ``code-judge/app/config.py`` line 40), made by its README's install steps (lines 39-60):
verl's image and ``pip install -e .[sglang]`` (``verl/setup.py`` lines 26-45, 53-57), so ``import pandas``
(``verl/setup.py`` line 33) runs there. It reads a program's output whole (``code-judge/app/libs/executors/
executor.py`` line 84, ``communicate`` with no bound) and cuts it afterwards (``app/worker_manager.py`` lines 84-86),
so 6 MB written to file descriptor 1 is a success there.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_tool_env import call, cut, first_result

from harness.core.toolenv import PROJECT, REFERENCE, ToolEnv
from sandboxes import reference_runtime as rr
from sandboxes.backends import get_backend
from sandboxes.runtimes import REFERENCE_OUTPUT_BYTES, runtime_options

#: A git directory of Open-CLEANER (a bare clone or a checkout's ``.git``) holding the pinned commit, when one is at
#: hand: ``CLEANER_REFERENCE_GIT=<path>``; the test that reads it skips without one.
MIRROR = Path(os.environ.get("CLEANER_REFERENCE_GIT", "")) if os.environ.get("CLEANER_REFERENCE_GIT") else None

# ----------------------------------------------------------------------------- the list and its derivation

#: Install files in the reference's shape (what each reader takes), written by the tests.
STAND_IN = {
    rr.README: "Install:\n```bash\n" + "\n".join(rr.README_COMMANDS) + "\n```\n",
    rr.CODE_JUDGE_REQUIREMENTS: "redis\nmath_verify\n",
    rr.VERL_SETUP: (
        'install_requires = [\n    "numpy<2.0.0",\n    "pandas",\n]\n'
        'SGLANG_REQUIRES = [\n    "sglang[srt,openai]==0.5.5",\n    "torch==2.8.0",\n]\n'
    ),
    rr.IMAGE_BASE: 'RUN pip install --no-cache-dir "numpy<2.0.0" pandas \\\n    ray[default] pytest\n',
    rr.IMAGE_APP: 'RUN pip install --no-cache-dir "sglang[all]==0.5.2"\n',
}


def stand_in(root: Path, changed: dict[str, str] | None = None) -> dict[str, str]:
    """Write the stand-in tree under ``root``; return the sha256 of each file (the pins it is read with)."""
    files = {**STAND_IN, **(changed or {})}
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return {path: hashlib.sha256(text.encode()).hexdigest() for path, text in files.items()}


def test_derive_keeps_what_a_program_imports_and_cites_where_it_comes_from(tmp_path: Path) -> None:
    text = rr.derive(tmp_path, stand_in(tmp_path))
    lines = {line.split("==")[0]: line for line in text.splitlines() if not line.startswith("#")}
    assert list(lines) == [*rr.KEPT, *rr.NEEDED]
    assert lines["pandas"] == f"pandas=={rr.KEPT['pandas'].pin}  # pandas: verl/setup.py:3, {rr.IMAGE_BASE}:1"
    assert f"{rr.VERL_SETUP}:6" in lines["scipy"]  # sglang brings scipy
    assert "torch" not in lines and "ray" not in lines and "redis" not in lines


def test_the_committed_list_has_the_tables_pins() -> None:
    pins = {name: kept.pin for name, kept in rr.KEPT.items()} | {name: pin for name, (pin, _) in rr.NEEDED.items()}
    assert rr.pinned_packages() == pins


@pytest.mark.skipif(
    MIRROR is None or not MIRROR.exists() or shutil.which("git") is None,
    reason="no git directory of Open-CLEANER (CLEANER_REFERENCE_GIT)",
)
def test_the_committed_list_is_what_derive_writes_from_the_pinned_commit(tmp_path: Path) -> None:
    archive = subprocess.run(
        ["git", f"--git-dir={MIRROR}", "archive", rr.REFERENCE_COMMIT, *rr.SOURCES], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive, check=True)
    assert rr.derive(tmp_path) == rr.RUNTIME_FILE.read_text()


def test_another_commit_is_refused_naming_the_file(tmp_path: Path) -> None:
    pins = stand_in(tmp_path)
    with pytest.raises(rr.ReferenceRuntimeError, match=r"setup.py: sha256 \w+ is not that of verl/setup.py at Open"):
        rr.read_requirements(tmp_path, {**pins, rr.VERL_SETUP: rr.SOURCES[rr.VERL_SETUP]})


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        ({rr.CODE_JUDGE_REQUIREMENTS: "redis\nmatplotlib\n"}, r"code-judge/requirements.txt:2: 'matplotlib'"),
        (
            {rr.README: "pip install -r code-judge/requirements.txt\n"},
            "the install command 'pip install -e code-judge'",
        ),
        ({rr.VERL_SETUP: 'install_requires = ["pandas"]\n'}, "no list SGLANG_REQUIRES"),
        (
            {rr.VERL_SETUP: 'install_requires = ["numpy"]\nSGLANG_REQUIRES = []\n'},
            "networkx: none of torch is required by the install files",
        ),
    ],
    ids=["unclassified", "install-step", "setup-shape", "kept-gone"],
)
def test_a_changed_shape_is_refused_naming_where(tmp_path: Path, changed: dict[str, str], message: str) -> None:
    with pytest.raises(rr.ReferenceRuntimeError, match=message):
        rr.derive(tmp_path, stand_in(tmp_path, changed))


# ----------------------------------------------------------------------------- the profile chooses the sandbox


def test_each_profile_names_its_runtime_and_the_reference_keeps_a_programs_memory() -> None:
    from sandboxes.docker.policy import DockerConfig, memory_budget

    assert (PROJECT.runtime, REFERENCE.runtime) == ("project", "reference")
    assert runtime_options("project", "docker") == runtime_options("project", "local") == {}
    options = runtime_options("reference", "docker")
    assert options["max_output"] == REFERENCE_OUTPUT_BYTES > 6_000_000 and options["image"].startswith(
        "cleaner-sandbox-reference:"
    )
    # the worker may hold two larger streams: the container grows by them, the program's share does not shrink
    assert memory_budget(DockerConfig(**options))["program"] == memory_budget(DockerConfig())["program"]


def test_an_eval_under_reference_asks_its_sandbox_for_the_reference_runtime() -> None:
    from harness.evals.tasks import sandbox_spec
    from sandboxes.inspect_provider import sandbox_metadata

    spec = sandbox_spec("local", REFERENCE.runtime)
    assert spec.config.runtime == "reference"
    assert sandbox_metadata(spec.config)["runtime"] == "reference"
    assert "runtime" not in sandbox_metadata(sandbox_spec("local", PROJECT.runtime).config)


def test_local_names_the_modules_its_interpreter_lacks(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        backend = get_backend("local", require_modules=("json", "no_such_module_here"))
    assert backend.describe()["missing_modules"] == ["no_such_module_here"]
    assert "cannot import no_such_module_here" in caplog.text


# ----------------------------------------------------------------------------- what a program meets

#: Output past ``sys.stdout``: file descriptor 1 directly, and a child process's.
FD1 = "import os\nos.write(1, b'x' * 6_000_000)\nNone"
CHILD = "import subprocess, sys\nsubprocess.run([sys.executable, '-c', \"print('x' * 6_000_000)\"])\nNone"
FLOOD = f"import os\nfor _ in range({REFERENCE_OUTPUT_BYTES // 2**20 + 1}):\n    os.write(1, b'x' * 2**20)"
#: the reference shows a stream's first 1000 characters, cut to 256 for the model
SUCCESS = cut("Tool call success\nstdout: " + "x" * 1000)


@pytest.fixture
def reference_image() -> None:
    """The ``reference`` image: absent, its tests skip (and fail under CI, which builds it: sandboxes/ci_docker.sh)."""
    from sandboxes.image import build_command, image_exists, image_tag

    tag = image_tag("reference")
    if not image_exists(tag):
        message = f"the reference sandbox image {tag} is not built: {build_command(tag)}"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


async def seen(env: ToolEnv, code: str, backend_name: str) -> str | None:
    backend = get_backend(backend_name, runtime=env.runtime)
    sandbox = await backend.acquire()
    try:
        return await first_result(env, call(code, env.tool_name), sandbox)
    finally:
        await backend.release(sandbox)
        await backend.shutdown()


@pytest.mark.parametrize("code", [FD1, CHILD], ids=["fd1", "child"])
async def test_reference_output_past_stdout_is_a_success_locally(code: str) -> None:
    assert await seen(REFERENCE, code, "local") == SUCCESS


async def caps(env: ToolEnv, backend_name: str) -> tuple[str | None, str | None]:
    """The error kinds of 6 MB written to fd 1, and of one MiB more than the reference's cap, on a sandbox made for
    ``env``."""
    backend = get_backend(backend_name, runtime=env.runtime)
    sandbox = await backend.acquire()
    try:
        six = await sandbox.run_python("import os\nos.write(1, b'x' * 6_000_000)", timeout=20)
        past = await sandbox.run_python(FLOOD, timeout=20)
        return six.error_kind, past.error_kind
    finally:
        await backend.release(sandbox)
        await backend.shutdown()


async def test_each_profiles_output_cap_locally() -> None:
    assert await caps(REFERENCE, "local") == (None, "OutputLimitExceeded")
    assert await caps(PROJECT, "local") == ("OutputLimitExceeded", "OutputLimitExceeded")


@pytest.mark.docker
@pytest.mark.usefixtures("reference_image")
async def test_each_profiles_output_cap_on_docker() -> None:
    assert await caps(REFERENCE, "docker") == (None, "OutputLimitExceeded")
    assert await caps(PROJECT, "docker") == ("OutputLimitExceeded", "OutputLimitExceeded")


@pytest.mark.docker
@pytest.mark.usefixtures("reference_image")
@pytest.mark.parametrize("code", [FD1, CHILD], ids=["fd1", "child"])
async def test_reference_output_past_stdout_is_a_success_on_docker(code: str) -> None:
    assert await seen(REFERENCE, code, "docker") == SUCCESS


PANDAS = "import pandas as pd\npd.DataFrame({'a': [1, 2, 3]})['a'].sum()"


@pytest.mark.docker
@pytest.mark.usefixtures("reference_image")
async def test_pandas_runs_under_reference_on_docker() -> None:
    assert await seen(REFERENCE, PANDAS, "docker") == "Tool call success\nstdout: 6\n"
    versions = (
        "import numpy, pandas, scipy, sympy, networkx\n[m.__version__ for m in (numpy, pandas, scipy, sympy, networkx)]"
    )
    pins = [rr.KEPT[name].pin for name in ("numpy", "pandas", "scipy", "sympy", "networkx")]
    assert await seen(REFERENCE, versions, "docker") == f"Tool call success\nstdout: {pins!r}\n"


@pytest.mark.docker
async def test_pandas_fails_under_project_on_docker() -> None:
    result = await seen(PROJECT, "import pandas", "docker")
    assert result is not None and "ModuleNotFoundError: No module named 'pandas'" in result
