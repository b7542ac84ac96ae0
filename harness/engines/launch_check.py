"""Say what is missing before an engine is started, not after it failed to start.

Inspect's ``vllm/`` provider starts its server as the command ``vllm serve ...``, found on ``PATH``.
Run from a virtualenv's Python whose ``bin`` is not on ``PATH`` (``.tox/cleaner/bin/python -m ...``),
that command is not found: every sample then tries to start a server, fails, and the eval errors with
no word of why. :func:`check_vllm_command` finds that out first and says how to fix it.

Inspect's ``sglang/`` provider starts its server as ``python -m sglang.launch_server ...``, with the ``python``
found on ``PATH``, when the model is created: before a task file is loaded, so before any task, solver or
hook of this project runs under ``inspect eval``. A ``python`` that cannot import SGLang exits at once, and
Inspect says only that the server "exited unexpectedly"; without SGLang in Inspect's own environment it says
to install it, not that a running server would do. :func:`check_sglang_command` says both, for the project's
commands that hand Inspect a model (``python -m harness compare``), before Inspect creates it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: How to point a provider at a server that runs already (``-M base_url=`` collides with Inspect's own
#: ``base_url`` argument); ``{env}`` is the provider's environment variable.
RUNNING_SERVER = (
    "Or point it at a running server: -M port=PORT (a server on localhost), inspect eval --model-base-url "
    "http://HOST:PORT/v1, or {env}=http://HOST:PORT/v1."
)


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
        f"PATH; {hint}. " + RUNNING_SERVER.format(env="VLLM_BASE_URL")
    )


def sglang_would_start(model: str, base_url: str | None = None, model_args: Mapping[str, Any] | None = None) -> bool:
    """Whether Inspect's ``sglang/`` provider, created for ``model`` (``sglang/<name>``) with these arguments, starts
    a server of its own: it is given no endpoint (a base URL, ``-M port``, ``SGLANG_BASE_URL``), as the provider's
    constructor decides. Any other provider: False."""
    if model.split("/", 1)[0] != "sglang":
        return False
    args = model_args or {}
    return not (base_url or args.get("base_url") or args.get("port") or os.environ.get("SGLANG_BASE_URL"))


def check_sglang_command() -> str:
    """The ``python`` on ``PATH`` that Inspect's ``sglang/`` provider starts its server with, when both it and
    this process (where the provider imports ``sglang`` first) can import SGLang; else an error saying what is
    missing and how to fix it."""
    found = shutil.which("python")
    here = importlib.util.find_spec("sglang") is not None
    if here and found is not None and _imports_sglang(found):
        return found
    bindir = Path(sys.executable).parent
    activate = f"activate it (. {bindir}/activate) or put {bindir} first on PATH"
    if not here:
        what = f"this Python ({sys.executable}) cannot import sglang"
        ours = found is not None and Path(found).parent.resolve() == bindir.resolve()
        fix = f"install SGLang into its environment ({sys.executable} -m pip install sglang)" + (
            "" if ours else f" and {activate}, so that its python is the one on PATH"
        )
    else:
        what = f"the `python` on PATH ({found}) cannot import sglang" if found else "no `python` is on PATH"
        fix = f"this Python's environment has SGLang ({sys.executable}): {activate}"
    raise EngineCommandMissing(
        "Inspect's sglang/ provider imports sglang and starts its server with the command "
        f"`python -m sglang.launch_server` (the python on PATH), and {what}; {fix}. "
        + RUNNING_SERVER.format(env="SGLANG_BASE_URL")
    )


def _imports_sglang(python: str) -> bool:
    """Whether ``python`` finds the ``sglang`` package (looked up, not imported: SGLang's import is slow)."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)"
    try:
        return subprocess.run([python, "-c", probe], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
