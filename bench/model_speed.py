"""The embedded model's load times and greedy tokens/s on this machine: figures, not assertions.

python -m bench.model_speed [spec] [--threads N] [--tokens 128]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from harness.engines.models import _cache_key, cache_dir, load_model, resolve_spec, save_to_cache


def measure(spec: str | None = None, *, new_tokens: int = 128, threads: int | None = None) -> dict[str, float]:
    """Load times and greedy generation speed of a model on the machine it runs on (figures, not assertions)."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    figures: dict[str, float] = {"threads": float(torch.get_num_threads())}
    start = time.perf_counter()
    model, tokenizer = load_model(spec, cache=False)
    figures["load_uncached_s"] = time.perf_counter() - start
    if resolve_spec(spec)[0] == "gguf":
        save_to_cache(model, tokenizer, cache_dir() / _cache_key(resolve_spec(spec)[1], model.dtype))
        start = time.perf_counter()
        model, tokenizer = load_model(spec)
        figures["load_cached_s"] = time.perf_counter() - start
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Explain how to multiply 17 by 23, step by step."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")
    with torch.inference_mode():
        model.generate(**ids, max_new_tokens=4, do_sample=False)  # warm-up
        start = time.perf_counter()
        model(**ids)
        figures["prefill_tokens_per_s"] = ids["input_ids"].shape[1] / (time.perf_counter() - start)
        start = time.perf_counter()
        out = model.generate(**ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        elapsed = time.perf_counter() - start
    figures["greedy_tokens_per_s"] = (out.shape[1] - ids["input_ids"].shape[1]) / elapsed
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_speed", description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default=None, help="smollm2 (default), a .gguf file or an HF directory")
    parser.add_argument("--tokens", type=int, default=128, help="tokens to generate")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args(argv)
    result = measure(args.spec, new_tokens=args.tokens, threads=args.threads)
    result["load_average_1min"] = os.getloadavg()[0]
    for name, value in result.items():
        print(f"{name:24s} {value:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
