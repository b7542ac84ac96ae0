"""vLLM's in-process engine (``AsyncLLM``, the engine OpenRLHF's rollout actors hold): token ids in, ids out.

No server and no HTTP: a context is rendered with :func:`harness.core.chat.render_ids` (the one
rendering, the same text a served or embedded model sees), sent as ``TokensPrompt``, and the
sampled ids come back with their text, so a trainer can keep exactly what the model sampled.
:meth:`OfflineEngine.generator` adapts it to the rollout's ``Generate``.

vLLM starts its engine core in a child process (spawn): build the engine under
``if __name__ == "__main__":`` in scripts. On CPU it needs ``VLLM_CPU_KVCACHE_SPACE``
(:func:`harness.engines.serve.server_env` sets it with the offline switches).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core import chat
from harness.core.messages import Generation, Message
from harness.core.toolenv import ToolEnv
from harness.engines.serve import (
    BLOCK_SIZE,
    MAX_MODEL_LEN,
    ServeError,
    one_engine_process,
    server_env,
    shutdown_engine,
    vllm_missing,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from harness.core.rollout import Generate


@dataclass(frozen=True)
class Sampled:
    """One generation: the sampled ids, their text, and whether it stopped at its length limit."""

    token_ids: list[int]
    text: str
    truncated: bool
    logprobs: list[float] | None = None


class OfflineEngine:
    """vLLM's ``AsyncLLM`` on a model directory (see :func:`harness.engines.served_model.served_dir`)."""

    def __init__(
        self, model_dir: str | Path, *, dtype: str = "bfloat16", max_model_len: int = MAX_MODEL_LEN, seed: int = 0
    ) -> None:
        if reason := vllm_missing():
            raise ServeError(f"cannot run vLLM's engine on {model_dir}: {reason}")
        for key, value in server_env({}).items():  # offline, no usage statistics, a KV cache on CPU
            os.environ.setdefault(key, value)
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.model_dir = Path(model_dir)
        args = AsyncEngineArgs(  # no chunked prefill: see harness.engines.serve.CPU_SERVER_ARGS
            model=str(model_dir),
            dtype=dtype,
            max_model_len=max_model_len,
            enforce_eager=True,
            seed=seed,
            enable_chunked_prefill=False,
            max_num_batched_tokens=max_model_len,
            block_size=BLOCK_SIZE,  # a turn re-uses more of its context from the prefix cache (serve.CPU_SERVER_ARGS)
        )
        with one_engine_process():
            self.engine: Any = AsyncLLM.from_engine_args(args)
        self._requests = 0

    async def generate(
        self,
        prompt_ids: Sequence[int],
        *,
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
        logprobs: bool = False,
    ) -> Sampled:
        """Sample one continuation of ``prompt_ids``; a stop string is kept in the text and the ids."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            stop=list(stop),
            include_stop_str_in_output=True,
            logprobs=0 if logprobs else None,
        )
        self._requests += 1
        final: Any = None
        async for out in self.engine.generate(
            TokensPrompt(prompt_token_ids=list(prompt_ids)), params, request_id=f"r{self._requests}"
        ):
            final = out
        if final is None or not final.outputs:
            raise ServeError(f"vLLM returned no output for request r{self._requests}")
        completion = final.outputs[0]
        lps = None
        if logprobs and completion.logprobs is not None:
            lps = [step[tok].logprob for step, tok in zip(completion.logprobs, completion.token_ids, strict=True)]
        return Sampled(list(completion.token_ids), completion.text, completion.finish_reason == "length", lps)

    def generator(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        env: ToolEnv,
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
    ) -> Generate:
        """The rollout's ``Generate`` on this engine: render the context (with the tool of ``env``), sample, stop
        after a call or the turn."""
        stops = chat.stop_strings(tokenizer)

        async def generate(context: list[Message], *, seed: int | None = None) -> Generation:
            sampled = await self.generate(
                chat.render_ids(tokenizer, context, env=env),
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                stop=stops,
            )
            text = sampled.text
            for marker in stops[1:]:  # end-of-turn markers are not part of the turn's text
                text = text.removesuffix(marker)
            return Generation(
                text=text,
                truncated=sampled.truncated,
                output_tokens=len(sampled.token_ids),
                token_ids=sampled.token_ids,
            )

        return generate

    def shutdown(self) -> None:
        shutdown_engine(self.engine)
