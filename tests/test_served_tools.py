"""A served eval sends the tool unconstrained: Inspect's ``vllm/`` and ``sglang/`` providers, as this project's
eval drives them, ask for no ``"strict": true`` (with it, vLLM constrains a call to the tool's schema, so a served
model could not write the malformed calls the trainers' engines and the reference's let it write).

The server is an OpenAI-compatible stand-in on loopback that records each request's JSON body, as vLLM's or SGLang's
server receives it; the providers, the task and the eval are real.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from harness.benchmarks.registry import TASKS_DIR


class RecordingServer:
    """Answers every chat completion with a final answer and keeps the request bodies; lists one model."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                card = {"id": server.name, "object": "model", "created": int(time.time()), "owned_by": "vllm"}
                self._send({"object": "list", "data": [card]})

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(request)
                message = {"role": "assistant", "content": "The answer is \\boxed{25}."}
                self._send(
                    {
                        "id": f"c{len(server.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": request["model"],
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                )

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}/v1"
        threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True).start()


@pytest.fixture
def server(request) -> Iterator[RecordingServer]:
    # a name of its own: Inspect's vllm/ provider keeps one server (its address) per model name for the process
    recording = RecordingServer(f"served-{request.node.callspec.id}")
    yield recording
    recording.http.shutdown()
    recording.http.server_close()


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
