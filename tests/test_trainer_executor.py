"""The OpenRLHF agent executor against a scripted engine (a mock of the GPU vLLM engine).

The executor is imported with the real ``openrlhf`` package; the engine returns fixed
token ids (the SmolLM2 tokenizer's ids of scripted texts, plus end-of-turn), so the
observation tokens and action ranges after a shallow and after a deep SAAR rewrite
are exact. Tool calls run in a real local sandbox.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from needs import import_or_skip

import_or_skip("openrlhf.utils.agent")

from openrlhf.utils.agent import AgentExecutorBase  # noqa: E402

from harness.benchmarks.problem import Problem  # noqa: E402
from harness.core.protocol import serialize_call  # noqa: E402
from harness.core.rollout import RolloutConfig, rollout  # noqa: E402
from harness.core.saar import SaarConfig  # noqa: E402
from harness.core.toolenv import PROJECT  # noqa: E402
from sandboxes.base import Sandbox  # noqa: E402
from trainers.core import _compat  # noqa: E402
from trainers.core.data import label  # noqa: E402
from trainers.core.tokens import TemplateError, assemble  # noqa: E402
from trainers.openrlhf_plugin.executor import AgentExecutor, ExecutorConfig  # noqa: E402

A, B = 12345678, 87654321
ANSWER = str(A * B)
BROKEN = f"print({A} * {B}"  # SyntaxError
FIXED = f"print({A} * {B})"  # close to BROKEN: shallow
OTHER = f"a = {A}\nb = {B}\nresult = a * b\nprint(result)"  # far from BROKEN: deep

T1 = "I will multiply with the tool.\n" + serialize_call(BROKEN)
SHALLOW_REGEN = "Closing the parenthesis.\n" + serialize_call(FIXED)
DEEP_REGEN = "Let me name the numbers first.\n" + serialize_call(OTHER)
FINAL = f"The product is \\boxed{{{ANSWER}}}."
WRONG = "The product is \\boxed{42}."


class _Backend:
    """acquire/release over one real sandbox (the shape of sandboxes.backends.Backend)."""

    def __init__(self) -> None:
        from sandboxes.local.sandbox import LocalSandbox  # no fallback: a broken local backend must fail these tests

        self.sandbox: Sandbox = LocalSandbox()
        self.acquired = self.released = 0

    async def acquire(self) -> Sandbox:
        self.acquired += 1
        return self.sandbox

    async def release(self, sb: Sandbox) -> None:
        self.released += 1


class ScriptedEngine:
    """Mock of OpenRLHF's vLLM rollout actor: each generate returns the next scripted text as token ids."""

    def __init__(self, tokenizer, texts: list[str]) -> None:
        self.tokenizer = tokenizer
        self.texts = list(texts)
        self.contexts: list[list[int]] = []
        self.outputs: list[list[int]] = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        self.contexts.append(list(prompt_token_ids))
        text = self.texts.pop(0)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        self.outputs.append(ids)
        out = SimpleNamespace(token_ids=ids, text=text, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


@pytest.fixture(scope="module")
def tokenizer():
    return _compat.load_tokenizer()


def _item() -> Problem:
    return Problem("mul-1", f"What is {A} * {B}? Put the answer in \\boxed{{}}.", ANSWER, "math")


def _params():
    return SimpleNamespace(max_tokens=None, logprobs=None, temperature=1.0)  # stand-in for vllm.SamplingParams


async def _run(tokenizer, texts, prob=1.0, enabled=True):
    cfg = ExecutorConfig(saar=SaarConfig(enabled=enabled, prob=prob), seed=0)
    backend = _Backend()
    executor = AgentExecutor(cfg, backend=backend)
    engine = ScriptedEngine(tokenizer, texts)
    item = _item()
    result, traj = await executor.run(item.prompt, label(item), _params(), 4096, tokenizer, engine)
    assert backend.released == backend.acquired  # the executor leases a sandbox per program run
    return result, traj, engine


def _decode(tokenizer, ids):
    return tokenizer.decode(ids, skip_special_tokens=False)


def _check_ranges_cover_only_assistant(tokenizer, result, traj):
    ids, ranges = result["observation_tokens"], result["action_ranges"]
    eos = tokenizer.eos_token
    assistant_texts = [m.text for m in traj.messages if m.role == "assistant"]
    assert [_decode(tokenizer, ids[s:e]) for s, e in ranges] == [t + eos for t in assistant_texts]
    outside = "".join(_decode(tokenizer, ids[a:b]) for a, b in _gaps(ranges, len(ids)))
    for m in traj.messages:
        if m.role == "tool":
            assert m.content in outside  # every tool output lies outside the action ranges


def _gaps(ranges, n):
    pos = 0
    for s, e in ranges:
        yield pos, s
        pos = e
    yield pos, n


def test_executor_subclasses_openrlhf_base():
    assert issubclass(AgentExecutor, AgentExecutorBase)
    import importlib.util

    import trainers.openrlhf_plugin.executor as mod

    spec = importlib.util.spec_from_file_location("agent_module", mod.__file__)  # how OpenRLHF loads it
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    assert issubclass(loaded.AgentExecutor, AgentExecutorBase)


async def test_shallow_rewrite_keeps_reasoning_ids_and_splices_call(tokenizer):
    result, traj, engine = await _run(tokenizer, [T1, SHALLOW_REGEN, FINAL])
    assert [e.action for e in traj.events] == ["shallow"]
    ids, ranges = result["observation_tokens"], result["action_ranges"]
    assert len(ranges) == 2
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    first = ids[ranges[0][0] : ranges[0][1]]
    # old reasoning ids (from the first sample) + the new call's ids (from the regeneration)
    assert first == enc("I will multiply with the tool.\n") + enc(serialize_call(FIXED)) + [tokenizer.eos_token_id]
    assert (
        first[: len(enc("I will multiply with the tool.\n"))]
        == engine.outputs[0][: len(first) - len(enc(serialize_call(FIXED))) - 1]
    )
    assert ids[ranges[1][0] : ranges[1][1]] == engine.outputs[2]  # the final answer, as sampled
    _check_ranges_cover_only_assistant(tokenizer, result, traj)
    text = _decode(tokenizer, ids)
    assert "SyntaxError" not in text and "Closing the parenthesis" not in text
    assert ANSWER in text  # the successful tool result
    # the regeneration saw the error; the turn after it saw the purified context, a prefix of the final sequence
    assert "SyntaxError" in _decode(tokenizer, engine.contexts[1])
    assert ids[: len(engine.contexts[2])] == engine.contexts[2]
    assert result["reward"] == 1.0 and result["scores"] == 1.0
    assert result["rollout_log_probs"] is None
    logs = result["extra_logs"]
    assert logs["saar_shallow"] == 1 and logs["saar_deep"] == 0 and logs["saar_on"] == 1
    assert logs["tool_failures"] == 1 and logs["tool_calls"] == 2 and logs["turns"] == 2
    assert logs["retokenized_turns"] == 0


async def test_deep_rewrite_replaces_whole_turn_with_sampled_ids(tokenizer):
    result, traj, engine = await _run(tokenizer, [T1, DEEP_REGEN, FINAL])
    assert [e.action for e in traj.events] == ["deep"]
    ids, ranges = result["observation_tokens"], result["action_ranges"]
    assert ids[ranges[0][0] : ranges[0][1]] == engine.outputs[1]  # the regenerated turn, token for token
    assert ids[ranges[1][0] : ranges[1][1]] == engine.outputs[2]
    _check_ranges_cover_only_assistant(tokenizer, result, traj)
    text = _decode(tokenizer, ids)
    assert "I will multiply" not in text and "SyntaxError" not in text
    assert result["extra_logs"]["saar_deep"] == 1 and result["extra_logs"]["saar_shallow"] == 0


async def test_saar_probability_zero_keeps_the_failure(tokenizer):
    result, traj, engine = await _run(tokenizer, [T1, SHALLOW_REGEN, FINAL], prob=0.0)
    assert traj.events == [] and not traj.saar_on
    ids, ranges = result["observation_tokens"], result["action_ranges"]
    assert len(ranges) == 3  # failed turn, its error, the retry as an ordinary turn, the answer
    assert [ids[s:e] for s, e in ranges] == engine.outputs
    _check_ranges_cover_only_assistant(tokenizer, result, traj)
    assert "SyntaxError" in _decode(tokenizer, ids)
    logs = result["extra_logs"]
    assert logs["saar_on"] == 0 and logs["failures_kept"] == 1 and logs["tool_failure_rate"] == 0.5


async def test_saar_probability_one_draws_on_for_every_trajectory(tokenizer):
    for _ in range(3):
        result, traj, _ = await _run(tokenizer, [T1, SHALLOW_REGEN, FINAL], prob=1.0)
        assert traj.saar_on and result["extra_logs"]["saar_on"] == 1


async def test_wrong_answer_scores_minus_one(tokenizer):
    result, _, _ = await _run(tokenizer, [WRONG])
    assert result["reward"] == -1.0 and result["scores"] == 0.0 and result["extra_logs"]["correct"] == 0


async def test_inference_and_training_paths_give_the_same_purified_messages(tokenizer):
    texts = [T1, SHALLOW_REGEN, FINAL]
    result, train_traj, _ = await _run(tokenizer, list(texts))
    pending = list(texts)

    async def generate(messages, *, seed=None):
        from harness.core.messages import Generation

        return Generation(text=pending.pop(0), output_tokens=1)

    item = _item()
    cfg = RolloutConfig(saar=SaarConfig(enabled=True, prob=1.0), tool_env=PROJECT)
    infer_traj = await rollout(item.messages(), generate, _Backend().sandbox, cfg)
    assert infer_traj.messages == train_traj.messages
    render = _compat.get_render()
    assert _decode(tokenizer, result["observation_tokens"]) == render(
        tokenizer, infer_traj.messages, add_generation_prompt=False, env=PROJECT
    )


async def test_logprobs_with_saar_and_temperature_other_than_1_is_a_clear_error(tokenizer):
    executor = AgentExecutor(ExecutorConfig(saar=SaarConfig(enabled=True)), backend=_Backend())
    params = SimpleNamespace(max_tokens=None, logprobs=1, temperature=0.7)
    with pytest.raises(ValueError, match="is_correction_level with SAAR on.*temperature 1.0"):
        await executor.execute("p", label(_item()), params, 4096, tokenizer, ScriptedEngine(tokenizer, [FINAL]))


def test_config_rejects_unknown_keys():
    with pytest.raises(ValueError, match="unknown keys"):
        ExecutorConfig.from_json('{"saar": {"enabled": true}, "turns": 3}')
    with pytest.raises(ValueError, match="gamma"):
        ExecutorConfig.from_json('{"saar": {"enabled": true, "gamma": 2}}')


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{}", "no 'saar' settings"),
        ('{"saar": {"prob": 0.7}}', "saar.enabled is not stated"),
        ('{"saar": {"enabled": "yes"}}', r"saar\.enabled must be bool, got 'yes'"),
        ('{"saar": {"enabled": true, "retries": 2}}', r"unknown keys in 'saar': \['retries'\]"),
        ('{"saar": {"enabled": true, "max_retries": 1.5}}', r"saar\.max_retries must be int"),
        ('{"saar": {"enabled": true, "similarity": "tokens"}}', "similarity must be 'code' or 'call'"),
        ('{"saar": true}', "'saar' must be a mapping"),
    ],
)
def test_the_saar_settings_are_stated_and_checked_where_they_are_read(text, message):
    with pytest.raises(ValueError, match=rf"^where: .*{message}"):
        ExecutorConfig.from_json(text, where="where")


