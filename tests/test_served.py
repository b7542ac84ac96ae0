"""The GPU command, on CPU: Inspect's own ``sglang/`` provider against ``transformers serve`` on loopback.

The server is real (transformers' OpenAI-compatible engine, a child process bound to
127.0.0.1) and so is the client (Inspect's SGLang provider, pointed at it with
``SGLANG_BASE_URL`` as a GPU user points it at an SGLang server). One sample of the AIME
fixture runs in each SAAR arm, and the served model must have been shown exactly the text
the embedded provider shows it.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.core import chat
from harness.core.messages import Message, ToolCall, system, to_openai, user
from harness.core.protocol import TOOL_SCHEMA, serialize_call
from harness.engines.serve import LOOPBACK, Server, serve_argv, served_chat_template

os.environ["HF_HUB_OFFLINE"] = "1"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def base_tokenizer() -> Any:
    from harness.evals import embedded

    return embedded.shared_model("smollm2").tokenizer


def _trajectories() -> list[list[Message]]:
    code = 'print("héllo <b> & \\\\ \\n", 2**10)'
    call = ToolCall(code=code, raw=serialize_call(code), id="c1")
    return [
        [user("What is 2**10?")],
        [system("Be brief."), user("What?")],
        [system(""), user("What?")],
        [
            user("Q"),
            Message("assistant", "Let me compute.\n", call=call),
            Message("tool", "1024\n", tool_call_id="c1"),
            Message("assistant", "", call=call),
            Message("tool", "Traceback: x", tool_call_id="c1"),
            Message("assistant", "bad <tool_call>{oops", call_error="malformed"),
            Message("tool", "error: malformed"),  # the answer to a malformed call: no call id
            Message("assistant", "The answer is \\boxed{1024}."),
        ],
    ]


@pytest.mark.slow
def test_the_served_template_renders_requests_as_the_embedded_provider_renders_trajectories(
    base_tokenizer: Any,
) -> None:
    served = copy.deepcopy(base_tokenizer)
    served.chat_template = served_chat_template(base_tokenizer)
    for messages in _trajectories():
        request = to_openai(messages)  # what an OpenAI client sends: native calls, tool messages
        wire = served.apply_chat_template(request, tools=[TOOL_SCHEMA], tokenize=False, add_generation_prompt=True)
        assert wire == chat.render(base_tokenizer, messages)
    plain = [{"role": "user", "content": "hi"}]  # no tools: the model's own template, untouched
    assert served.apply_chat_template(plain, tokenize=False) == base_tokenizer.apply_chat_template(
        plain, tokenize=False
    )


def test_the_server_listens_on_loopback_only() -> None:
    argv = serve_argv(Path("/models/m"), 8123)
    assert argv[argv.index("--host") + 1] == LOOPBACK == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--device") + 1] == "cpu"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("serve") / "server.log"
    with Server("smollm2", log_path=log) as running:
        yield running


@pytest.mark.slow
@pytest.mark.parametrize("saar", [True, False], ids=["saar-on", "saar-off"])
def test_inspect_sglang_provider_runs_a_sample_against_transformers_serve(
    server: Server, saar: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_tokenizer: Any
) -> None:
    from inspect_ai import eval
    from inspect_ai.event import ModelEvent
    from inspect_ai.log import resolve_sample_attachments

    monkeypatch.setenv("SGLANG_BASE_URL", server.base_url)
    monkeypatch.chdir(ROOT)  # Inspect takes task files by relative path
    log = eval(
        "tasks/aime24.py",
        model=f"sglang/{server.model}",
        task_args={"data": "fixture", "saar": saar, "max_turns": 2, "max_tokens": 48, "sandbox": "local"},
        limit=1,
        display="none",
        log_dir=str(tmp_path),
    )[0]
    assert log.status == "success", log.error
    assert log.eval.model == f"sglang/{server.model}"
    assert log.samples is not None and len(log.samples) == 1
    sample = resolve_sample_attachments(log.samples[0])  # long texts are stored as attachments
    assert sample.metadata["trajectory"]["saar_on"] is saar
    assert sample.scores and sample.output.completion is not None
    calls = [e for e in sample.events if isinstance(e, ModelEvent)]
    assert calls and all(e.error is None for e in calls)
    first = calls[0]
    assert first.output.usage is not None and 0 < first.output.usage.output_tokens <= 48
    assert any(m.role == "assistant" and m.text.strip() for m in sample.messages)
    # the server saw the embedded provider's exact prompt: same token count as the shared rendering
    prompt = [Message(m.role, m.text) for m in first.input if m.role in ("system", "user")]  # type: ignore[arg-type]
    assert first.output.usage.input_tokens == len(chat.render_ids(base_tokenizer, prompt))
    assert 'POST /v1/chat/completions HTTP/1.1" 200' in server.log_path.read_text()


@pytest.mark.slow
def test_the_server_samples_with_the_requested_temperature_and_seed(server: Server) -> None:
    """A served model samples when asked to (temperature > 0): seeds give different samples, a seed repeats."""
    from openai import OpenAI

    client = OpenAI(base_url=server.base_url, api_key="local", max_retries=0)

    def ask(temperature: float, seed: int) -> str:
        response = client.chat.completions.create(
            model=server.model,
            messages=[{"role": "user", "content": "Tell me a story about a cat."}],
            max_tokens=24,
            temperature=temperature,
            top_p=1.0,
            seed=seed,
        )
        return response.choices[0].message.content or ""

    samples = [ask(1.0, seed) for seed in (1, 2, 3)]
    assert len(set(samples)) == 3, samples
    assert ask(1.0, 2) == samples[1]  # requests one at a time: a seed repeats its sample
    assert ask(0.0, 1) == ask(0.0, 2)  # greedy ignores the seed
