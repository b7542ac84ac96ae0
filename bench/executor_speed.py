"""The OpenRLHF executor at a GPU engine's speed: a rollout batch through the real AgentExecutor.

python -m bench.executor_speed                          # 64 and 256 trajectories, SAAR on and off, local
python -m bench.executor_speed --batch 256 --saar on --sandboxes local docker
python -m bench.executor_speed --saar on --rollout-logprobs    # importance-sampling correction on
python -m bench.executor_speed --prefill-cost 512 1024 2048    # the scoring prefill on vLLM (warm model)

OpenRLHF awaits ``AgentExecutor.execute(prompt, label, sampling_params, max_length, tokenizer, engine)`` for every
sample of a rollout batch at once, token-in and token-out against its vLLM engine. Here the engine is
:class:`StandinEngine`: the stand-in's scripted policy (:func:`bench.scripted_policy.decide`, not a model) behind
the engine's ``generate(prompt_token_ids, sampling_params)``. It decodes the context, reads the conversation back
from the chat template's markers, lets the policy answer and returns the answer's token ids (SmolLM2's tokenizer)
at once. Its own CPU (decode, policy, encode) is timed per call and taken out, so what is left is the executor:
rendering and tokenizing the context, SAAR, the sandbox lease, scoring, the token trajectory.

Figures per configuration (one :class:`~trainers.openrlhf_plugin.executor.AgentExecutor`, as one vLLM engine's
actor holds): trajectories/s, generations/s, tool calls/s, and the executor's CPU ms per generation and per call
(this process's CPU, all threads, less the engine's). The programs' own CPU is not in it (they are children). The
executor leases a sandbox per program run from the backend, at most ``--sandbox-pool`` at once (its default is
:class:`~trainers.core.config.ExecutorConfig`'s ``sandbox_pool``). Each configuration first runs an untimed batch
of ``--warmup`` trajectories.

With ``--rollout-logprobs`` the job asks for rollout log-probs, as OpenRLHF does with importance-sampling correction
on: the stand-in returns a log-prob per sampled token (a constant: no model) and answers the executor's scoring
prefill of each SAAR-purified trajectory (:mod:`trainers.core.rescore`) at once. The figures then count those
prefills and their tokens per trajectory (what a real engine prefills in addition), and the executor's CPU includes
building the log-probs; the engine's own time for a prefill is not measured here (the engine is a stand-in).

``--prefill-cost N...`` measures that time on vLLM's engine instead (the warm model, bfloat16, this machine): for
sequences of N tokens, the scoring prefill (``prompt_logprobs``, one token generated; median of ``--repeats``), per
token, beside the engine's time per generated token (N/4 tokens decoded after a short prompt).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.scripted_policy import Policy, decide
from harness.core.protocol import parse_turn, serialize_call
from harness.core.toolenv import PROJECT

#: The chat template's turn markers (SmolLM2's ChatML, the tokenizer the benchmark loads).
_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|$)", re.S)
_RESPONSE = re.compile(r"^<tool_response>\n?(.*?)\n?</tool_response>$", re.S)
#: The tool the policy is told about (it calls the first of these it is offered).
_TOOLS = [{"type": "function", "function": {"name": "python"}}]
_GENERATION_PROMPT = "<|im_start|>assistant\n"
#: the stand-in's log-prob of every token (vLLM's Logprob has the same ``logprob`` attribute)
_LOGPROB = SimpleNamespace(logprob=-1.0)


def conversation(text: str) -> list[dict[str, Any]]:
    """The OpenAI-style messages of a rendered ChatML context (tool calls and ``<tool_response>`` turns read back)."""
    messages: list[dict[str, Any]] = []
    text = text.removesuffix(_GENERATION_PROMPT)  # the turn to generate is not part of the conversation
    for role, content in _TURN.findall(text):
        response = _RESPONSE.match(content.strip()) if role == "user" else None
        if response is not None:
            messages.append({"role": "tool", "content": response.group(1)})
            continue
        message: dict[str, Any] = {"role": role, "content": content}
        call = parse_turn(content, env=PROJECT).call if role == "assistant" else None
        if call is not None:
            message["tool_calls"] = [{"function": {"name": "python", "arguments": json.dumps({"code": call.code})}}]
        messages.append(message)
    return messages


class StandinEngine:
    """The stand-in policy as OpenRLHF's vLLM engine: ``generate(ids, params)`` answers at once with token ids."""

    def __init__(self, tokenizer: Any, policy: Policy) -> None:
        self.tokenizer = tokenizer
        self.policy = policy
        self.generations = 0
        self.cpu_s = 0.0  #: this engine's own CPU (decode, policy, encode): not the executor's
        self.prefills = 0  #: scoring prefills asked for (rollout log-probs of purified trajectories)
        self.prefill_tokens = 0

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        start = time.thread_time()
        if getattr(sampling_params, "prompt_logprobs", None) is not None:  # a scoring prefill
            rows = [None] + [{t: _LOGPROB} for t in prompt_token_ids[1:]]
            self.prefills += 1
            self.prefill_tokens += len(prompt_token_ids)
            self.cpu_s += time.thread_time() - start
            return SimpleNamespace(prompt_logprobs=rows, outputs=[])
        context = self.tokenizer.decode(prompt_token_ids, skip_special_tokens=False)
        messages = conversation(context)
        # the request's seed, else one per prompt: trajectories of different prompts differ, as sampled ones do
        prompt = next((m["content"] for m in messages if m["role"] == "user"), "")
        seed = getattr(sampling_params, "seed", None) or zlib.crc32(prompt.encode())
        turn = decide(self.policy, messages, _TOOLS, seed)
        text = turn.text if turn.call is None else f"{turn.text}\n{serialize_call(turn.call[1])}"
        ids = [*self.tokenizer(text, add_special_tokens=False)["input_ids"], self.tokenizer.eos_token_id]
        limit = getattr(sampling_params, "max_tokens", None)
        finish = "stop"
        if limit is not None and len(ids) > limit:
            ids, finish = ids[:limit], "length"
        self.generations += 1
        logprobs = None if getattr(sampling_params, "logprobs", None) is None else [{t: _LOGPROB} for t in ids]
        self.cpu_s += time.thread_time() - start
        return SimpleNamespace(
            outputs=[SimpleNamespace(token_ids=ids, text=text, finish_reason=finish, logprobs=logprobs)]
        )


