"""Say what is missing before an engine is started, not after it failed to start.

Inspect's ``vllm/`` provider starts its server as the command ``vllm serve ...``, found on ``PATH``.
Run from a virtualenv's Python whose ``bin`` is not on ``PATH`` (``.tox/cleaner/bin/python -m ...``),
that command is not found: every sample then tries to start a server, fails, and the eval errors with
no word of why. :func:`check_vllm_command` finds that out first and says how to fix it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any


class EngineCommandMissing(RuntimeError):
    """The command that starts an engine is not where its starter looks for it."""


def vllm_would_start(api: Any) -> bool:
    """Whether Inspect's ``vllm/`` provider ``api`` will start a server at its first request: it has none yet and
    was given no endpoint (``model_base_url``, ``-M base_url``/``port``, ``VLLM_BASE_URL``). Reads the provider's
    own state, as its server resolution (``_resolve_server``) does; any other provider: False."""
    if getattr(api, "_ensure_server_started", None) is None:
        return False
    server = getattr(api, "_server", None)
    if getattr(server, "base_url", None) is not None or getattr(api, "base_url", None) is not None:
        return False
    return not (getattr(api, "_init_base_url", None) or os.environ.get("VLLM_BASE_URL"))


def check_vllm_command() -> str:
    """The ``vllm`` executable Inspect's ``vllm/`` provider will run, or an error saying how to make it found."""
    found = shutil.which("vllm")
    if found:
        return found
    bindir = Path(sys.executable).parent
    beside = bindir / "vllm"
    hint = (
        f"this Python's environment has one ({beside}): activate it (. {bindir}/activate) or put {bindir} on PATH"
        if beside.exists()
        else f"install vLLM into this environment ({sys.executable} -m pip install vllm; on CPU: tox -e py)"
    )
    raise EngineCommandMissing(
        "Inspect's vllm/ provider starts its server with the command `vllm serve`, and no `vllm` executable is on "
        f"PATH; {hint}. Or point it at a running server: -M base_url=http://127.0.0.1:PORT/v1 (or VLLM_BASE_URL)."
    )
