"""The tokenizer a rollout needs, found for an Inspect model, and the model's tool environment.

A rollout needs the model's tokenizer for two things:

* under a ``response`` budget (the ``reference`` tool environment) a tool result's tokens count, as the model's own
  chat template renders it (:func:`harness.core.chat.tool_result_counter`);
* under ``reference`` with SAAR on, a call's span runs to the end of its turn, the model's end-of-turn token
  included (:attr:`harness.core.rollout.RolloutConfig.compares_turn_ends`), and that token is read from the
  tokenizer's chat template (:func:`harness.core.chat.tool_env_for`).

Inspect's served providers do not tokenize, so the tokenizer is found here, once per process and model:

* ``-T tokenizer=<hub id or path>`` when given;
* the embedded provider's own tokenizer;
* otherwise the model's name as a hub id or path (``vllm/Qwen/Qwen3-4B-Instruct-2507``,
  ``sglang//models/ckpt``), as the serving engine itself loads it; a provider that says it has no tokenizer
  (``tokenizer_free``: the replay model) needs ``-T tokenizer``, except that a replay script may name the
  end-of-turn token itself (its ``turn_end``) when nothing else needs a tokenizer.

Nothing is guessed: when a rollout needs a tokenizer and none can be had, a :class:`TokenizerError` names the model
and ``-T tokenizer=``. A task checks this when it is built (:func:`check_tokenizer`), so the eval fails before its
first sample, not every sample after a search of the hub. Where nothing needs one, only a tokenizer at hand is used
(:func:`known_tokenizer`); none is searched for.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

from inspect_ai.model import Model

from harness.core.chat import tool_env_for
from harness.core.rollout import RolloutConfig

#: What each use needs a tokenizer for, as an error says it.
FOR_BUDGET = "the response budget counts tool output in tokens"
FOR_SPAN = (
    "SAAR under the reference tool environment compares a call's span up to the model's end-of-turn token, "
    "read from its tokenizer's chat template"
)


class TokenizerError(RuntimeError):
    """No tokenizer could be found or loaded for a rollout that needs one."""


@functools.cache
def _load(name: str) -> Any:
    from transformers import AutoTokenizer

    try:  # a local directory or the hub's cache first: no network round trips (and retries) for what is here
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception:
        pass
    return AutoTokenizer.from_pretrained(name)


def _load_for(name: str, model: Model, why: str) -> Any:
    try:
        return _load(name)
    except Exception as exc:  # hub errors, a missing path, a gated repo: all say the same to the user
        raise TokenizerError(
            f"{why}, and no tokenizer for model {str(model)!r} could be loaded from {name!r} "
            f"({type(exc).__name__}: {exc}); pass -T tokenizer=<hub id or local path> of the model's tokenizer"
        ) from exc


def known_tokenizer(model: Model, tokenizer: str | None = None) -> Any:
    """The tokenizer of ``model`` where one is at hand without a search: ``-T tokenizer=``, or the embedded
    provider's own; None otherwise."""
    if tokenizer:
        return _load_for(tokenizer, model, "-T tokenizer names the model's tokenizer")
    loaded = getattr(model.api, "loaded", None)  # the embedded provider holds its model and tokenizer
    return getattr(loaded, "tokenizer", None) if loaded is not None else None


def model_tokenizer(model: Model, tokenizer: str | None = None, why: str = FOR_BUDGET) -> Any:
    """The tokenizer of ``model`` (see the module docstring for where it comes from); ``why`` it is needed is what
    a :class:`TokenizerError` says when there is none."""
    known = known_tokenizer(model, tokenizer)
    if known is not None:
        return known
    if getattr(model.api, "tokenizer_free", False):
        raise TokenizerError(
            f"{why}, and model {str(model)!r} has no tokenizer; pass -T tokenizer=<hub id or local path> of the "
            "model's tokenizer"
        )
    return _load_for(model.api.model_name, model, why)


def for_model(model: Model, config: RolloutConfig, tokenizer: str | None = None) -> tuple[Any, RolloutConfig]:
    """The tokenizer a rollout of ``model`` uses (None where nothing needs one and none is at hand) and ``config``
    for that model: its tool environment with the model's end-of-turn token where a call's span runs to it.

    The token comes from the tokenizer, or else from a replay script that names it (``turn_end``). A
    :class:`TokenizerError` when the rollout needs a tokenizer (a response budget; SAAR comparing spans to the
    turn's end, with no token named) and none can be had.
    """
    named = getattr(model.api, "turn_end", None)  # a replay script's
    tok = known_tokenizer(model, tokenizer)
    if tok is None and config.response_budget:
        tok = model_tokenizer(model, tokenizer, FOR_BUDGET)
    elif tok is None and config.compares_turn_ends and named is None:
        tok = model_tokenizer(model, tokenizer, FOR_SPAN)
    if tok is None:
        env = config.tool_env if named is None else config.tool_env.with_turn_end(named)
        return None, replace(config, tool_env=env)
    env = tool_env_for(tok, config.tool_env)
    if named is not None and env.spans_turn and env.turn_end != named:
        raise TokenizerError(
            f"model {str(model)!r} names the end-of-turn token {named!r}, and its tokenizer "
            f"{getattr(tok, 'name_or_path', '')!r} ends a turn with {env.turn_end!r}"
        )
    return tok, replace(config, tool_env=env)


def check_tokenizer(config: RolloutConfig, tokenizer: str | None = None) -> RolloutConfig:
    """``config`` for the model being evaluated now (:func:`for_model`; a :class:`TokenizerError` when a tokenizer
    is needed and there is none).

    Called when a task is built, inside an eval (Inspect makes the model active before it builds the tasks);
    outside one (no active model) there is nothing to check yet, and ``config`` is returned as it is.
    """
    from inspect_ai.model._model import active_model

    model = active_model()
    return config if model is None else for_model(model, config, tokenizer)[1]