@dataclass
class Figures:
    """One rollout batch: counts and seconds (rates are derived)."""

    sandbox: str
    saar: bool
    batch: int
    sandbox_pool: int
    wall_s: float
    trajectories: int
    generations: int
    tool_calls: int
    process_cpu_s: float  #: this process's CPU (all threads) during the batch
    engine_cpu_s: float  #: the stand-in engine's share of it
    load_1m: float
    prefills: int = 0  #: scoring prefills (``--rollout-logprobs``: one per SAAR-purified trajectory)
    prefill_tokens: int = 0  #: the tokens they score

    def rates(self) -> dict[str, float]:
        per = lambda n, d: n / d if d else 0.0  # noqa: E731 - a local shorthand
        executor = self.process_cpu_s - self.engine_cpu_s
        return {
            "trajectories_per_s": per(self.trajectories, self.wall_s),
            "generations_per_s": per(self.generations, self.wall_s),
            "tool_calls_per_s": per(self.tool_calls, self.wall_s),
            "executor_cpu_ms_per_generation": 1000 * per(executor, self.generations),
            "executor_cpu_ms_per_call": 1000 * per(executor, self.tool_calls),
            "engine_cpu_ms_per_generation": 1000 * per(self.engine_cpu_s, self.generations),
            "prefills_per_trajectory": per(self.prefills, self.trajectories),
            "prefill_tokens_per_trajectory": per(self.prefill_tokens, self.trajectories),
        }

    def row(self) -> str:
        r = self.rates()
        return (
            f"{self.sandbox:7s} {'on' if self.saar else 'off':4s} {self.batch:5d} {self.sandbox_pool:4d} "
            f"{self.wall_s:7.1f} {r['trajectories_per_s']:7.1f} {r['generations_per_s']:7.1f} "
            f"{r['tool_calls_per_s']:7.1f} {r['executor_cpu_ms_per_generation']:8.2f} "
            f"{r['executor_cpu_ms_per_call']:8.2f} {r['engine_cpu_ms_per_generation']:7.2f} {self.load_1m:5.1f} "
            f"{r['prefills_per_trajectory']:7.2f} {r['prefill_tokens_per_trajectory']:9.1f}"
        )


