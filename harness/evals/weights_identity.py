"""What identifies the weights behind an Inspect model, so that generations shared by ``share_prefix`` are keyed by
the weights and not only by the model's name.

Two checkpoints can be served under one name or one path (a model retrained into the same directory, a server
restarted on another checkpoint): a key by name alone would let one read the other's generations. The identity of a
model's weights is, by provider:

* the embedded provider (``embedded/<spec>``): a fingerprint of the files it loads, the base GGUF or model directory
  and, for a LoRA adapter, the embedded base and the adapter's directory, with the dtype it was loaded in;
* the replay provider (``replay/<script>``): a hash of the script it replays;
* a served model (``vllm/``, ``sglang/``, ``openai-api/`` and other providers with an OpenAI client): the server's
  ``/v1/models`` entry for the model (its ``id``, ``root``, ``parent`` and any revision) and that of its parent (the
  base of a LoRA adapter), with a fingerprint of each ``root`` that is a local path readable here;
* any other provider whose model name is a local path: a fingerprint of that path.

Anything else has no identity here and raises :class:`WeightsUnknownError`. A fingerprint (:func:`path_fingerprint`)
hashes every file's relative path, size and content, except that a file over :data:`LARGE_FILE_BYTES` is represented
by its size, modification time and first and last :data:`EDGE_BYTES`, so that a checkpoint's weights are
fingerprinted without reading them whole; rewriting a file changes its modification time.

The identity is computed once per provider instance (per loaded model for the embedded provider, whose instances
share one), so it describes the weights as they were when the model first generated.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from inspect_ai.model import Model, ModelAPI

#: Files larger than this are fingerprinted by size, modification time and their first and last bytes.
LARGE_FILE_BYTES = 64 * 1024 * 1024
#: How many bytes of each end of a large file are hashed.
EDGE_BYTES = 1024 * 1024

_known: dict[int, tuple[weakref.ref[object], str]] = {}
_locks: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()


class WeightsUnknownError(RuntimeError):
    """The weights behind a model cannot be identified here, so its generations cannot be shared safely."""

    def __init__(self, model: str, reason: str) -> None:
        super().__init__(
            f"share_prefix cannot be used safely with model {model!r}: {reason}. Generations shared under a "
            "share_prefix id are keyed by the model's weights, and without them another checkpoint served under the "
            "same name could read this one's generations. Run without share_prefix (drop -T share_prefix=<id>; "
            "`python -m harness compare` and `demo` take --no-share-prefix)."
        )
        self.model = model
        self.reason = reason


async def weights_identity(model: Model) -> str:
    """A digest that differs between models with different weights (see the module docstring).

    Raises :class:`WeightsUnknownError` when the model's weights cannot be identified.
    """
    owner = _owner(model.api)
    known = _remembered(owner)
    if known is not None:
        return known
    lock = _locks.get(id(owner))
    if lock is None:
        lock = _locks[id(owner)] = asyncio.Lock()
    async with lock:
        known = _remembered(owner)
        if known is None:
            known = _digest(await _identity_parts(model))
            _remember(owner, known)
        return known


def path_fingerprint(path: Path) -> str:
    """SHA-256 over a file's, or a directory's files', relative paths, sizes and contents.

    Hidden files and directories (names starting with ``.``: download metadata, locks) are left out; symbolic links
    are followed. A file over :data:`LARGE_FILE_BYTES` contributes its size, modification time and first and last
    :data:`EDGE_BYTES` instead of its content. Raises :class:`FileNotFoundError` when ``path`` does not exist.
    """
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist")
    files = {".": root} if root.is_file() else {f.relative_to(root).as_posix(): f for f in _files(root)}
    digest = hashlib.sha256()
    for relative in sorted(files):
        digest.update(f"{relative}\0{file_fingerprint(files[relative])}\n".encode())
    return digest.hexdigest()


def file_fingerprint(path: Path) -> str:
    """One file's size and content digest (for a file over :data:`LARGE_FILE_BYTES`: its size, modification time
    and the digest of its first and last :data:`EDGE_BYTES`)."""
    stat = path.stat()
    with open(path, "rb") as f:
        if stat.st_size <= LARGE_FILE_BYTES:
            return f"{stat.st_size}:{hashlib.file_digest(f, 'sha256').hexdigest()}"
        digest = hashlib.sha256(f.read(EDGE_BYTES))
        f.seek(-EDGE_BYTES, os.SEEK_END)
        digest.update(f.read(EDGE_BYTES))
    return f"{stat.st_size}:{stat.st_mtime_ns}:{digest.hexdigest()}"


def _files(root: Path) -> Iterator[Path]:
    """The regular files under ``root``, hidden entries left out, each directory visited once."""
    seen: set[tuple[int, int]] = set()
    for directory, subdirectories, names in os.walk(root, followlinks=True):
        stat = os.stat(directory)
        if (stat.st_dev, stat.st_ino) in seen:  # a symbolic link back into the tree
            subdirectories[:] = []
            continue
        seen.add((stat.st_dev, stat.st_ino))
        subdirectories[:] = [d for d in subdirectories if not d.startswith(".")]
        for name in names:
            if not name.startswith(".") and Path(directory, name).is_file():
                yield Path(directory, name)


async def _identity_parts(model: Model) -> list[str]:
    """What identifies the weights of ``model``, by provider."""
    from harness.evals.embedded import EmbeddedAPI
    from harness.evals.replay_provider import ReplayAPI

    api = model.api
    if isinstance(api, EmbeddedAPI):
        return embedded_identity_parts(api.model_name, str(api.loaded.model.dtype))
    if isinstance(api, ReplayAPI):
        return ["replay", repr((api.script.entries, api.script.default))]
    client = _openai_client(api)
    local = _local_path(api.model_name)
    if client is not None:
        try:
            return await _served_parts(str(model), api, client)
        except WeightsUnknownError:
            if local is None:
                raise
    if local is not None:
        return ["path", str(local), _fingerprint(str(model), local)]
    raise WeightsUnknownError(
        str(model),
        "its provider serves no OpenAI-compatible /v1/models, is neither the embedded nor the replay provider, "
        "and its name is not a local path",
    )


def embedded_identity_parts(spec: str | None, dtype: str) -> list[str]:
    """What identifies the embedded provider's model ``spec`` loaded in ``dtype``: the fingerprint of its GGUF file
    or model directory, and for a LoRA adapter those of the embedded base and the adapter's directory."""
    from harness.engines.models import embedded_gguf_path, resolve_spec

    kind, path = resolve_spec(spec)
    parts = ["embedded", kind, dtype]
    if kind == "adapter":
        parts.append(path_fingerprint(embedded_gguf_path()))
    return parts + [path_fingerprint(path)]


