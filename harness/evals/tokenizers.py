"""The tokenizer a response budget counts tool output with, found for an Inspect model.

Under a ``response`` budget (the ``reference`` tool environment) a tool result's tokens count, as the
model's own chat template renders it (:func:`harness.core.chat.tool_result_counter`). Inspect's served
providers do not tokenize, so the tokenizer is found here, once per process and model:

* ``-T tokenizer=<hub id or path>`` when given;
* the embedded provider's own tokenizer;
* otherwise the model's name as a hub id or path (``vllm/Qwen/Qwen3-4B-Instruct-2507``,
  ``sglang//models/ckpt``), as the serving engine itself loads it; a provider that says it has no tokenizer
  (``tokenizer_free``: the replay model) needs ``-T tokenizer``.

A task checks it when it is built (:func:`check_tokenizer`), so that a model without one fails the eval
before its first sample, not every sample after a search of the hub.

The same tokenizer gives the model's end-of-turn token, which the ``reference`` call span ends with
(:func:`harness.core.chat.tool_env_for`). Without a response budget only a tokenizer at hand is used for that
(:func:`known_tokenizer`: ``-T tokenizer`` or the embedded provider's); none is searched for.
"""

from __future__ import annotations

import functools
from typing import Any

from inspect_ai.model import Model


class TokenizerError(RuntimeError):
    """No tokenizer could be found or loaded for a response budget."""


@functools.cache
def _load(name: str) -> Any:
    from transformers import AutoTokenizer

    try:  # a local directory or the hub's cache first: no network round trips (and retries) for what is here
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception:
        pass
    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as exc:  # hub errors, a missing path, a gated repo: all say the same to the user
        raise TokenizerError(
            f"the response budget counts tool output in tokens, and no tokenizer could be loaded from {name!r} "
            f"({type(exc).__name__}: {exc}); pass -T tokenizer=<hub id or local path> of the model's tokenizer"
        ) from exc


def known_tokenizer(model: Model, tokenizer: str | None = None) -> Any:
    """The tokenizer of ``model`` where one is at hand without a search: ``-T tokenizer=``, or the embedded
    provider's own; None otherwise."""
    if tokenizer:
        return _load(tokenizer)
    loaded = getattr(model.api, "loaded", None)  # the embedded provider holds its model and tokenizer
    return getattr(loaded, "tokenizer", None) if loaded is not None else None


def model_tokenizer(model: Model, tokenizer: str | None = None) -> Any:
    """The tokenizer of ``model`` (see the module docstring for where it comes from)."""
    known = known_tokenizer(model, tokenizer)
    if known is not None:
        return known
    if getattr(model.api, "tokenizer_free", False):
        raise TokenizerError(
            f"the response budget counts tool output in tokens, and model {str(model)!r} has no tokenizer; "
            "pass -T tokenizer=<hub id or local path> of the tokenizer to count with"
        )
    return _load(model.api.model_name)


def check_tokenizer(tokenizer: str | None = None) -> None:
    """Load the tokenizer of the model being evaluated now (a :class:`TokenizerError` when there is none).

    Called when a task with a response budget is built, inside an eval (Inspect makes the model active
    before it builds the tasks); outside one (no active model) there is nothing to check yet.
    """
    from inspect_ai.model._model import active_model

    model = active_model()
    if model is not None:
        model_tokenizer(model, tokenizer)
