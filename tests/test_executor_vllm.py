"""The OpenRLHF executor on a real engine: vLLM's async engine on CPU with the warm model.

OpenRLHF 0.11.2 runs an agent inside its vLLM rollout actor (``openrlhf/trainer/ray/vllm_engine.py``):
``create_vllm_engines`` builds ``RolloutRayActor`` actors, each holding ``vllm.AsyncLLMEngine`` (``AsyncLLM``)
and the agent file loaded by path; the sample generator (``samples_generator.py``,
``_dispatch_prompts_to_vllm``) calls ``generate_responses.remote(prompt, label, sampling_params, max_length,
hf_tokenizer, num_samples)`` with ``SamplingParams(temperature, top_p, top_k=-1, max_tokens=max_new_tokens,
min_tokens=1, skip_special_tokens=False, logprobs=None)``, ``max_length = --data.max_len`` and the tokenizer of
``openrlhf.utils.utils.get_tokenizer``; the actor awaits ``executor.execute(..., llm_engine=self)``, whose
``generate(ids, params)`` sends ``TokensPrompt`` to vLLM.

With Ray installed this module does exactly that: a local Ray instance with one *logical* GPU (Ray only
counts it; vLLM's CPU build never touches CUDA), OpenRLHF's own ``create_vllm_engines`` with the agent file
``tests/vllm_agent.py`` (the project's executor, recording what the engine returned), and OpenRLHF's own
sampling params and tokenizer. Without Ray (it is not a project dependency), the same engine arguments build
``vllm.AsyncLLMEngine`` in this process behind a copy of the actor's two methods. Either way one engine serves
the whole module, SAAR on and off, on generated problems where the warm model fails (stdin programs: 91% of
its calls fail) and one math problem. A third arm injects faults: every other rollout's engine raises after its
first generation, and one prompt's label cannot be read; the executor contains both, and OpenRLHF's own
sample and batch classes take what it returned.

The SAAR-on and SAAR-off arms ask for rollout log-probs, as OpenRLHF does with ``--algo.advantage.is_correction_level``
on (``logprobs=1``, the engine built with ``logprobs_mode="processed_logprobs"`` and ``max_logprobs=1``); the
fault-injection arm does not, as with the correction off. A fourth arm (two problems) asks for them with SAAR on and
every rollout's first program failing in the sandbox, so that every rollout has a turn SAAR regenerated with an
error in view, whatever the warm model does. The test agent scores every final sequence with a prefill of
its own, against which the executor's log-probs are checked.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import time
import uuid
from copy import deepcopy
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from needs import import_or_skip

import_or_skip("vllm")
import_or_skip("openrlhf.utils.agent")

from harness.benchmarks.problem import Problem  # noqa: E402
from harness.benchmarks.scoring import strict_reward  # noqa: E402
from trainers.core.config import ExecutorConfig  # noqa: E402
from trainers.core.data import from_label, label, load_items  # noqa: E402
from trainers.core.reward import compute_reward  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
AGENT = Path(__file__).with_name("vllm_agent.py")
MAX_LEN = 1024  # --data.max_len
MAX_NEW = 96  # --rollout.max_new_tokens (the cpu-smoke recipe's per-turn budget)
SAMPLES = 4  # --rollout.n_samples_per_prompt: with 2, the SAAR-on arm's 6 rollouts once made no failing call (the
#             distilled model: 3 and 5 failing calls in 9 rollouts per arm); 12 per arm make that about 1 in 200
#: Problems the warm model fails on at this budget. It seldom calls the tool on stdin problems, which left an arm
#: without a failing call; of eight math problems, these failed most (rl-2000-0004-aime: 10 of 15 calls over both
#: arms).
PROBLEMS = ("rl-2000-0004-aime", "rl-2000-0013-aime", "rl-2000-0005-aime")
CONFIG = ExecutorConfig.from_json(
    json.dumps(
        {
            "saar": {"enabled": True, "prob": 1.0, "max_retries": 2},
            "max_turns": 3,
            "timeout": 5.0,
            "sandbox": "local",
            "seed": 0,
        }
    )
)
#: what create_vllm_engines passes to vllm.AsyncEngineArgs for one engine (tensor parallel 1, seed 0)
ENGINE_KWARGS = {
    "enforce_eager": True,
    "worker_extension_cls": "openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap",
    "tensor_parallel_size": 1,
    "seed": 0,
    "distributed_executor_backend": "uni",
    "max_model_len": MAX_LEN,
    "enable_prefix_caching": False,
    "dtype": "bfloat16",
    "trust_remote_code": True,
    "logprobs_mode": "processed_logprobs",  # what create_vllm_engines adds with the correction on
    "max_logprobs": 1,
    "enable_chunked_prefill": False,  # what the agent file sets on CPU (tests/vllm_agent.py: seeded requests)
}
#: how far a token's log-prob may move between two prefills of the same sequence in other batches (bfloat16 engine)
PREFILL_TOL = 0.05


def _items() -> list[Problem]:
    by_id = {i.id: i for i in load_items(ROOT / "trainers/data/tools-rl.jsonl")}
    return [by_id[p] for p in PROBLEMS]


#: the fault-injection arm: one problem with a fault in every other rollout, and one whose label cannot be read
INJECT = "inject"
#: the correction arm: SAAR on, rollout log-probs asked for, every rollout's first program failing (two problems)
CORRECT = "correct"
BAD_LABEL = "not a label"


def _inject_groups() -> list[tuple[str, str]]:
    item = _items()[0]
    return [(item.prompt, label(item)), (item.prompt, BAD_LABEL)]


def _arms() -> dict[bool | str, list[tuple[str, str]]]:
    """Each arm's groups, in the order they are submitted: a (prompt, label) per ``generate_responses`` call."""
    items = _items()
    arms: dict[bool | str, list[tuple[str, str]]] = {
        saar: [(item.prompt, label(item)) for item in items] for saar in (True, False)
    }
    arms[INJECT] = _inject_groups()
    arms[CORRECT] = [(item.prompt, label(item)) for item in items[:2]]
    return arms


