"""A served eval as this project drives Inspect's ``vllm/`` and ``sglang/`` providers.

* It sends the tool unconstrained: no ``"strict": true`` (with it, vLLM constrains a call to the tool's schema, so a
  served model could not write the malformed calls the trainers' engines and the reference's let it write).
* Under ``reference`` with SAAR on, the call span SAAR compares ends with the model's end-of-turn token, read from
  the tokenizer the model's name gives (a replay script may name the token); with none, the eval fails before its
  first sample, naming the model and ``-T tokenizer=``.

The server is an OpenAI-compatible stand-in on loopback that records each request's JSON body, as vLLM's or SGLang's
server receives it, and answers with scripted turns; the providers, the task and the eval are real.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml
from chat_server import ChatServer

from harness.benchmarks.registry import TASKS_DIR


class RecordingServer(ChatServer):
    """Answers the n-th chat completion with the n-th reply (the last one past the end) and keeps the request
    bodies; lists one model."""

    def __init__(self, name: str, replies: tuple[str, ...]) -> None:
        self.name = name
        self.requests: list[dict[str, Any]] = []

        def reply(request: dict[str, Any]) -> str:
            self.requests.append(request)
            return replies[min(len(self.requests), len(replies)) - 1]

        super().__init__(lambda: [{"id": name}], reply)


@contextmanager
def serving(name: str, replies: tuple[str, ...] = ("The answer is \\boxed{25}.",)) -> Iterator[RecordingServer]:
    recording = RecordingServer(name, replies)
    try:
        yield recording
    finally:
        recording.close()


@pytest.fixture
def server(request) -> Iterator[RecordingServer]:
    # a name of its own: Inspect's vllm/ provider keeps one server (its address) per model name for the process
    with serving(f"served-{request.node.callspec.id}") as recording:
        yield recording


@pytest.mark.parametrize("provider", ["vllm", "sglang"])
@pytest.mark.parametrize("tool_env", ["project", "reference"])
def test_a_served_eval_sends_its_tool_without_strict(server, provider, tool_env, tmp_path, monkeypatch):
    from inspect_ai import eval as inspect_eval

    monkeypatch.chdir(TASKS_DIR.parent)
    args = {"data": "fixture", "sandbox": "local", "tool_env": tool_env}
    [log] = inspect_eval(
        f"{TASKS_DIR.name}/aime24.py",
        model=f"{provider}/{server.name}",
        model_base_url=server.url,
        task_args=args,
        limit=2,
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success", log.error
    assert len(server.requests) == 2  # every request of the eval, the provider's first (which sets it up) included
    for request in server.requests:
        [tool] = request["tools"]
        assert tool["function"]["strict"] is False, tool


# --- the reference call span's end-of-turn token -----------------------------------------------------------------

FAILED = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(x)"}}\n</tool_call>'
FIXED = 'Again.\n<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "x = 2\\nprint(x)"}}\n</tool_call>'
TURNS = (FAILED, FIXED, "So \\boxed{25}.")
#: SAAR on every trajectory under the reference's tool environment
REFERENCE_SAAR = {"data": "fixture", "sandbox": "local", "tool_env": "reference", "saar": True, "saar_prob": 1.0}


def span_ratio(turn_end: str) -> float:
    """The similarity the reference's SAAR gives FAILED and FIXED for a model whose turns end with ``turn_end``."""
    span = lambda turn: turn[turn.index("<tool_call>") :] + turn_end  # noqa: E731
    return difflib.SequenceMatcher(None, span(FAILED), span(FIXED)).ratio()


def evaluate(model: str, tmp_path, **options: Any) -> Any:
    from inspect_ai import eval as inspect_eval

    [log] = inspect_eval(
        f"{TASKS_DIR.name}/aime24.py",
        model=model,
        task_args=REFERENCE_SAAR,
        limit=1,
        log_dir=str(tmp_path),
        display="none",
        **options,
    )
    return log


def first_event(log: Any) -> dict[str, Any]:
    assert log.status == "success", log.error
    [sample] = log.samples
    return sample.metadata["trajectory"]["saar_events"][0]


def test_a_served_models_call_span_ends_with_the_token_of_the_tokenizer_its_name_gives(tmp_path, monkeypatch):
    from trainers.core._compat import load_tokenizer

    tokenizer = load_tokenizer()  # a model directory whose template ends a turn with another token than Qwen3's
    tokenizer.chat_template = tokenizer.chat_template.replace("<|im_end|>", "<|endoftext|>")
    model_dir = tmp_path / "model"
    tokenizer.save_pretrained(model_dir)
    monkeypatch.chdir(TASKS_DIR.parent)
    with serving(str(model_dir), TURNS) as recording:
        log = evaluate(f"vllm/{model_dir}", tmp_path / "logs", model_base_url=recording.url)
    event = first_event(log)
    assert event["similarity"] == pytest.approx(span_ratio("<|endoftext|>"))
    assert span_ratio("<|endoftext|>") != pytest.approx(span_ratio("<|im_end|>"))
    assert log.eval.metadata["tool_env"]["turn_end"] == "<|endoftext|>"  # the log says which token it was


def test_a_replay_script_may_name_its_models_end_of_turn_token(tmp_path, monkeypatch):
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"samples": [{"match": "divisors", "turns": list(TURNS)}], "turn_end": "<|eot|>"}))
    monkeypatch.chdir(TASKS_DIR.parent)
    event = first_event(evaluate(f"replay/{script}", tmp_path / "logs"))
    assert event["similarity"] == pytest.approx(span_ratio("<|eot|>"))


@pytest.mark.parametrize("model", ["replay/aime24.yaml", "vllm/no-such-model"])
def test_without_the_models_end_of_turn_token_the_eval_fails_before_its_first_sample(model, tmp_path, monkeypatch):
    monkeypatch.chdir(TASKS_DIR.parent)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with serving(model.split("/", 1)[1]) as recording, pytest.raises(Exception) as failed:
        log = evaluate(model, tmp_path / "logs", model_base_url=recording.url)
        raise AssertionError(log.error.message if log.error else log.status)
    message = str(failed.value)
    assert "end-of-turn token" in message and repr(model) in message and "-T tokenizer=" in message, message
    assert recording.requests == []  # before the first sample
