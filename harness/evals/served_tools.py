"""The tool as this project's served evals send it: unconstrained.

Inspect's OpenAI-compatible providers mark each tool ``"strict": true`` (``OpenAICompatibleAPI.strict_tools``), and
vLLM then constrains a call to the tool's schema: a served model could not write a call with another tool's name or
a malformed argument, which the trainers' engines and the reference's (token ids, no schema) let a model write and
SAAR is there to purify. So the ``vllm/`` and ``sglang/`` providers send the tool as the chat template shows it,
with ``"strict": false``.

Inspect offers no task-level switch for it, and the ``vllm/`` provider sets ``strict_tools`` again each time it
resolves its server (lazily, at its first request), so the setting lives on the provider's own tool conversion
(:func:`send_tools_unconstrained`, once per provider object) rather than on that attribute.
"""

from __future__ import annotations

from typing import Any

from inspect_ai.model import ModelAPI

#: the attribute that marks a provider whose tools are already sent unconstrained
_MARK = "_cleaner_tools_unconstrained"


def send_tools_unconstrained(api: ModelAPI) -> None:
    """Make the ``vllm/`` or ``sglang/`` provider ``api`` send every tool with ``"strict": false``; any other
    provider is left as it is (some services require strict tools)."""
    from inspect_ai.model._providers.sglang import SGLangAPI
    from inspect_ai.model._providers.vllm import VLLMAPI

    if not isinstance(api, VLLMAPI | SGLangAPI) or getattr(api, _MARK, False):
        return
    as_inspect_sends = api.tools_to_openai

    def tools_to_openai(tools: list[Any]) -> list[Any]:
        params = as_inspect_sends(tools)
        for param in params:
            param["function"]["strict"] = False
        return params

    api.tools_to_openai = tools_to_openai  # type: ignore[method-assign]
    setattr(api, _MARK, True)