def _sampling_params(saar: bool | str):
    """OpenRLHF's own SamplingParams (samples_generator._dispatch_prompts_to_vllm), plus the test agent's arm."""
    from vllm import SamplingParams

    return SamplingParams(
        temperature=1.0,
        top_p=1.0,
        top_k=-1,
        max_tokens=MAX_NEW,
        min_tokens=1,
        skip_special_tokens=False,
        logprobs=None if saar == INJECT else 1,  # --algo.advantage.is_correction_level off / on
        extra_args={"inject": True} if saar == INJECT else {"fail_first": True} if saar == CORRECT else {"saar": saar},
    )


def _env() -> dict[str, str]:
    from harness.engines.serve import ONE_ENGINE_PROCESS, server_env

    # the CPU settings of the project's engines: the model in the engine-core process (no polling worker)
    env = {k: v for k, v in server_env().items() if k.startswith(("VLLM_", "HF_", "TRANSFORMERS_", "DO_NOT"))}
    env.update(ONE_ENGINE_PROCESS)
    env.update(CLEANER_AGENT_CONFIG=CONFIG.to_json(), RAY_USAGE_STATS_ENABLED="0", VLLM_HOST_IP="127.0.0.1")
    return env


def _via_ray(model: str, tokenizer: Any) -> tuple[dict[bool, list[dict]], dict[str, Any]]:
    """OpenRLHF's rollout actor, built by OpenRLHF's create_vllm_engines on a local Ray with a logical GPU."""
    import ray

    env = _env()
    os.environ.update(env)
    ray.init(
        num_cpus=2,
        num_gpus=1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": env},
        _node_ip_address="127.0.0.1",
    )
    try:
        from openrlhf.trainer.ray.vllm_engine import create_vllm_engines

        start = time.monotonic()
        (engine,) = create_vllm_engines(
            1,
            1,
            model,
            0,
            False,
            False,
            True,
            MAX_LEN,
            None,
            0.9,
            False,
            "processed_logprobs",
            agent_func_path=str(AGENT),
        )
        ray.get(engine.get_num_unfinished_requests.remote())  # the actor (and its engine) is up
        built = time.monotonic() - start
        start = time.monotonic()
        refs = {
            arm: [
                engine.generate_responses.remote(
                    prompt=prompt,
                    label=label,
                    sampling_params=_sampling_params(arm),
                    max_length=MAX_LEN,
                    hf_tokenizer=tokenizer,
                    num_samples=SAMPLES,
                )
                for prompt, label in groups
            ]
            for arm, groups in _arms().items()
        }
        results = {saar: [r for group in ray.get(rs) for r in group] for saar, rs in refs.items()}
        return results, {"engine": "ray", "build_s": built, "rollouts_s": time.monotonic() - start}
    finally:
        ray.shutdown()


