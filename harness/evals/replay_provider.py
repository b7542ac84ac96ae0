"""``--model replay/<script.yaml>``: the deterministic replay model as an Inspect provider.

The position in a sample's script is kept in the sample's Inspect store, so epochs
and concurrent samples each replay from the start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inspect_ai.model import (
    ChatMessage,
    ChatMessageUser,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    ModelUsage,
)
from inspect_ai.tool import ToolChoice, ToolInfo
from inspect_ai.util import store

from harness.engines.replay import ReplayScript

_COUNTER = "replay:calls"


class ReplayAPI(ModelAPI):
    #: a replay script has no tokenizer: a response budget needs ``-T tokenizer``, and the ``reference`` call span
    #: the script's ``turn_end`` or ``-T tokenizer`` (harness.evals.tokenizers)
    tokenizer_free = True

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),
        **model_args: Any,
    ) -> None:
        super().__init__(model_name, base_url, api_key, [], config)
        path = Path(model_name)
        if not path.is_file() and (Path(__file__).parents[1] / "data" / "replay" / model_name).is_file():
            path = Path(__file__).parents[1] / "data" / "replay" / model_name  # a bundled script by name
        self.script = ReplayScript.load(path)
        #: the end-of-turn token of the model the script stands for, when it names one (harness.evals.tokenizers)
        self.turn_end = self.script.turn_end

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        prompt = next((m.text for m in input if isinstance(m, ChatMessageUser)), "")
        index = store().get(_COUNTER, 0)
        store().set(_COUNTER, index + 1)
        gen = self.script.generation(prompt, index)
        output = ModelOutput.from_content(
            model=self.model_name, content=gen.text, stop_reason="max_tokens" if gen.truncated else "stop"
        )
        output.usage = ModelUsage(input_tokens=0, output_tokens=gen.output_tokens, total_tokens=gen.output_tokens)
        return output

    def max_connections(self) -> int:
        return 32
