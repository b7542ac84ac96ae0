"""Shared fixtures: a real local sandbox for every test that runs code."""

from __future__ import annotations

import os

import pytest
from engine_leaks import MARK, kill, leftover_engines

from harness.engines.models import CACHE_ENV

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("INSPECT_LOG_DIR", "logs/tests")
os.environ[MARK] = str(os.getpid())  # inherited by every process the tests start


@pytest.fixture(scope="module", autouse=True)
def no_engine_left_running(request: pytest.FixtureRequest):
    """A module that leaves a vLLM server, engine core or Ray daemon running fails: a leftover engine holds
    gigabytes and CPU for the rest of the session and slowed or broke the tests after it."""
    yield
    left = leftover_engines(os.environ[MARK])
    if left:
        kill(left)
        listing = "\n".join(f"  {pid}: {command}" for pid, command in left.items())
        pytest.fail(f"{request.module.__name__} left engine processes running (now killed):\n{listing}")


_SESSION_MODEL_CACHE = os.environ.get(CACHE_ENV)


@pytest.fixture(scope="module", autouse=True)
def model_cache_put_back(request: pytest.FixtureRequest):
    """A module that leaves the model cache pointed at a directory of its own fails: every later module's models
    were converted into it again (a GGUF's conversion and a served directory's writing take seconds each)."""
    yield
    left, session = os.environ.get(CACHE_ENV), _SESSION_MODEL_CACHE
    if left != session:
        if session is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = session
        pytest.fail(f"{request.module.__name__} left {CACHE_ENV}={left!r} (the session's is {session!r}; put back)")


@pytest.fixture(autouse=True)
def no_docker_limit_carried_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from a process in which no task said it uses docker: the record behind Inspect's
    limit on sandboxes at once (sandboxes.inspect_provider.expect_sandboxes) is process-global."""
    from sandboxes import inspect_provider

    monkeypatch.setattr(inspect_provider, "_docker_bounds", set())


@pytest.fixture(autouse=True)
def no_model_carried_over() -> None:
    """Each test starts from a process in which no model is being evaluated: Inspect leaves the last eval's model
    active, and a task built outside an eval would check its tokenizer (harness.evals.tokenizers.check_tokenizer)."""
    from inspect_ai.model._model import active_model_context_var

    active_model_context_var.set(None)  # type: ignore[arg-type]


@pytest.fixture
async def local_sandbox():
    from sandboxes.local.sandbox import LocalSandbox

    sandbox = LocalSandbox()
    try:
        yield sandbox
    finally:
        await sandbox.close()


_docker_state: dict[str, str | None] = {}


def _docker_missing() -> str | None:
    """Why the Docker tests cannot run here, or None (checked once per session)."""
    if "reason" not in _docker_state:
        from sandboxes.docker.engine import docker_available, image_present

        if not docker_available():
            _docker_state["reason"] = "no Docker engine answers"
        elif not image_present():
            _docker_state["reason"] = "the sandbox image is not built"
        else:
            _docker_state["reason"] = None
    return _docker_state["reason"]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``docker`` skip locally without an engine, and FAIL under CI (they must run there)."""
    if item.get_closest_marker("docker") is None:
        return
    missing = _docker_missing()
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but {missing}: run `sandboxes/ci_docker.sh` before the tests", pytrace=False)
    pytest.skip(f"{missing} (start one with sandboxes/ci_docker.sh; see docs/docker.md)")


@pytest.fixture(scope="session")
def qwen3_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Qwen3's tokenizer and chat template saved as a directory (what ``-T tokenizer=`` takes)."""
    from qwen_artifacts import qwen_tokenizer

    path = tmp_path_factory.mktemp("qwen3-tokenizer")
    qwen_tokenizer("qwen3").save_pretrained(path)
    return str(path)