class _InProcessActor:
    """The two methods of OpenRLHF's RolloutRayActor the executor reaches, on the same engine, without Ray."""

    def __init__(self, engine: Any, executor: Any) -> None:
        self.llm, self.executor = engine, executor

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):  # RolloutRayActor.generate
        from vllm.inputs import TokensPrompt

        final_output = None
        async for request_output in self.llm.generate(
            TokensPrompt(prompt_token_ids=prompt_token_ids), deepcopy(sampling_params), request_id=uuid.uuid4().hex
        ):
            final_output = request_output
        return final_output

    async def generate_responses(self, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples=1):
        tasks = [
            self.executor.execute(
                prompt=prompt,
                label=label,
                sampling_params=sampling_params,
                max_length=max_length,
                hf_tokenizer=hf_tokenizer,
                llm_engine=self,
                images=None,
            )
            for _ in range(num_samples)
        ]
        return await asyncio.gather(*tasks)


def _in_process(model: str, tokenizer: Any) -> tuple[dict[bool, list[dict]], dict[str, Any]]:
    import vllm

    os.environ.update(_env())
    spec = importlib.util.spec_from_file_location("agent_module", AGENT)  # openrlhf's _load_agent_executor
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)

    async def main():
        start = time.monotonic()
        engine = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(model=model, **ENGINE_KWARGS))
        built = time.monotonic() - start
        try:
            actor = _InProcessActor(engine, agent.AgentExecutor())
            start = time.monotonic()
            groups = {
                arm: [
                    actor.generate_responses(prompt, label, _sampling_params(arm), MAX_LEN, tokenizer, SAMPLES)
                    for prompt, label in groups
                ]
                for arm, groups in _arms().items()
            }
            out = {saar: [r for g in await asyncio.gather(*gs) for r in g] for saar, gs in groups.items()}
            return out, {"engine": "in-process", "build_s": built, "rollouts_s": time.monotonic() - start}
        finally:
            engine.shutdown()

    return asyncio.run(main())


@pytest.fixture(scope="module")
def tokenizer():
    from openrlhf.utils.utils import get_tokenizer

    from harness.engines.served_model import served_dir

    return get_tokenizer(str(served_dir("smollm2-tools")), None, "left", None)  # the trainer's HF tokenizer


@pytest.fixture(scope="module")
def runs(tokenizer) -> dict[bool | str, list[dict]]:
    """Every result OpenRLHF's actor returned, by arm (SAAR on: True; faults injected: INJECT), with the test
    agent's record."""
    from harness.engines.served_model import served_dir

    model = str(served_dir("smollm2-tools"))
    forced = os.environ.get("CLEANER_TEST_VLLM_ENGINE")  # "ray" or "in-process"; default: Ray where installed
    with_ray = forced == "ray" or (forced is None and importlib.util.find_spec("ray") is not None)
    with mock.patch.dict(os.environ):  # the engine's environment, restored afterwards for the rest of the session
        results, timing = (_via_ray if with_ray else _in_process)(model, tokenizer)
    failing = {
        ("on" if on else "off"): sum(r["extra_logs"]["tool_failures"] for r in results[on]) for on in (True, False)
    }
    print(f"\nexecutor on vLLM: {json.dumps(timing)}, failing calls per arm {failing}")
    return results