HEADER = "sandbox saar batch pool  wall_s traj/s  gens/s calls/s ms/gen   ms/call engine  load pf/traj ptok/traj"


def _items(n: int) -> list[Any]:
    from harness.benchmarks.problem import Problem

    return [
        Problem(
            f"sq-{i}", f"What is the sum of the squares 1..{20 + i} modulo 1000? Answer in \\boxed{{}}.", "0", "math"
        )
        for i in range(n)
    ]


async def _batch(
    executor: Any, engine: StandinEngine, tokenizer: Any, n: int, max_length: int, logprobs: bool = False
) -> int:
    """Run ``n`` trajectories at once, as OpenRLHF runs a rollout batch; the tool calls they made."""
    from trainers.core.data import label

    params = SimpleNamespace(max_tokens=1024, logprobs=1 if logprobs else None, temperature=1.0, seed=None)
    items = _items(n)
    results = await asyncio.gather(
        *(executor.execute(item.prompt, label(item), params, max_length, tokenizer, engine) for item in items)
    )
    return int(sum(r["extra_logs"]["tool_calls"] for r in results))


async def run_config(
    tokenizer: Any, sandbox: str, saar: bool, batch: int, args: argparse.Namespace
) -> tuple[Figures, dict[str, Any]]:
    from sandboxes.backends import get_backend
    from trainers.core.config import ExecutorConfig
    from trainers.openrlhf_plugin.executor import AgentExecutor

    fields: dict[str, Any] = {"saar": {"enabled": saar, "prob": 1.0}, "seed": args.seed, "sandbox": sandbox}
    if args.sandbox_pool is not None:
        fields["sandbox_pool"] = args.sandbox_pool
    config = ExecutorConfig.from_json(json.dumps(fields), where="the benchmark's configuration")
    backend = get_backend(sandbox)
    try:
        executor = AgentExecutor(config, backend=backend)
        engine = StandinEngine(tokenizer, Policy(calls=args.calls, fail_rate=args.fail_rate))
        if args.warmup:
            await _batch(executor, engine, tokenizer, args.warmup, args.max_length, args.rollout_logprobs)
        engine.generations, engine.cpu_s, engine.prefills, engine.prefill_tokens = 0, 0.0, 0, 0
        cpu0, start = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        calls = await _batch(executor, engine, tokenizer, batch, args.max_length, args.rollout_logprobs)
        wall, cpu1 = time.monotonic() - start, resource.getrusage(resource.RUSAGE_SELF)
    finally:
        await backend.shutdown()
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    figures = Figures(
        sandbox, saar, batch, config.sandbox_pool, wall, batch, engine.generations, calls, cpu, engine.cpu_s,
        os.getloadavg()[0], engine.prefills, engine.prefill_tokens,
    )  # fmt: skip
    return figures, backend.describe()


