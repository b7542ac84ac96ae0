"""A stand-in engine at GPU speed: an OpenAI-compatible server that answers at once from a scripted policy.

This is **not a model**. It stands in for vLLM or SGLang on a GPU, where the engine answers faster than
the CPU engines here, so that what is measured against it is the harness (Inspect, the solver, the SAAR
loop, the sandbox) and not the engine. It is the project's own server, bound to ``127.0.0.1`` only (there
is no option for any other address)::

    python -m bench.standin --port 8123        # serves "cleaner-standin"
    VLLM_BASE_URL=http://127.0.0.1:8123/v1 inspect eval tasks/aime24.py \\
        --model vllm/cleaner-standin -T data=fixture -T sandbox=local
    inspect eval tasks/aime24.py --model sglang/cleaner-standin \\
        --model-base-url http://127.0.0.1:8123/v1 -T data=fixture -T sandbox=local

Inspect's ``vllm/`` and ``sglang/`` providers use an existing server when given its URL (``model_base_url``,
``-M base_url=``, or ``VLLM_BASE_URL`` / ``SGLANG_BASE_URL``) and start none; the key they send
(``VLLM_API_KEY``, default ``inspectai``; ``SGLANG_API_KEY``, default ``dummy``) is accepted unless the
stand-in was started with ``--api-key``, as ``vllm serve --api-key`` checks it.

Endpoints, as vLLM's server has them:

* ``POST /v1/chat/completions``: one answer from the :class:`Policy`, in the form a hermes/qwen25 tool parser
  returns (``message.tool_calls`` with ``function.name`` = the tool the request declares, ``python`` or
  ``code_interpreter``, and ``arguments`` = ``{"code": ...}`` as a JSON string), ``finish_reason``
  ``tool_calls`` / ``stop`` / ``length``, and ``usage`` (prompt tokens ~ characters / 4);
* ``GET /v1/models``: the served name (``id``), its ``root``, ``max_model_len``, ``owned_by`` = ``standin``;
* ``GET /health`` (200) and ``GET /stats`` (the stand-in's own counters: requests, answers, refusals).

It refuses what a real server refuses, with the same status codes and vLLM's error body
(``{"error": {"message", "type", "param", "code"}}``): an unknown model (404, ``NotFoundError``), a malformed
request (400, ``BadRequestError``: no JSON object, no messages, a message without a role, ``n`` > 1,
``stream``), a prompt plus ``max_tokens`` beyond ``max_model_len`` (400, vLLM's "maximum context length"
message, which Inspect turns into a ``model_length`` stop) and a wrong key when one is set (401).

The answers are :mod:`bench.scripted_policy`'s: deterministic from the request (its ``seed`` and the
conversation's length).

:class:`StandinProcess` runs the server in a child process (its CPU is then not the caller's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from bench.scripted_policy import Policy, decide, text_of

logger = logging.getLogger(__name__)

#: The only address the stand-in listens on.
HOST = "127.0.0.1"
#: The served model name (a stand-in's, so no log can take it for a model).
DEFAULT_NAME = "cleaner-standin"
#: What ``/v1/models`` gives as the served model's ``root`` (vLLM gives the model's path or hub id).
ROOT = "cleaner-harness/standin-scripted-policy"
#: The line the server prints on stdout once it listens, followed by its base URL.
READY = "STANDIN_READY"
#: Characters per token in the usage counts.
CHARS_PER_TOKEN = 4
#: The checkout that holds ``bench/``: the child server starts there, so ``-m bench.standin`` imports from any
#: caller's working directory (the tools are not installed).
CHECKOUT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class StandinConfig:
    """What the server serves and how it answers."""

    name: str = DEFAULT_NAME
    root: str = ROOT
    policy: Policy = field(default_factory=Policy)
    max_model_len: int = 32768
    api_key: str | None = None  #: None: any key (or none) is accepted


class RequestError(Exception):
    """A refused request: its HTTP status and vLLM's error fields."""

    def __init__(self, status: int, message: str, type: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type, param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}}


def bad_request(message: str, param: str | None = None) -> RequestError:
    return RequestError(400, message, "BadRequestError", param)


# -- requests and answers ---------------------------------------------------------------------------------------