def _all(runs):
    return [(saar, r) for saar in (True, False) for r in runs[saar]]


def _decode(tokenizer, ids) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False)


def _is_sampled(span: list[int], calls: list[dict]) -> bool:
    """``span`` is one call's output ids, or a prefix of one call's ids followed by a suffix of another's."""
    outputs = [c["ids"] for c in calls]
    if span in outputs:
        return True
    for a in outputs:
        for b in outputs:
            if a is b:
                continue
            for cut in range(1, len(span)):
                if span[:cut] == a[:cut] and cut <= len(a) and len(span) - cut <= len(b):
                    if span[cut:] == b[len(b) - (len(span) - cut) :]:
                        return True
    return False


def test_each_arm_returned_every_sample_and_saar_acted_on_real_failures(runs):
    assert [len(runs[s]) for s in (True, False)] == [len(PROBLEMS) * SAMPLES] * 2
    off_failures = sum(r["extra_logs"]["tool_failures"] for r in runs[False])
    on_events = sum(len(r["test_record"]["events"]) for r in runs[True])
    assert off_failures > 0, "the warm model made no failing call: the problems no longer exercise SAAR"
    assert on_events > 0, "SAAR never acted: the warm model made no failing call with SAAR on"
    assert all(r["extra_logs"]["saar_on"] == 1.0 for r in runs[True])
    assert all(r["extra_logs"]["saar_on"] == 0.0 and not r["test_record"]["events"] for r in runs[False])


def test_every_action_token_is_an_id_the_engine_sampled(runs, tokenizer):
    for _, r in _all(runs):
        ids, ranges, calls = r["observation_tokens"], r["action_ranges"], r["test_record"]["calls"]
        assert ranges and all(a < b for a, b in ranges)
        assert all(b1 <= a2 for (_, b1), (a2, _) in zip(ranges, ranges[1:], strict=False))  # ordered, disjoint
        assert ranges[-1][1] <= len(ids) <= MAX_LEN
        spliced = regenerated = 0
        for start, end in ranges:
            span = ids[start:end]
            whole = [c for c in calls if c["ids"] == span]
            if whole:
                # a turn kept whole was sampled after exactly the trajectory before it: in place, or as a
                # deep SAAR regeneration, whose context went on with the failed turn and its error
                assert any(c["prompt_ids"][:start] == ids[:start] for c in whole)
                regenerated += not any(c["prompt_ids"] == ids[:start] for c in whole)
            else:
                assert _is_sampled(span, calls), f"action span {start}:{end} holds ids the engine did not sample"
                spliced += 1
        logs = r["extra_logs"]
        assert logs["spliced_turns"] == spliced
        assert regenerated <= logs["saar_deep"] + logs["saar_shallow"]
        assert logs["retokenized_turns"] == 0
        assert logs["response_tokens"] == sum(b - a for a, b in ranges)
        # the prompt is the template's rendering of the problem, untouched
        assert ids[: ranges[0][0]] == calls[0]["prompt_ids"]