def test_the_executor_config_travels_as_json_and_reads_back_to_the_same_typed_saar():
    cfg = ExecutorConfig.from_json('{"saar": {"enabled": true, "prob": 0.7}, "tool_env": "reference", "seed": 3}')
    assert cfg.saar == SaarConfig(enabled=True, prob=0.7, similarity="call")  # the reference's similarity
    assert ExecutorConfig.from_json(cfg.to_json()) == cfg
    on = ExecutorConfig.from_json('{"saar": {"enabled": true, "prob": 1}}')  # an int where a float is asked
    assert on.saar.prob == 1.0 and on.rollout_config().saar is on.saar
    with pytest.raises(TypeError, match="must be a SaarConfig"):
        ExecutorConfig(saar={"enabled": True})  # type: ignore[arg-type]


def test_an_executor_without_its_settings_says_where_they_come_from(monkeypatch):
    monkeypatch.delenv("CLEANER_AGENT_CONFIG", raising=False)
    with pytest.raises(ValueError, match="CLEANER_AGENT_CONFIG is not set.*python -m trainers launch"):
        AgentExecutor()


def test_non_prefix_stable_template_is_reported(tokenizer):
    from harness.core.messages import Message

    def bad_render(tok, messages, add_generation_prompt=True, env=None):
        return "".join(f"[{len(messages)}]{m.content}" for m in messages)

    msgs = [Message("user", "q"), Message("assistant", "a")]
    with pytest.raises(TemplateError, match="prefix-stable"):
        assemble(tokenizer, msgs, 1, render=bad_render, env=PROJECT)