def _tokens(chars: int) -> int:
    return max(1, chars // CHARS_PER_TOKEN)


def prompt_tokens(messages: list[dict[str, Any]], tools: Any) -> int:
    """Prompt tokens of a request, counted as characters / 4 (contents, calls and the tools' schemas)."""
    chars = 0
    for m in messages:
        chars += len(text_of(m.get("content"))) + 8
        for call in m.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            chars += len(str(function.get("arguments", ""))) + len(str(function.get("name", "")))
    if tools:
        chars += len(json.dumps(tools))
    return _tokens(chars)


def check(config: StandinConfig, body: Any) -> None:
    """Refuse what vLLM's server refuses (raises :class:`RequestError`)."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != config.name:
        raise RequestError(
            404,
            f"The model `{model}` does not exist. Valid aliases: {config.name}.",
            "NotFoundError",
            "model",
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages: a non-empty list of messages is required", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise bad_request(f"messages[{i}]: a message needs a role (system, user, assistant or tool)", "messages")
    if body.get("n") not in (None, 1):
        raise bad_request("n: the stand-in returns one choice per request", "n")
    if body.get("stream"):
        raise bad_request("stream: the stand-in does not stream", "stream")
    for name in ("seed", "max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise bad_request(f"{name}: an integer is required", name)
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise bad_request("tools: a list of tools is required", "tools")


def completion(config: StandinConfig, body: dict[str, Any], request_id: int) -> dict[str, Any]:
    """The chat completion for a checked request (raises :class:`RequestError` for a prompt beyond the context)."""
    messages, tools = body["messages"], body.get("tools")
    prompt = prompt_tokens(messages, tools)
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if prompt + (max_tokens or 0) > config.max_model_len:
        raise bad_request(
            f"This model's maximum context length is {config.max_model_len} tokens. However, you requested "
            f"{prompt + (max_tokens or 0)} tokens ({prompt} in the messages, {max_tokens or 0} in the completion). "
            "Please reduce the length of the messages or completion.",
            "input_tokens",
        )
    turn = decide(config.policy, messages, tools, body.get("seed"))
    arguments = json.dumps({"code": turn.call[1]}) if turn.call else ""
    completion_tokens = _tokens(len(turn.text) + len(arguments))
    text, calls, finish = turn.text, [], "stop"
    if max_tokens is not None and completion_tokens > max_tokens:  # cut as an engine cuts: no call survives
        text, completion_tokens, finish = text[: max_tokens * CHARS_PER_TOKEN], max_tokens, "length"
    elif turn.call is not None:
        call_id = f"chatcmpl-tool-{request_id:08x}{(body.get('seed') or 0) & 0xFFFFFFFF:08x}"
        calls = [{"id": call_id, "type": "function", "function": {"name": turn.call[0], "arguments": arguments}}]
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-standin-{request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": config.name,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": calls, "reasoning_content": None},
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
            "prompt_tokens_details": None,
        },
    }


def models_list(config: StandinConfig) -> dict[str, Any]:
    """``GET /v1/models``, as vLLM lists its served model."""
    card = {
        "id": config.name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "standin",
        "root": config.root,
        "parent": None,
        "max_model_len": config.max_model_len,
        "permission": [],
    }
    return {"object": "list", "data": [card]}


# -- the server -------------------------------------------------------------------------------------------------


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(data).encode(), status=status, content_type="application/json")


def make_app(config: StandinConfig) -> web.Application:
    """The stand-in's aiohttp application (no access log: it would cost more than an answer)."""
    stats = {"requests": 0, "answers": 0, "tool_calls": 0, "refused": 0}

    def authorized(request: web.Request) -> bool:
        return config.api_key is None or request.headers.get("Authorization") == f"Bearer {config.api_key}"

    async def chat(request: web.Request) -> web.Response:
        stats["requests"] += 1
        if not authorized(request):
            stats["refused"] += 1
            return _json({"error": "Unauthorized"}, 401)
        try:
            try:
                body = json.loads(await request.read())
            except ValueError as exc:
                raise bad_request(f"the request body is not JSON: {exc}") from None
            check(config, body)
            answer = completion(config, body, stats["requests"])
        except RequestError as exc:
            stats["refused"] += 1
            return _json(exc.body(), exc.status)
        stats["answers"] += 1
        stats["tool_calls"] += len(answer["choices"][0]["message"]["tool_calls"])
        return _json(answer)

    async def models(request: web.Request) -> web.Response:
        if not authorized(request):
            return _json({"error": "Unauthorized"}, 401)
        return _json(models_list(config))

    async def health(request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def get_stats(request: web.Request) -> web.Response:
        return _json({"server": "stand-in", "name": config.name, **stats})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/stats", get_stats)
    return app


async def serve(config: StandinConfig, port: int = 0, ready: asyncio.Event | None = None) -> None:
    """Serve ``config`` on ``127.0.0.1:port`` (0: a free port) until cancelled; print the ready line."""
    runner = web.AppRunner(make_app(config), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port, backlog=1024, reuse_address=True)
    await site.start()
    bound = list(runner.addresses)
    if not bound or any(addr[0] != HOST for addr in bound):  # pragma: no cover - aiohttp binds what it is given
        raise RuntimeError(f"stand-in engine bound to {bound}, not {HOST} only")
    url = f"http://{HOST}:{bound[0][1]}/v1"
    logger.warning("stand-in engine (scripted policy, not a model) serving %r at %s", config.name, url)
    print(f"{READY} {url}", flush=True)
    if ready is not None:
        ready.set()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def _run(config: StandinConfig, port: int) -> None:
    loop = asyncio.new_event_loop()
    task = loop.create_task(serve(config, port))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        pass
    finally:
        loop.close()


# -- a server in a child process --------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds process ``pid`` has used so far (its own, not its children's)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class StandinError(RuntimeError):
    """The stand-in server could not be started (with its log's tail)."""


class StandinProcess:
    """The stand-in server in a child process, started on entry and stopped on exit.

    Attributes (once started): ``base_url`` (``http://127.0.0.1:PORT/v1``), ``name``, ``pid`` and ``log_path``
    (the server's stderr).
    """

    def __init__(
        self,
        config: StandinConfig = StandinConfig(),
        *,
        log_path: str | Path | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        self.config = config
        self.name = config.name
        self.start_timeout = start_timeout
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkdtemp(prefix="standin-")) / "standin.log"
        self.base_url = ""
        self.process: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None, "the stand-in is not running"
        return self.process.pid

    def argv(self) -> list[str]:
        p, c = self.config.policy, self.config
        argv = [sys.executable, "-m", "bench.standin", "--port", "0", "--served-model-name", c.name]
        argv += ["--root", c.root, "--max-model-len", str(c.max_model_len), "--calls", str(p.calls)]
        argv += ["--fail-rate", str(p.fail_rate), "--refail-rate", str(p.refail_rate)]
        argv += ["--rewrite-rate", str(p.rewrite_rate), "--reasoning-chars", str(p.reasoning_chars)]
        argv += ["--max-turns", str(p.max_turns)]
        return argv + (["--api-key", c.api_key] if c.api_key else [])

    def start(self) -> StandinProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "w") as log:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                self.argv(), stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True, cwd=CHECKOUT
            )
        assert self.process.stdout is not None
        deadline = time.monotonic() + self.start_timeout
        line = ""
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([self.process.stdout], [], [], left)[0]:
                break
            line = self.process.stdout.readline()
            if line.startswith(READY) or not line:
                break
        if not line.startswith(READY):
            self.stop()
            tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
            raise StandinError(f"the stand-in server did not start (log {self.log_path}):\n{tail}")
        self.base_url = line.split()[1]
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def cpu_seconds(self) -> float:
        """User plus system CPU seconds the server process has used so far."""
        return cpu_seconds(self.pid)

    def __enter__(self) -> StandinProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    defaults = Policy()
    parser = argparse.ArgumentParser(
        prog="python -m bench.standin", description="A stand-in engine (scripted policy, not a model)."
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one, printed)")
    parser.add_argument("--served-model-name", default=DEFAULT_NAME)
    parser.add_argument("--root", default=ROOT, help="the model card's root")
    parser.add_argument("--max-model-len", type=int, default=StandinConfig.max_model_len)
    parser.add_argument("--api-key", default=None, help="refuse (401) requests without this bearer key")
    for name, value in asdict(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s stand-in %(levelname)s %(message)s")
    policy = Policy(**{name: getattr(args, name) for name in asdict(defaults)})
    config = StandinConfig(args.served_model_name, args.root, policy, args.max_model_len, args.api_key)
    _run(config, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
