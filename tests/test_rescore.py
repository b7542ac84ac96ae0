"""Rollout log-probs of purified trajectories (trainers.core.rescore through the OpenRLHF executor), on a scripted
engine whose log-probs are a fixed function of the context (a stand-in for a model: the real engine is in
tests/test_executor_vllm.py). Because the stand-in's log-prob of a token depends on every token before it, a value
is right exactly when it is the log-prob of that token under the final context."""

from __future__ import annotations

import zlib
from types import SimpleNamespace

import pytest
from needs import import_or_skip

import_or_skip("openrlhf.utils.agent")
import_or_skip("vllm")

from harness.benchmarks.problem import Problem  # noqa: E402
from harness.core.protocol import serialize_call  # noqa: E402
from harness.core.saar import SaarConfig  # noqa: E402
from trainers.core import _compat  # noqa: E402
from trainers.core.data import label  # noqa: E402
from trainers.core.rescore import GAP_KEYS, SampleLog, gap_summary, origins, rollout_log_probs  # noqa: E402
from trainers.openrlhf_plugin.executor import AgentExecutor, ExecutorConfig  # noqa: E402

A, B = 12345678, 87654321
BROKEN = f"print({A} * {B}"
T1 = "I will multiply with the tool.\n" + serialize_call(BROKEN)
SHALLOW_REGEN = "Closing the parenthesis.\n" + serialize_call(f"print({A} * {B})")
DEEP_REGEN = "Let me name the numbers first.\n" + serialize_call(f"a = {A}\nb = {B}\nresult = a * b\nprint(result)")
FINAL = f"The product is \\boxed{{{A * B}}}."


def model_logprob(prefix, token) -> float:
    """The stand-in model: a log-prob in (-10, 0) that changes with any token of the prefix."""
    return -0.01 - (zlib.crc32(repr((tuple(prefix), token)).encode()) % 1000) / 100


class ScoringEngine:
    """OpenRLHF's rollout actor as the executor calls it: scripted generations with their log-probs, and prefills
    that score a prompt (``prompt_logprobs``)."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts = tokenizer, list(texts)
        self.prefills: list[list[int]] = []
        self.contexts: list[list[int]] = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        ids = list(prompt_token_ids)
        if getattr(sampling_params, "prompt_logprobs", None) is not None:
            self.prefills.append(ids)
            rows = [None] + [
                {ids[i]: SimpleNamespace(logprob=model_logprob(ids[:i], ids[i]))} for i in range(1, len(ids))
            ]
            return SimpleNamespace(prompt_logprobs=rows, outputs=[])
        self.contexts.append(ids)
        text = self.texts.pop(0)
        out = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        steps = None
        if sampling_params.logprobs is not None:
            steps = [{t: SimpleNamespace(logprob=model_logprob(ids + out[:j], t))} for j, t in enumerate(out)]
        return SimpleNamespace(
            outputs=[SimpleNamespace(token_ids=out, text=text, finish_reason="stop", logprobs=steps)]
        )


class _Backend:
    def __init__(self):
        from sandboxes.local.sandbox import LocalSandbox

        self.sandbox = LocalSandbox()

    async def acquire(self):
        return self.sandbox

    async def release(self, sb):
        pass


@pytest.fixture(scope="module")
def tokenizer():
    return _compat.load_tokenizer()


def _params(logprobs=1, temperature=1.0, top_p=1.0):
    return SimpleNamespace(
        max_tokens=None, logprobs=logprobs, temperature=temperature, top_p=top_p, top_k=-1, min_p=0.0
    )


def _item():
    return Problem("mul-1", f"What is {A} * {B}? Put the answer in \\boxed{{}}.", str(A * B), "math")


async def _run(tokenizer, texts, saar=True, params=None):
    executor = AgentExecutor(ExecutorConfig(saar=SaarConfig(enabled=saar), seed=0), backend=_Backend())
    engine = ScoringEngine(tokenizer, texts)
    item = _item()
    result = await executor.execute(item.prompt, label(item), params or _params(), 4096, tokenizer, engine)
    assert result["extra_logs"]["rollout_failed"] == 0.0, executor.ledger.kinds
    return result, engine


def _check_final_context(result):
    """Every action token's value is its log-prob under the final context; 0 elsewhere."""
    ids, values = result["observation_tokens"], result["rollout_log_probs"]
    assert len(values) == len(ids)
    action = {i for s, e in result["action_ranges"] for i in range(s, e)}
    for i, v in enumerate(values):
        assert v == (pytest.approx(model_logprob(ids[:i], ids[i]), abs=1e-12) if i in action else 0.0)


async def test_an_untouched_trajectory_keeps_its_sampled_log_probs_without_a_prefill(tokenizer):
    result, engine = await _run(tokenizer, [FINAL])
    assert engine.prefills == []  # nothing replaced: nothing rescored
    _check_final_context(result)
    assert all(result["extra_logs"][k] == 0.0 for k in GAP_KEYS)


