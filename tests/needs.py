"""Optional dependencies of test modules: skipped on a developer's machine, REQUIRED under CI.

``pytest.importorskip`` skips silently, so a CI job without OpenRLHF or TRL would pass
without running the trainer tests at all. Under CI (the ``CI`` environment variable, set
by every CI service) or ``CLEANER_REQUIRE_DEPS`` (set by ``.ci/run``'s first stage, which runs the
README's command as a newcomer does, without ``CI``, so that the Docker tests skip there) :func:`import_or_skip`
fails instead, as the Docker-marked tests do under ``CI``.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def import_or_skip(module: str) -> ModuleType:
    """The imported ``module``; when it cannot be imported, skip the test module, or fail it under CI."""
    if not (os.environ.get("CI") or os.environ.get("CLEANER_REQUIRE_DEPS")):
        return pytest.importorskip(module)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(
            f"CI or CLEANER_REQUIRE_DEPS is set but {module} cannot be imported ({exc}): install it for these tests",
            pytrace=False,
        )


def needs_vllm() -> None:
    """Skip (or, under CI, fail) unless vLLM is installed and can run here (``vllm_missing`` says why not)."""
    from harness.engines.serve import vllm_missing

    import_or_skip("vllm")
    if reason := vllm_missing():
        if os.environ.get("CI") or os.environ.get("CLEANER_REQUIRE_DEPS"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
