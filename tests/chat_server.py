"""An OpenAI-compatible chat server on loopback, as vLLM and SGLang serve, for the tests that look at what a provider
sends and reads: ``/v1/models`` lists the cards it is given, a chat completion's text is what ``reply`` makes of the
request."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ChatServer:
    """Serves ``cards()`` (each card's own keys over vLLM's ``object``, ``created`` and ``owned_by``) and answers the
    n-th chat completion with ``reply(request)``; ``url`` ends in ``/v1``."""

    def __init__(self, cards: Callable[[], list[dict[str, Any]]], reply: Callable[[dict[str, Any]], str]) -> None:
        self.completions = 0
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
                now = int(time.time())
                listed = [{"object": "model", "created": now, "owned_by": "vllm", **card} for card in cards()]
                self._send({"object": "list", "data": listed})

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.completions += 1
                message = {"role": "assistant", "content": reply(request)}
                self._send(
                    {
                        "id": f"c{server.completions}",
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

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


class NoServer:
    """Stands in for a server no request reaches (``trainers.parity.warm_server`` when the runs are already made)."""

    base_url, start_seconds = "http://127.0.0.1:0/v1", 0.0

    def __enter__(self) -> NoServer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