async def _prefill_cost(lengths: Sequence[int], repeats: int) -> list[dict[str, float]]:
    """Seconds per token of the scoring prefill and of decoding, on vLLM's engine with the warm model."""
    import random
    import statistics

    from vllm import SamplingParams

    from harness.engines.served_model import served_dir
    from harness.engines.vllm_offline import OfflineEngine
    from trainers.core.rescore import rescore

    engine = OfflineEngine(served_dir("smollm2-tools"), dtype="bfloat16", max_model_len=max(lengths) + 8)

    class _Actor:  # OpenRLHF's rollout actor's generate, on this engine
        requests = 0

        async def generate(self, ids: list[int], params: Any) -> Any:
            from vllm.inputs import TokensPrompt

            _Actor.requests += 1
            final = None
            async for out in engine.engine.generate(
                TokensPrompt(prompt_token_ids=ids), params, f"cost-{self.requests}"
            ):
                final = out
            return final

    actor, rng, rows = _Actor(), random.Random(0), []
    try:
        for n in lengths:
            ids = [rng.randrange(1000, 40000) for _ in range(n)]
            await rescore(actor, ids, n + 8)  # warm-up
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                await rescore(actor, ids, n + 8)
                times.append(time.perf_counter() - start)
            decode = max(n // 4, 16)
            params = SamplingParams(max_tokens=decode, ignore_eos=True, temperature=1.0)
            start = time.perf_counter()
            await actor.generate(ids[:32], params)
            decode_s = time.perf_counter() - start
            rows.append(
                {
                    "tokens": n,
                    "prefill_ms_per_token": 1000 * statistics.median(times) / n,
                    "decode_ms_per_token": 1000 * decode_s / decode,
                }
            )
    finally:
        from harness.engines.serve import shutdown_engine

        shutdown_engine(engine.engine)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.executor_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", nargs="+", type=int, default=[64, 256], help="trajectories at once")
    parser.add_argument("--saar", nargs="+", default=["on", "off"], choices=["on", "off"])
    parser.add_argument("--sandboxes", nargs="+", default=["local"], choices=["local", "docker"])
    parser.add_argument("--sandbox-pool", type=int, default=None, help="program runs at once (default: the config's)")
    parser.add_argument("--calls", type=int, default=Policy.calls, help="the policy's successful runs per sample")
    parser.add_argument("--fail-rate", type=float, default=Policy.fail_rate, help="the policy's failing programs")
    parser.add_argument("--max-length", type=int, default=8192, help="OpenRLHF's --data.max_len")
    parser.add_argument("--warmup", type=int, default=8, help="untimed trajectories first, per configuration")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--prefill-cost", nargs="+", type=int, default=None, help="measure the scoring prefill on vLLM at N tokens"
    )
    parser.add_argument("--repeats", type=int, default=3, help="prefills per length (--prefill-cost)")
    parser.add_argument(
        "--rollout-logprobs",
        action="store_true",
        help="ask for rollout log-probs (importance-sampling correction on): purified trajectories are rescored",
    )
    parser.add_argument("--json", default=None, help="write the figures there as JSON")
    args = parser.parse_args(argv)
    for n in (*args.batch, args.warmup + 1):
        if n < 1:
            parser.error("--batch sizes must be >= 1 and --warmup >= 0")

    if args.prefill_cost:
        cost = asyncio.run(_prefill_cost(args.prefill_cost, args.repeats))
        print("tokens  prefill_ms/token  decode_ms/token", flush=True)
        for row in cost:
            print(f"{row['tokens']:6d}  {row['prefill_ms_per_token']:16.3f}  {row['decode_ms_per_token']:15.3f}")
        if args.json:
            command = " ".join(["python -m bench.executor_speed", *sys.argv[1:]])
            Path(args.json).write_text(json.dumps({"command": command, "prefill_cost": cost}, indent=2))
        return 0

    from trainers.core import _compat

    tokenizer = _compat.load_tokenizer()
    rows: list[dict[str, Any]] = []
    print(HEADER, flush=True)
    for sandbox in args.sandboxes:
        for saar in args.saar:
            for batch in args.batch:
                figures, where = asyncio.run(run_config(tokenizer, sandbox, saar == "on", batch, args))
                print(figures.row(), flush=True)
                rows.append({**asdict(figures), **figures.rates(), "where": where})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"command": " ".join(["python -m bench.executor_speed", *sys.argv[1:]]), "results": rows},
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