def test_a_spliced_turn_is_an_earlier_generation_s_reasoning_and_a_later_generation_s_call(runs):
    for r in runs[True]:
        ids, logs, calls = r["observation_tokens"], r["extra_logs"], r["test_record"]["calls"]
        assert logs["spliced_turns"] <= logs["saar_shallow"]  # only a shallow replacement splices
        for start, end in r["action_ranges"]:
            span = ids[start:end]
            if any(c["ids"] == span for c in calls):
                continue
            pairs = [
                (i, j)
                for i, a in enumerate(calls)
                for j, b in enumerate(calls)
                if i < j
                and any(
                    span[:cut] == a["ids"][:cut]
                    and len(span) - cut <= len(b["ids"])
                    and span[cut:] == b["ids"][len(b["ids"]) - (len(span) - cut) :]
                    for cut in range(1, len(span))
                )
            ]
            assert pairs, "a spliced turn must join an installed turn's ids to a later regeneration's"


def test_tool_output_lies_outside_the_action_ranges(runs, tokenizer):
    for _, r in _all(runs):
        ids, ranges = r["observation_tokens"], r["action_ranges"]
        actions = [_decode(tokenizer, ids[a:b]) for a, b in ranges]
        gaps = [(0 if i == 0 else ranges[i - 1][1], a) for i, (a, _) in enumerate(ranges)] + [(ranges[-1][1], len(ids))]
        outside = "".join(_decode(tokenizer, ids[a:b]) for a, b in gaps)
        tools = [m for m in r["test_record"]["messages"] if m["role"] == "tool"]
        for m in tools:
            assert m["content"] in outside
        assert outside.count("<tool_response>") >= len(tools)
        assert not any("<|im_start|>" in a for a in actions)  # no range reaches into a header or a tool turn
        # OpenRLHF's action mask (samples_generator: the ranges, shifted by one) covers the same tokens
        mask = [0] * len(ids)
        for a, b in ranges:
            mask[a:b] = [1] * (b - a)
        assert sum(mask[1:MAX_LEN]) == r["extra_logs"]["response_tokens"]


def test_lengths_follow_openrlhf_max_len_and_max_new_tokens(runs):
    for _, r in _all(runs):
        for call in r["test_record"]["calls"]:
            assert call["max_tokens"] == min(MAX_NEW, MAX_LEN - len(call["prompt_ids"]))
            assert len(call["ids"]) <= call["max_tokens"]
            assert isinstance(call["seed"], int)  # OpenRLHF sends none; the executor seeds from the trajectory


def test_reward_scores_and_logs_are_right(runs, tokenizer):
    from sandboxes.local.sandbox import LocalSandbox

    items = {i.id: i for i in _items()}

    async def rescore(item, text):
        sandbox = LocalSandbox()
        try:
            return await compute_reward(item, text, sandbox)
        finally:
            await sandbox.close()

    for saar, r in _all(runs):
        rec, logs = r["test_record"], r["extra_logs"]
        item = from_label(r["label"])
        assert item.id in items
        outcome = asyncio.run(rescore(item, rec["final_text"]))
        assert r["reward"] == outcome.reward  # no overlong penalty configured
        assert r["scores"] == outcome.score
        assert logs["correct"] == float(outcome.correct)
        if item.kind == "math":
            assert r["reward"] == strict_reward(rec["final_text"], item.target)
            assert r["scores"] == (r["reward"] + 1) / 2
        else:
            assert r["reward"] == -1.0 or 0.0 <= r["reward"] <= 1.0
        messages = rec["messages"]
        assistant = [m for m in messages if m["role"] == "assistant"]
        tools = [m for m in messages if m["role"] == "tool"]
        kept_failures = sum(1 for m in tools if m["content"].startswith("Error"))
        events = rec["events"]
        calls = rec["calls"]
        assert logs["turns"] == len(assistant)
        # every generation is a turn kept, or a SAAR regeneration that replaced one or was dropped (length)
        regenerations = sum(1 for e in events if e["action"] in ("shallow", "deep", "length"))
        assert len(calls) == len(assistant) + regenerations
        assert logs["tokens_generated"] == sum(len(c["ids"]) for c in calls)  # discarded regenerations included
        assert logs["failures_kept"] == kept_failures
        assert logs["saar_purified"] == sum(1 for e in events if e["ok"])
        for action in ("shallow", "deep", "no_call", "length", "exhausted", "cap"):
            assert logs[f"saar_{action}"] == sum(1 for e in events if e["action"] == action)
        if not saar:
            assert logs["tool_calls"] == len(tools)
            assert logs["tool_failures"] == kept_failures
        else:
            # purified failures are cut out of the final messages but counted
            assert logs["tool_calls"] >= len(tools)
            assert logs["tool_failures"] >= kept_failures
        assert logs["tool_failure_rate"] == (logs["tool_failures"] / logs["tool_calls"] if logs["tool_calls"] else 0.0)
        assert r["truncated"] == (rec["stop_reason"] == "length")
        assert len(r["rollout_log_probs"]) == len(r["observation_tokens"])  # the arms ask for log-probs
        assert json.loads(rec["config"])["saar"]["enabled"] is saar