async def test_a_code_items_final_python_block_is_its_answer_not_a_tool_call(tokenizer):
    """The parse mode comes from the problem kind (harness.core.problems), in training too."""
    answer = "Read the number and print it.\n```python\nprint(input())\n```"
    item = Problem(
        "echo-1", "Print the input.", "", "code", tests=[{"input": "3\n", "output": "3\n", "testtype": "stdin"}]
    )
    executor = AgentExecutor(ExecutorConfig(saar=SaarConfig(enabled=True, prob=1.0), seed=0), backend=_Backend())
    engine = ScriptedEngine(tokenizer, [answer] * 5)
    result, traj = await executor.run(item.prompt, label(item), _params(), 4096, tokenizer, engine)
    assert traj.tool_calls == 0 and traj.stop_reason == "answer" and traj.events == []
    assert result["reward"] == 1.0


async def test_fractional_saar_probability_draws_per_trajectory(tokenizer):
    """prob=1.0 never reaches the random draw; 0.5 must turn SAAR on for some trajectories and off for others,
    and each trajectory must then behave as its draw says."""
    executor = AgentExecutor(ExecutorConfig(saar=SaarConfig(enabled=True, prob=0.5), seed=3), backend=_Backend())
    item = _item()
    draws = []
    for _ in range(12):
        engine = ScriptedEngine(tokenizer, [T1, SHALLOW_REGEN, FINAL])
        result, traj = await executor.run(item.prompt, label(item), _params(), 4096, tokenizer, engine)
        draws.append(traj.saar_on)
        assert result["extra_logs"]["saar_on"] == float(traj.saar_on)
        assert traj.failures_kept == (0 if traj.saar_on else 1)
        assert [e.action for e in traj.events] == (["shallow"] if traj.saar_on else [])
    assert 0 < sum(draws) < len(draws), draws


