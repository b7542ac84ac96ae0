"""Shared fixtures: a real local sandbox for every test that runs code."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("INSPECT_LOG_DIR", "logs/tests")


@pytest.fixture
async def local_sandbox():
    from sandboxes.local import LocalSandbox

    sandbox = LocalSandbox()
    try:
        yield sandbox
    finally:
        await sandbox.close()