def test_a_rollout_that_raises_is_contained_and_openrlhf_assembles_the_batch(runs, tokenizer):
    import torch
    from openrlhf.trainer.ppo_utils.experience import Experience, split_experience_batch
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    results = runs[INJECT]
    assert len(results) == 2 * SAMPLES  # every prompt got its group back: nothing raised out of the actor
    good_label, bad_label = results[:SAMPLES], results[SAMPLES:]
    injected = [r for r in good_label if r["test_record"]["injected"]]
    assert injected and len(injected) < SAMPLES  # the group mixes failed and finished rollouts
    for r in injected + bad_label:
        assert r["action_ranges"] == [] and r["reward"] == 0.0 and r["extra_logs"]["rollout_failed"] == 1.0
    assert all(len(r["test_record"]["calls"]) == 1 for r in injected)  # the engine generated, then the fault
    for r in good_label:
        if not r["test_record"]["injected"]:
            assert r["action_ranges"] and r["extra_logs"]["rollout_failed"] == 0.0
    # OpenRLHF's own path from a response to a training batch: one Experience per sample, micro-batches
    # concatenated and split back (which needs the same extra_logs keys in every sample), rewards by group
    experiences = [SamplesGenerator._process_response_into_experience(None, r, max_len=MAX_LEN) for r in results]
    batch = Experience.concat_experiences(experiences, tokenizer.pad_token_id)
    assert len(split_experience_batch(batch)) == len(results)
    assert [int(e.action_mask.sum()) == 0 for e in experiences] == [
        r["extra_logs"]["rollout_failed"] == 1.0 for r in results
    ]
    rewards = torch.cat([e.rewards for e in experiences]).reshape(-1, SAMPLES)  # group_norm's reshape
    assert rewards.shape == (2, SAMPLES)
    assert batch.info["rollout_failed"].sum().item() == len(injected) + SAMPLES  # the step's count of failures


def _logged(runs):
    """The results of the arms that asked for rollout log-probs."""
    return [r for arm in (True, False, CORRECT) for r in runs[arm]]


def _final_attempt(r) -> list[dict]:
    """The recorded calls of the rollout's last attempt (a rollout rerun after a sandbox failure starts anew)."""
    calls, prompt = r["test_record"]["calls"], r["observation_tokens"][: r["action_ranges"][0][0]]
    return calls[max(i for i, c in enumerate(calls) if c["prompt_ids"] == prompt) :]


def _in_context(r) -> dict[int, float]:
    """Action positions whose token a generation drew in exactly the final context: its sampled log-prob."""
    ids, calls, out = r["observation_tokens"], _final_attempt(r), {}
    for start, end in r["action_ranges"]:
        best: list[float] = []
        for c in calls:
            if c["prompt_ids"] == ids[:start]:
                n = next((k for k, (a, b) in enumerate(zip(c["ids"], ids[start:end], strict=False)) if a != b), None)
                n = min(len(c["ids"]), end - start) if n is None else n
                best = max(best, c["logprobs"][:n], key=len)
        out.update({start + j: lp for j, lp in enumerate(best)})
    return out


