"""The stand-in engine (a scripted policy behind an OpenAI-compatible server, not a model): its answers, its
refusals, its address, and Inspect's own ``vllm/`` provider evaluating a task against it."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from bench.scripted_policy import Policy, decide
from bench.standin import DEFAULT_NAME, HOST, StandinProcess
from harness.core.toolenv import PROJECT

ROOT = Path(__file__).resolve().parents[1]


def tools(name: str = "python") -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    return [{"type": "function", "function": {"name": name, "description": "Run a program.", "parameters": schema}}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandinProcess]:
    log = tmp_path_factory.mktemp("standin") / "standin.log"
    with StandinProcess(log_path=log) as running:
        yield running


def post(server: StandinProcess, body: Any, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions", data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_a_conversation_gets_tool_calls_then_a_final_answer(server: StandinProcess) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 1 + 1?"}]
    for turn in range(12):
        status, answer = post(server, {"model": DEFAULT_NAME, "messages": messages, "tools": tools(), "seed": 3})
        assert status == 200
        choice = answer["choices"][0]
        assert answer["usage"]["prompt_tokens"] > 0 and answer["usage"]["completion_tokens"] > 0
        if not choice["message"]["tool_calls"]:
            assert choice["finish_reason"] == "stop"
            assert "\\boxed{285}" in choice["message"]["content"]  # the last run's output
            assert turn >= Policy().calls
            return
        assert choice["finish_reason"] == "tool_calls"
        [call] = choice["message"]["tool_calls"]
        assert call["function"]["name"] == "python"
        code = json.loads(call["function"]["arguments"])["code"]
        messages += [
            {"role": "assistant", "content": choice["message"]["content"], "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "285"},  # as if it ran
        ]
        assert isinstance(code, str) and code
    pytest.fail("no final answer")


def test_a_failed_run_is_corrected_on_the_next_request() -> None:
    policy = Policy(fail_rate=1.0, refail_rate=0.0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "q"}]
    first = decide(policy, messages, tools("code_interpreter"), seed=5)
    assert first.call is not None and first.call[0] == "code_interpreter"
    with pytest.raises((NameError, SyntaxError, ZeroDivisionError)):
        exec(compile(first.call[1], "<program>", "exec"), {})
    call = {"id": "c1", "type": "function", "function": {"name": "code_interpreter", "arguments": ""}}
    call["function"]["arguments"] = json.dumps({"code": first.call[1]})
    messages += [
        {"role": "assistant", "content": first.text, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Error:\nTraceback (most recent call last): ..."},
    ]
    fix = decide(policy, messages, tools("code_interpreter"), seed=6)
    assert fix.call is not None and fix.text.startswith("The run failed")
    exec(compile(fix.call[1], "<program>", "exec"), {})  # runs
    assert decide(policy, messages, tools("code_interpreter"), seed=6) == fix  # deterministic


def test_an_unknown_model_is_a_404_as_vllm_returns_it(server: StandinProcess) -> None:
    status, body = post(server, {"model": "Qwen/Qwen3-4B", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 404
    assert body["error"]["type"] == "NotFoundError" and body["error"]["code"] == 404
    assert "Qwen/Qwen3-4B" in body["error"]["message"]


@pytest.mark.parametrize(
    ("body", "raw"),
    [
        (None, b"{not json"),
        ({"model": DEFAULT_NAME}, None),
        ({"model": DEFAULT_NAME, "messages": [{"content": "no role"}]}, None),
        ({"model": DEFAULT_NAME, "messages": [{"role": "user", "content": "x"}], "n": 2}, None),
        ({"model": DEFAULT_NAME, "messages": [{"role": "user", "content": "x"}], "max_tokens": 10**9}, None),
    ],
)
def test_a_malformed_request_is_a_400(server: StandinProcess, body: Any, raw: bytes | None) -> None:
    status, answer = post(server, body, raw)
    assert status == 400
    assert answer["error"]["type"] == "BadRequestError" and answer["error"]["code"] == 400


def test_the_model_list_names_the_stand_in(server: StandinProcess) -> None:
    with urllib.request.urlopen(f"{server.base_url}/models", timeout=10) as response:
        [card] = json.load(response)["data"]
    assert card["id"] == DEFAULT_NAME and "standin" in card["root"] and card["max_model_len"] > 0


def test_it_listens_on_loopback_only(server: StandinProcess) -> None:
    port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    listening = [c for c in psutil.Process(server.pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert listening and all(c.laddr.ip == HOST for c in listening)
    others = [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and a.address != HOST
    ]
    for address in [*others, "127.0.0.2"]:  # another interface, another loopback address: nobody answers
        with socket.socket() as s:
            s.settimeout(2)
            assert s.connect_ex((address, port)) != 0, address


def test_inspects_vllm_provider_evaluates_a_task_against_it(server: StandinProcess, tmp_path: Path) -> None:
    from inspect_ai import eval as inspect_eval
    from inspect_ai.event import SandboxEvent

    cwd = os.getcwd()
    os.chdir(ROOT)  # Inspect resolves task files relative to the working directory
    try:
        [log] = inspect_eval(
            "tasks/aime24.py",
            model=f"vllm/{server.name}",
            model_base_url=server.base_url,
            task_args={"data": "fixture", "sandbox": "local", "saar": True},
            limit=2,
            log_dir=str(tmp_path),
            display="none",
        )
    finally:
        os.chdir(cwd)
    assert log.status == "success", log.error
    assert log.samples and len(log.samples) == 2
    for sample in log.samples:
        trajectory = sample.metadata["trajectory"]
        assert trajectory["tool_calls"] >= Policy().calls and trajectory["stop_reason"] == "answer"
        assert any(isinstance(e, SandboxEvent) for e in sample.events)  # programs ran in the sandbox
        assert "\\boxed{" in sample.output.completion


def test_the_executor_benchmark_s_engine_reads_back_what_the_executor_rendered() -> None:
    """The executor benchmark's engine sees token ids: the conversation it reads back from the rendered context
    must make the policy answer exactly as the server answers the same conversation in OpenAI form (else that
    benchmark would measure another policy, e.g. one that never sees its failed runs)."""
    pytest.importorskip("openrlhf")
    from bench.executor_speed import conversation
    from harness.core.chat import render
    from harness.core.messages import Message, to_openai
    from harness.core.protocol import ToolCall, format_result, serialize_call
    from trainers.core import _compat

    tokenizer = _compat.load_tokenizer()
    broken = "n = 23\nprint(totl)\n"
    messages = [
        Message(role="system", content="Solve it."),
        Message(role="user", content="What is the sum of the squares 1..23 modulo 1000?"),
        Message(role="assistant", content="Let me compute.\n", call=ToolCall(broken, serialize_call(broken))),
        Message(
            role="tool",
            content=format_result(ok=False, stdout="", stderr="NameError: totl", error_kind="NameError", env=PROJECT),
            tool_call_id="call_0",
        ),
    ]
    text = tokenizer.decode(tokenizer(render(tokenizer, messages, env=PROJECT))["input_ids"], skip_special_tokens=False)
    read_back = conversation(text)
    assert [m["role"] for m in read_back] == ["system", "user", "assistant", "tool"]
    as_served = to_openai(messages)  # as Inspect sends it: the call's arguments as a JSON string
    as_served[2]["tool_calls"][0]["function"]["arguments"] = json.dumps({"code": broken})
    for seed in range(20):
        assert decide(Policy(), read_back, tools(), seed) == decide(Policy(), as_served, tools(), seed)
    fixed = decide(Policy(refail_rate=0.0, rewrite_rate=0.0), read_back, tools(), 1)
    assert fixed.call is not None and fixed.call[1].startswith("n = 23\n"), "the correction lost the failed program"
