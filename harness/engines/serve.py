"""The GPU command, on CPU: the embedded model behind a real OpenAI-compatible server on loopback.

``python -m harness serve [smollm2|smollm2-tools|<dir>|<file.gguf>]`` writes the model as a
plain Hugging Face directory (once, into the model cache) and runs ``transformers serve``
on it, bound to 127.0.0.1. Inspect's own ``sglang/`` (or ``vllm/``) provider then talks to
it exactly as it talks to an SGLang server on a GPU machine::

    SGLANG_BASE_URL=http://127.0.0.1:PORT/v1 inspect eval tasks/aime24.py \\
        --model sglang/<served directory> -T data=fixture

(The model name must be the directory the server was started with: ``transformers serve``
pinned to one model refuses any other name. With Inspect 0.3.285 ``-M base_url=`` fails with
"got multiple values for keyword argument 'base_url'"; the environment variable works.)

:class:`Server` starts and stops such a server from Python (tests, benchmarks). Nothing
here listens anywhere but loopback, and nothing is downloaded: the model directory is
local and the server runs with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from harness.core.chat import supports_tools, tool_system_prompt
from harness.core.messages import tool_response_text
from harness.core.protocol import CALL_CLOSE, CALL_OPEN
from harness.engines.models import cache_dir, file_digest, load_model, resolve_spec, save_to_cache

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedTokenizerBase

LOOPBACK = "127.0.0.1"
#: bump when the served directory's contents change (chat template, generation config)
SERVED_FORMAT = "2"
#: seconds a server may take to load its model and answer /health (2 busy cores: allow a lot)
START_TIMEOUT_S = 300.0


class ServeError(RuntimeError):
    """The server could not be started or did not come up (with its log's tail)."""


def model_spec(name: str | None) -> str | None:
    """A model spec from what a user writes: ``embedded/smollm2-tools`` and ``smollm2-tools`` are the same."""
    if name is None:
        return None
    return name.removeprefix("embedded/")


def served_dir(name: str | None = None, *, dtype: str = "bfloat16") -> Path:
    """The Hugging Face directory to serve for a model spec (see :mod:`harness.engines.models`).

    A Hugging Face directory is served as it is. The embedded GGUF and the warm model
    (base plus LoRA adapter) are written once as a plain directory under
    ``<model cache>/served/``, keyed by their source files, the dtype and transformers' version,
    with :func:`served_chat_template` as their chat template and sampling on by default (a request's
    temperature 0 turns it off).
    """
    spec = model_spec(name)
    kind, path = resolve_spec(spec)
    if kind == "hf":
        return path
    target = cache_dir() / "served" / _served_key(spec, kind, path, dtype)
    if (target / "config.json").is_file():
        return target
    import torch

    model, tokenizer = load_model(spec, dtype=getattr(torch, dtype))
    tokenizer.chat_template = served_chat_template(tokenizer)
    _sample_as_requested(model.generation_config)
    save_to_cache(model, tokenizer, target)
    return target


def _sample_as_requested(config: GenerationConfig) -> None:
    """Sampling defaults under which a request's ``temperature`` and ``top_p`` mean what they mean to the
    embedded provider.

    ``transformers serve`` starts from the model's generation config and only turns sampling OFF (for
    temperature 0): a config without ``do_sample`` (the GGUF's) would decode every request greedily,
    whatever its temperature. transformers also samples with ``top_k=50`` by default, which the embedded
    provider does not.
    """
    config.do_sample = True
    config.top_k = 0


def served_chat_template(tokenizer: PreTrainedTokenizerBase) -> str:
    """A chat template that renders an OpenAI request the way :func:`harness.core.chat.render` renders a trajectory.

    For a model whose own template knows no tools (SmolLM2's), an OpenAI-compatible server would
    drop the tool description and render tool calls and results its own way, so a served model
    would see other text than the embedded provider shows it (and than it was trained on). This
    template wraps the model's own: when the request has tools, the tool description joins the
    system message (or becomes it); an assistant turn's call is written after its content in the
    Hermes form (``harness.core.protocol.serialize_call``); a tool result becomes a user turn in
    ``<tool_response>`` tags. A template that already renders tools is kept as it is.
    """
    from harness.core.chat import chat_template_source

    original = chat_template_source(tokenizer)
    if supports_tools(tokenizer):
        return original
    prompt = tool_system_prompt()
    before, after = tool_response_text("\x00").split("\x00")
    return (
        "{%- set tool_prompt -%}{% raw %}" + prompt + "{% endraw %}{%- endset -%}\n"
        "{%- set ns = namespace(out=[]) -%}\n"
        "{%- if tools -%}\n"
        "  {%- if messages and messages[0]['role'] == 'system' -%}\n"
        "    {%- set content = messages[0]['content'] or '' -%}\n"
        "    {%- if tool_prompt in content -%}{%- set merged = content -%}\n"
        "    {%- elif content | trim -%}{%- set merged = content | trim('right') + '\\n\\n' + tool_prompt -%}\n"
        "    {%- else -%}{%- set merged = tool_prompt -%}{%- endif -%}\n"
        "    {%- set ns.out = [{'role': 'system', 'content': merged}] -%}\n"
        "    {%- set rest = messages[1:] -%}\n"
        "  {%- else -%}{%- set ns.out = [{'role': 'system', 'content': tool_prompt}] -%}"
        "{%- set rest = messages -%}{%- endif -%}\n"
        "{%- else -%}{%- set rest = messages -%}{%- endif -%}\n"
        "{%- for m in rest -%}\n"
        "  {%- if m['role'] == 'assistant' and m.get('tool_calls') -%}\n"
        "    {%- set text = namespace(value=m['content'] or '') -%}\n"
        "    {%- for call in m['tool_calls'] -%}{%- set f = call.get('function', call) -%}\n"
        "      {%- set text.value = text.value + ('\\n' if text.value else '') + '" + CALL_OPEN + "\\n' + "
        "'{\"name\": ' + (f['name'] | tojson) + ', \"arguments\": ' + (f['arguments'] | tojson) + '}' + "
        "'\\n" + CALL_CLOSE + "' -%}\n"
        "    {%- endfor -%}\n"
        "    {%- set ns.out = ns.out + [{'role': 'assistant', 'content': text.value}] -%}\n"
        "  {%- elif m['role'] == 'tool' -%}\n"
        "    {%- set ns.out = ns.out + [{'role': 'user', 'content': "
        + repr(before)
        + " + (m['content'] or '') + "
        + repr(after)
        + "}] -%}\n"
        "  {%- else -%}{%- set ns.out = ns.out + [{'role': m['role'], 'content': m['content'] or ''}] -%}\n"
        "  {%- endif -%}\n"
        "{%- endfor -%}\n"
        "{%- set messages = ns.out -%}\n" + original
    )


def _served_key(spec: str | None, kind: str, path: Path, dtype: str) -> str:
    """A directory name that changes when the content of the model's source files, the dtype or transformers'
    version change (the same files in another clone share it)."""
    import transformers

    files = sorted(p for p in ([path] if path.is_file() else path.iterdir()) if p.is_file())
    ident = [SERVED_FORMAT, kind, dtype, transformers.__version__]
    ident += [f"{p.name}:{file_digest(p)}" for p in files]
    if kind == "adapter":  # the warm model sits on the embedded GGUF: a new base is a new model
        ident.append(file_digest(resolve_spec(None)[1]))
    digest = hashlib.sha256("|".join(ident).encode()).hexdigest()[:16]
    return f"{Path(spec or 'smollm2').name.removesuffix('.gguf')}-{dtype}-{digest}"


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def serve_argv(
    model_dir: Path, port: int, *, continuous_batching: bool = False, dtype: str = "bfloat16", seed: int | None = None
) -> list[str]:
    """The ``transformers serve`` command line for ``model_dir`` on loopback ``port``."""
    argv = [
        sys.executable,
        "-m",
        "transformers.cli.transformers",
        "serve",
        str(model_dir),
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--device",
        "cpu",
        "--dtype",
        dtype,
    ]
    if continuous_batching:
        argv.append("--continuous-batching")
    if seed is not None:
        argv += ["--default-seed", str(seed)]
    return argv


def server_env(threads: int = 1) -> dict[str, str]:
    """The server's environment: offline, and torch limited to ``threads`` intra-op threads."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        TOKENIZERS_PARALLELISM="false",
    )
    return env


class Server:
    """A ``transformers serve`` child process on loopback, started on entry and stopped on exit.

    ``base_url`` is the OpenAI base URL (``http://127.0.0.1:PORT/v1``); ``model`` is the name
    requests must use (the served directory). The server's output goes to ``log_path``.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        port: int | None = None,
        threads: int = 1,
        dtype: str = "bfloat16",
        continuous_batching: bool = False,
        log_path: Path | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.model_dir = served_dir(name, dtype=dtype)
        self.port = port or free_port()
        self.argv = serve_argv(self.model_dir, self.port, continuous_batching=continuous_batching, dtype=dtype)
        self.env = server_env(threads)
        self.log_path = log_path or Path(tempfile.mkstemp(prefix="transformers-serve-", suffix=".log")[1])
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def model(self) -> str:
        return str(self.model_dir)

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"

    def start(self) -> Server:
        """Start the server and wait until it answers ``/health`` (raises :class:`ServeError` if it does not)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServeError(f"transformers serve exited with {self.process.returncode}:\n{self.log_tail()}")
            if self.healthy():
                return self
            time.sleep(0.5)
        self.stop()
        raise ServeError(f"transformers serve did not answer within {self.start_timeout_s:.0f} s:\n{self.log_tail()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.port}/health", timeout=2) as response:
                return response.status == 200 and json.loads(response.read() or b"{}").get("status") != "unhealthy"
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self) -> None:
        """Stop the server (terminate, then kill after 10 s)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m harness serve`` (shared with ``python -m harness.engines.serve``)."""
    parser.add_argument("model", nargs="?", default="smollm2", help="smollm2 (default), smollm2-tools, a dir or .gguf")
    parser.add_argument("--port", type=int, default=8000, help="loopback port (0: any free port)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the server process")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument(
        "--continuous-batching", action="store_true", help="transformers' paged-attention batching (see docs/models.md)"
    )


def run(args: argparse.Namespace) -> int:
    """Serve in the foreground until interrupted, after printing how to point Inspect at the server."""
    model_dir = served_dir(args.model, dtype=args.dtype)
    port = args.port or free_port()
    argv = serve_argv(model_dir, port, continuous_batching=args.continuous_batching, dtype=args.dtype)
    base = f"http://{LOOPBACK}:{port}/v1"
    print(
        f"serving {model_dir}\n  on {base}  (loopback only)\n\nevaluate it with Inspect's own provider:\n"
        f"  SGLANG_BASE_URL={base} inspect eval tasks/aime24.py --model sglang/{model_dir} -T data=fixture\n",
        flush=True,
    )
    try:
        return subprocess.call(argv, env=server_env(args.threads))
    except KeyboardInterrupt:
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.engines.serve", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
