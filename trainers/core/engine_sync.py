"""The trainer's weights into vLLM's engine, the LoRA merged in, as OpenRLHF syncs its engines after a step.

OpenRLHF (``openrlhf/trainer/ray/vllm_worker_wrap.py``) broadcasts each parameter and calls
``model.load_weights`` in place on the engine's worker. On CPU that fails: vLLM's CPU backend repacks its
linear weights at load time ("Attempted to load weight (torch.Size([576, 1536])) into parameter
(torch.Size([0]))"). What works is the worker's model runner's ``reload_weights(weights_iterator=...)``,
which reloads checkpoint-format weights and repacks them again; it is reached through the engine's
``collective_rpc``. :func:`merged_weights` gives what is synced: the policy's weights with the LoRA deltas
merged (``W + B A * alpha / r``), under the base model's checkpoint names, in the engine's dtype.

Sleep mode (OpenRLHF's ``--vllm.enable_sleep``) is not supported on CPU, so the engine stays up between
steps; the trainer recomputes the log-probs of the policy ratio over the final sequence itself.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from trainers.core.faults import EngineDied
from trainers.core.rescore import SampleLog, sampled_logprobs


def merged_weights(policy: Any, dtype: Any = None) -> Iterator[tuple[str, Any]]:
    """(checkpoint name, tensor) of ``policy`` with its LoRA merged; the policy itself is left unchanged.

    ``policy`` is a PEFT model (LoRA layers) or a plain transformers model. Tied weights appear once,
    as the checkpoint has them (``lm_head.weight`` is left out when it is the embedding).
    """
    import torch  # noqa: PLC0415

    base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
    merged: dict[str, torch.Tensor] = {}
    lora_modules = {}
    for name, module in base.named_modules():
        if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight"):
            lora_modules[name] = module
    with torch.no_grad():
        for name, tensor in base.state_dict().items():
            if ".lora_" in name or "lora_" in name.rsplit(".", 1)[-1]:
                continue
            clean = name.replace(".base_layer.", ".")
            module_name = name.rsplit(".base_layer.", 1)[0] if ".base_layer." in name else None
            value = tensor
            if module_name in lora_modules and clean.endswith(".weight"):
                module = lora_modules[module_name]
                value = tensor.clone()
                for adapter in module.active_adapters:
                    if adapter in module.lora_A and not module.merged:
                        value += module.get_delta_weight(adapter).to(value.dtype)
            merged[clean] = value
    tied = getattr(base.config, "tie_word_embeddings", False)
    for name, value in merged.items():
        if tied and name == "lm_head.weight":
            continue
        yield name, (value.to(dtype) if dtype is not None else value).contiguous()


def _reload(worker: Any, path: str) -> None:
    """Runs on each engine worker (collective_rpc): reload the model's weights from a safetensors file.

    The file is memory-mapped, so the weights are read once, by the copy into the model.
    """
    from safetensors.torch import load_file  # noqa: PLC0415

    worker.model_runner.reload_weights(weights_iterator=iter(load_file(path).items()))


def staging_dir(nbytes: int) -> str:
    """Where the synced weights are written: shared memory (``/dev/shm``) when it has room, else the temp dir.

    A container's ``/dev/shm`` is often 64 MB, smaller than the 135M model's 540 MB in float32.
    """
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > nbytes + (64 << 20):
        return shm
    return tempfile.gettempdir()


async def sync_weights(engine: Any, policy: Any, dtype: Any) -> float:
    """Load ``policy``'s merged weights into vLLM's ``AsyncLLM`` ``engine``; return the seconds it took.

    The weights go through a file in shared memory, readable by this user only and removed after the load; the
    engine's RPC carries its path. Sent as bytes through the RPC instead, the same 540 MB took 5-12 s (a
    serialised copy, the socket, a parse) against 0.6 s. Needs ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` in the
    engine's environment (a function is sent to the workers), set before the engine is built
    (:func:`engine_env`). The prefix cache is reset after.
    """
    import tempfile  # noqa: PLC0415

    from safetensors.torch import save_file  # noqa: PLC0415

    start = time.perf_counter()
    weights = dict(merged_weights(policy, dtype))
    nbytes = sum(t.numel() * t.element_size() for t in weights.values())
    with tempfile.TemporaryDirectory(prefix="cleaner-sync-", dir=staging_dir(nbytes)) as tmp:  # mode 0700
        path = os.path.join(tmp, "weights.safetensors")
        save_file(weights, path)
        del weights
        await engine.collective_rpc(_reload, args=(path,))
    await engine.reset_prefix_cache()
    return time.perf_counter() - start


def _engine_dead_error() -> type[Exception]:
    """vLLM's error for a request or RPC to an engine whose process died (vLLM is imported lazily here)."""
    from vllm.v1.engine.exceptions import EngineDeadError  # noqa: PLC0415

    return EngineDeadError


def engine_env() -> dict[str, str]:
    """What vLLM's engine needs in its environment for :func:`sync_weights` (on top of the harness's)."""
    return {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}


class EngineSampler:
    """vLLM's engine as the CPU trainer's generator (the interface of :class:`trainers.cpu.rollouts.PolicySampler`).

    Token ids in, sampled ids out; a turn ends at the end-of-turn token (the same stops as the in-process
    sampler and OpenRLHF's engine), each request with its own seed. The engine is built in
    ``cfg.engine_dtype`` from the warm model's served directory and gets the policy's merged weights with
    :meth:`sync` after every optimizer step, so what it samples is the policy's distribution (in float32
    exactly; in bfloat16 the policy rounded to bfloat16).
    """

    def __init__(self, model_dir: str, tokenizer: Any, cfg: Any, *, max_model_len: int) -> None:
        from harness.core import chat  # noqa: PLC0415
        from harness.engines.vllm_offline import OfflineEngine  # noqa: PLC0415

        for key, value in engine_env().items():
            os.environ.setdefault(key, value)
        self.tokenizer, self.cfg, self.dtype = tokenizer, cfg, cfg.engine_dtype
        self.stop_token_ids = tuple(chat.stop_token_ids(tokenizer, at_call=False))
        # the harness's engine on CPU: the model in the engine-core process (no worker process polling the core the
        # trainer computes on), whole prefills only (a chunked prefill of a seeded request kills vLLM 0.32 on CPU)
        self.engine = OfflineEngine(model_dir, dtype=self.dtype, max_model_len=max_model_len, seed=cfg.seed).engine
        self.requests = 0
        self.synced_step: int | None = None
        self.sync_s = 0.0

    async def __call__(
        self, context_ids: list[int], budget: int, seed: int | None, *, samples: SampleLog | None = None
    ) -> tuple[list[int], bool]:
        """Sample one turn after ``context_ids``; with ``samples``, its sampled log-probs are recorded there."""
        from vllm import SamplingParams  # noqa: PLC0415

        max_new = min(self.cfg.max_new_tokens, budget)
        if max_new <= 0:
            return [], True
        params = SamplingParams(
            max_tokens=max_new,
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            seed=seed,
            stop_token_ids=list(self.stop_token_ids),
            skip_special_tokens=False,
            logprobs=None if samples is None else 0,
        )
        first = (await self.generate(context_ids, params)).outputs[0]
        if samples is not None:
            samples.add(context_ids, first.token_ids, sampled_logprobs(first))
        return list(first.token_ids), first.finish_reason == "length"

    async def generate(self, ids: list[int], params: Any) -> Any:
        """vLLM's final output for one request (the interface :func:`trainers.core.rescore.rescore` calls)."""
        from vllm.inputs import TokensPrompt  # noqa: PLC0415

        self.requests += 1
        final: Any = None
        try:
            async for out in self.engine.generate(
                TokensPrompt(prompt_token_ids=list(ids)), params, request_id=f"cpu-{self.requests}"
            ):
                final = out
        except _engine_dead_error() as exc:
            step = "this step" if self.synced_step is None else f"step {self.synced_step + 1}"
            raise EngineDied(f"{step}'s rollouts (request cpu-{self.requests})", exc) from exc
        return final

    async def sync(self, policy: Any, step: int) -> float:
        """The policy's merged weights into the engine once per optimizer step (``step``: the optimizer steps done,
        the trainer's global step); the seconds it took."""
        import torch  # noqa: PLC0415

        if self.synced_step == step:
            return 0.0
        try:
            seconds = await sync_weights(self.engine, policy, getattr(torch, self.dtype))
        except _engine_dead_error() as exc:
            raise EngineDied(f"the weight sync before step {step + 1}", exc) from exc
        self.synced_step, self.sync_s = step, seconds
        return seconds

    def close(self) -> None:
        from harness.engines.serve import shutdown_engine  # noqa: PLC0415

        shutdown_engine(self.engine)