def test_rollout_log_probs_are_the_engine_s_under_the_final_context(runs):
    """Tokens drawn in the final context: exactly their sampled log-probs (float32). Tokens SAAR put in: the
    engine's under the final context, within PREFILL_TOL of the test's own prefill. Nothing outside the actions."""
    replaced_seen = 0
    for r in _logged(runs):
        ids, values, rec = r["observation_tokens"], r["rollout_log_probs"], r["test_record"]
        action = {i for a, b in r["action_ranges"] for i in range(a, b)}
        assert all(v == 0.0 for i, v in enumerate(values) if i not in action)
        sampled = _in_context(r)
        replaced = action - set(sampled)
        assert r["extra_logs"]["saar_replaced_tokens"] == len(replaced)
        scored = ids[: MAX_LEN - 1] if len(ids) >= MAX_LEN else ids  # room for the one token a prefill generates
        assert rec["prefills"] == ([scored] if replaced else [])  # one prefill, of the finished sequence, if needed
        for i, lp in sampled.items():
            assert values[i] == lp  # as sampled, float for float
        for i in replaced:
            if i < len(scored):  # the last token of a full sequence keeps its sampled log-prob
                assert values[i] == pytest.approx(rec["prefill"][i], abs=PREFILL_TOL)
        assert all(v <= 0 for v in values)  # a token the engine is sure of has log-prob 0
        replaced_seen += len(replaced)
    assert replaced_seen > 0, "no trajectory had a replaced span: SAAR never rewrote a turn"
    assert not any(r["extra_logs"]["saar_replaced_tokens"] for r in runs[False])


def test_an_unpurified_trajectory_keeps_what_it_was_sampled_with(runs):
    for r in runs[False]:
        ids, values, calls = r["observation_tokens"], r["rollout_log_probs"], _final_attempt(r)
        for start, end in r["action_ranges"]:
            (call,) = [c for c in calls if c["prompt_ids"] == ids[:start] and c["ids"] == ids[start:end]]
            assert values[start:end] == call["logprobs"]


def test_a_replaced_span_s_gap_is_what_the_error_changed(runs):
    """The logged gap is the replaced tokens' sampled log-probs (their generation, error in view) less their values
    under the final context; the spans' gaps stand well above the engine's own decode/prefill differences."""
    from trainers.core.rescore import gap_summary

    spans = 0
    for r in runs[True] + runs[CORRECT]:
        logs, ids, values = r["extra_logs"], r["observation_tokens"], r["rollout_log_probs"]
        sampled, calls = _in_context(r), _final_attempt(r)
        gaps = []
        for start, end in r["action_ranges"]:
            rest = [i for i in range(start, end) if i not in sampled]
            if not rest:
                continue
            tail = [ids[i] for i in rest]
            call = next((c for c in calls if c["ids"][len(c["ids"]) - len(tail) :] == tail), None)
            if call is None:  # joined from two generations' ids: rescored, but no single sampled origin to compare
                continue
            diffs = [a - values[i] for a, i in zip(call["logprobs"][len(call["ids"]) - len(tail) :], rest, strict=True)]
            gaps.append(sum(diffs) / len(diffs))
        assert logs["saar_replaced_spans"] == len(gaps)
        assert logs["saar_gap_sum"] == pytest.approx(sum(gaps), abs=1e-6)
        assert all(g != 0.0 for g in gaps)
        spans += len(gaps)
    assert spans > 0
    saar = runs[True] + runs[CORRECT]
    means = {k: sum(r["extra_logs"][k] for r in saar) / len(saar) for k in saar[0]["extra_logs"]}
    summary = gap_summary(means)
    print(f"\nSAAR gap on vLLM (bf16, warm model): {json.dumps(summary)}")
    rms = (means["saar_gap_sq_sum"] / means["saar_replaced_spans"]) ** 0.5
    assert rms > 3 * summary["rescore_floor"]