async def test_the_reference_span_ends_with_the_trainers_tokenizers_end_of_turn(tokenizer):
    """Under ``reference`` the executor compares a failed and a regenerated call to the end of their turns, with the
    end-of-turn token of the model it trains (Open-CLEANER 91e40ad, tool_agent_loop.py lines 1040-1114), here a
    template that ends assistant turns with ``<|endoftext|>``."""
    import copy
    import difflib

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|endoftext|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    tok.eos_token = "<|endoftext|>"
    first, regen = (serialize_call(code, "code_interpreter") for code in (BROKEN, FIXED))
    texts = ["I will multiply with the tool.\n" + first, "Closing the parenthesis.\n" + regen, FINAL]
    cfg = ExecutorConfig(saar=SaarConfig(enabled=True, similarity="call"), tool_env="reference", seed=0)
    item = _item()
    _, traj = await AgentExecutor(cfg, backend=_Backend()).run(
        item.prompt, label(item), _params(), 4096, tok, ScriptedEngine(tok, texts)
    )
    expected = difflib.SequenceMatcher(None, first + "<|endoftext|>", regen + "<|endoftext|>").ratio()
    assert [(e.action, e.similarity) for e in traj.events] == [("shallow", pytest.approx(expected))]
    assert expected != difflib.SequenceMatcher(None, first + "<|im_end|>", regen + "<|im_end|>").ratio()