@pytest.mark.parametrize(("regen", "action"), [(SHALLOW_REGEN, "shallow"), (DEEP_REGEN, "deep")])
async def test_a_purified_trajectory_is_rescored_under_its_final_context(tokenizer, regen, action):
    result, engine = await _run(tokenizer, [T1, regen, FINAL])
    assert result["extra_logs"][f"saar_{action}"] == 1
    assert engine.prefills == [result["observation_tokens"]]  # one prefill of the finished sequence
    _check_final_context(result)
    logs = result["extra_logs"]
    assert logs["saar_replaced_spans"] == 1 and logs["saar_replaced_tokens"] > 0
    # the replaced tokens were sampled after the failed turn and its error: their gap is not 0
    assert logs["saar_gap_sum"] != 0.0 and logs["saar_gap_sq_sum"] > 0
    assert 0 < logs["saar_replaced_share"] < 1
    # the tokens sampled in the final context score the same under the prefill (a deterministic stand-in)
    assert logs["rescore_kept_tokens"] > 0 and logs["rescore_kept_abs_sum"] == pytest.approx(0.0, abs=1e-12)


async def test_a_shallow_replacement_rescores_the_new_call_only(tokenizer):
    result, _ = await _run(tokenizer, [T1, SHALLOW_REGEN, FINAL])
    call = tokenizer(serialize_call(f"print({A} * {B})"), add_special_tokens=False)["input_ids"]
    # the new call and its end-of-turn token; the installed turn's reasoning was sampled in the final context
    assert result["extra_logs"]["saar_replaced_tokens"] <= len(call) + 1


async def test_saar_off_with_log_probs_needs_no_prefill(tokenizer):
    result, engine = await _run(tokenizer, [T1, SHALLOW_REGEN, FINAL], saar=False)
    assert engine.prefills == [] and result["extra_logs"]["saar_replaced_tokens"] == 0
    _check_final_context(result)


async def test_without_log_probs_requested_none_are_returned(tokenizer):
    result, engine = await _run(tokenizer, [T1, SHALLOW_REGEN, FINAL], params=_params(logprobs=None))
    assert result["rollout_log_probs"] is None and engine.prefills == []
    assert not set(GAP_KEYS) & set(result["extra_logs"])


async def test_a_failed_rollout_has_zero_log_probs_and_every_key(tokenizer):
    executor = AgentExecutor(ExecutorConfig(saar=SaarConfig(enabled=True), seed=0), backend=_Backend())
    ok, _ = await _run(tokenizer, [FINAL])
    failed = await executor.execute("p", "not a label", _params(), 4096, tokenizer, ScoringEngine(tokenizer, []))
    assert failed["rollout_log_probs"] == [0.0] * len(failed["observation_tokens"])
    assert set(failed["extra_logs"]) == set(ok["extra_logs"])


@pytest.mark.parametrize("params", [_params(temperature=0.9), _params(top_p=0.95)])
async def test_saar_with_log_probs_refuses_sampling_a_prefill_cannot_reproduce(tokenizer, params):
    with pytest.raises(ValueError, match="temperature 1.0, top_p 1.0"):
        await _run(tokenizer, [FINAL], params=params)


def test_a_token_without_any_origin_is_an_error_unless_rescored():
    log = SampleLog()
    log.add([1, 2], [3, 4], [-0.5, -0.25])
    spans = origins([1, 2, 3, 9], [(2, 4)], log)
    assert (spans[0].kept, spans[0].replaced, spans[0].replaced_logprobs) == (1, 1, None)
    with pytest.raises(ValueError, match="neither sampled in context nor rescored"):
        rollout_log_probs(4, spans, None)
    assert rollout_log_probs(4, spans, [None, -1.0, -2.0, -3.0]) == [0.0, 0.0, -0.5, -3.0]


def test_gap_summary_is_the_mean_and_spread_over_spans():
    # two samples' logs averaged by OpenRLHF: spans with gaps 1.0 and 3.0 (sum 4, squares 10), over 2 samples
    means = {"saar_replaced_spans": 1.0, "saar_gap_sum": 2.0, "saar_gap_sq_sum": 5.0, "saar_replaced_tokens": 5.0,
             "response_tokens": 50.0, "rescore_kept_tokens": 10.0, "rescore_kept_abs_sum": 0.1}  # fmt: skip
    summary = gap_summary(means)
    assert summary["saar_gap_mean"] == 2.0 and summary["saar_gap_std"] == pytest.approx(1.0)
    assert summary["saar_replaced_token_share"] == 0.1 and summary["rescore_floor"] == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("cpu", "message"),
    [
        ({"is_correction": "token", "engine": "vllm"}, "cpu.is_correction must be one of off, token_truncate"),
        ({"is_correction": "token_truncate", "engine": "hf"}, "cpu.is_correction needs cpu.engine vllm"),
    ],
)
def test_the_cpu_trainer_s_correction_is_checked(cpu, message):
    from trainers.core.config import CpuConfig

    with pytest.raises(ValueError, match=message):
        CpuConfig.from_dict(cpu, "r.yaml")
    assert CpuConfig.from_dict({"is_correction": "sequence_mask", "engine": "auto"}, "r.yaml").is_correction
