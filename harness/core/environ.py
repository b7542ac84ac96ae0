"""Environment variables set for the duration of a block, and put back afterwards."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def temporary_environ(**values: str | None) -> Iterator[None]:
    """``values`` in ``os.environ`` for the duration of the block; afterwards each of these variables has its earlier
    value again, or is unset if it was unset before.

    A ``None`` value leaves its variable as it is (neither set nor restored). Only the variables named here are put
    back: whatever else the block changes in the environment stays.

    >>> with temporary_environ(VLLM_BASE_URL="http://127.0.0.1:8000/v1"):
    ...     ...  # Inspect's vllm/ provider connects to that server
    """
    given = {key: value for key, value in values.items() if value is not None}
    before = {key: os.environ.get(key) for key in given}
    os.environ.update(given)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