async def _served_parts(name: str, api: ModelAPI, client: Any) -> list[str]:
    """The ``/v1/models`` entry the provider's requests name, and its parent's, with a fingerprint of each local
    ``root``."""
    import openai

    served = api.service_model_name() if hasattr(api, "service_model_name") else api.model_name
    try:
        listing = await client.models.list()
    except openai.OpenAIError as exc:
        raise WeightsUnknownError(name, f"its server's /models did not answer ({exc})") from exc
    entries = {str(e.id): e.to_dict() for e in listing.data}
    entry = entries.get(served)
    if entry is None and len(entries) == 1:  # a server that serves one model whatever the request names
        entry = next(iter(entries.values()))
    if entry is None:
        raise WeightsUnknownError(name, f"its server lists no model {served!r} in /models (it lists {sorted(entries)})")
    chain = [entry]
    parent = entries.get(str(entry["parent"])) if entry.get("parent") else None
    if parent is not None and parent is not entry:
        chain.append(parent)
    parts = ["served"]
    for card in chain:
        root = card.get("root")
        if not root:
            raise WeightsUnknownError(
                name, f"its server's /models entry {card.get('id')!r} does not say which weights it serves (no root)"
            )
        fields = {k: v for k, v in card.items() if k in ("id", "root", "parent") or "revision" in k}
        parts.append(json.dumps(fields, sort_keys=True, default=str))
        local = Path(str(root)).expanduser()
        if local.exists():
            parts.append(_fingerprint(name, local))
    return parts


def _openai_client(api: ModelAPI) -> Any | None:
    """The provider's OpenAI client, if it talks to an OpenAI-compatible server."""
    try:
        import openai
    except ImportError:
        return None
    client = getattr(api, "client", None)
    return client if isinstance(client, openai.AsyncOpenAI) else None


def _local_path(name: str) -> Path | None:
    """``name`` as an existing local file or directory, or None."""
    try:
        path = Path(name).expanduser()
        return path if path.exists() else None
    except (OSError, ValueError):
        return None


def _fingerprint(name: str, path: Path) -> str:
    """:func:`path_fingerprint`, with a file that cannot be read reported as unknown weights of model ``name``."""
    try:
        return path_fingerprint(path)
    except OSError as exc:
        raise WeightsUnknownError(name, f"its weights at {path} cannot be read here ({exc})") from exc


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def _owner(api: ModelAPI) -> object:
    """What an identity is remembered for: the loaded model for the embedded provider, else the provider instance."""
    from harness.evals.embedded import EmbeddedAPI

    return api.loaded if isinstance(api, EmbeddedAPI) else api


def _remembered(owner: object) -> str | None:
    known = _known.get(id(owner))
    return known[1] if known is not None and known[0]() is owner else None


def _remember(owner: object, identity: str) -> None:
    key = id(owner)

    def forget(ref: weakref.ref[object]) -> None:
        if _known.get(key, (None,))[0] is ref:
            del _known[key]

    _known[key] = (weakref.ref(owner, forget), identity)
