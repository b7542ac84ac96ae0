"""Both SAAR arms generate the requests they have in common once (``-T share_prefix``).

A request counts as common only when everything that decides its text is the same: context, seed,
epoch, run and the model's weights. The provider here counts the calls that reach it and answers from
the seed, as a seeded engine does; the end-to-end checks on real engines are in tests/test_seeds.py (in
process) and tests/test_demo.py (vLLM). Two checkpoints under one name are told apart through the real
providers: replay scripts, an OpenAI-compatible server on loopback (as vLLM reports what it serves) and
the embedded model's adapters.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chat_server import ChatServer
from inspect_ai.model import (
    ChatMessage,
    ChatMessageUser,
    GenerateConfig,
    Model,
    ModelAPI,
    ModelOutput,
    get_model,
    modelapi,
)
from inspect_ai.tool import ToolChoice, ToolInfo

from harness.engines.models import embedded_gguf_path
from harness.evals import weights_identity as wi
from harness.evals.convert import PYTHON_TOOL
from harness.evals.shared_prefix import generate_shared
from harness.evals.weights_identity import WeightsUnknownError, path_fingerprint, weights_identity

CALLS: Counter[str] = Counter()
ADAPTERS = Path(__file__).resolve().parents[1] / "harness" / "data" / "models"


class SeededAPI(ModelAPI):
    """Text from the seed and the last message; every call that reaches the provider counted."""

    async def generate(
        self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice, config: GenerateConfig
    ) -> ModelOutput:
        await asyncio.sleep(0.05)  # in flight long enough for the other arm to ask for the same
        text = f"seed {config.seed} after {input[-1].text!r}"
        CALLS[text] += 1
        return ModelOutput.from_content(model=self.model_name, content=text)


@modelapi(name="seeded-test")
def seeded() -> type[ModelAPI]:
    return SeededAPI


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    CALLS.clear()
    monkeypatch.setenv("INSPECT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    """A checkpoint directory: the seeded provider's model is named by its path, as a local model is."""
    directory = tmp_path / "ckpt"
    directory.mkdir()
    (directory / "model.safetensors").write_bytes(b"weights A")
    return directory


def _ask(model, text: str, seed: int, share: str = "run-1", epoch: int = 1):  # type: ignore[no-untyped-def]
    return generate_shared(
        model,
        [ChatMessageUser(content=text)],
        tools=[PYTHON_TOOL],
        config=GenerateConfig(seed=seed, max_tokens=8),
        share=share,
        epoch=epoch,
    )


async def test_a_request_both_arms_send_at_once_is_generated_once_and_read_by_the_other(weights: Path) -> None:
    model = get_model(f"seeded-test/{weights}", memoize=False)
    off, on = await asyncio.gather(_ask(model, "problem", 7), _ask(model, "problem", 7))
    assert off.completion == on.completion == "seed 7 after 'problem'"
    assert sum(CALLS.values()) == 1


@pytest.mark.parametrize(
    "other",
    [
        {"text": "problem, then an error"},  # the context differs (after a rollback)
        {"seed": 8},  # another turn or SAAR retry
        {"epoch": 2},  # another sample of the problem
        {"share": "run-2"},  # another run
    ],
)
async def test_a_request_that_differs_in_anything_is_generated_by_each(other: dict[str, object], weights: Path) -> None:
    model = get_model(f"seeded-test/{weights}", memoize=False)
    first = {"text": "problem", "seed": 7, "share": "run-1", "epoch": 1}
    await _ask(model, **first)  # type: ignore[arg-type]
    await _ask(model, **{**first, **other})  # type: ignore[arg-type]
    assert sum(CALLS.values()) == 2


async def test_arms_one_after_the_other_share_through_the_cache_directory(cache_dir: Path, weights: Path) -> None:
    await _ask(get_model(f"seeded-test/{weights}", memoize=False), "problem", 7)
    again = await _ask(get_model(f"seeded-test/{weights}", memoize=False), "problem", 7)
    assert again.completion == "seed 7 after 'problem'" and sum(CALLS.values()) == 1
    assert any(cache_dir.rglob("*")), "the shared generation is in the run's cache directory"


async def test_a_model_named_by_its_path_retrained_in_place_generates_its_own(weights: Path) -> None:
    await _ask(get_model(f"seeded-test/{weights}", memoize=False), "problem", 7)
    (weights / "model.safetensors").write_bytes(b"weights B")  # retrained into the same directory
    await _ask(get_model(f"seeded-test/{weights}", memoize=False), "problem", 7)
    assert sum(CALLS.values()) == 2


async def test_a_model_whose_weights_cannot_be_identified_is_refused_with_what_to_do() -> None:
    model = get_model("seeded-test/m", memoize=False)
    with pytest.raises(WeightsUnknownError, match=r"share_prefix cannot be used safely with model 'seeded-test/m'"):
        await _ask(model, "problem", 7)
    with pytest.raises(WeightsUnknownError, match="Run without share_prefix"):
        await _ask(model, "problem", 7)
    assert sum(CALLS.values()) == 0


# --- replay scripts -------------------------------------------------------------------------------------------


async def test_two_replay_scripts_at_one_path_never_read_each_others_generations(tmp_path: Path) -> None:
    script = tmp_path / "task.yaml"
    script.write_text("samples: []\ndefault: ['The answer is 1.']\n")
    first = await _ask(get_model(f"replay/{script}", memoize=False), "problem", 7)
    script.write_text("samples: []\ndefault: ['The answer is 2.']\n")  # another script written over the first
    second = await _ask(get_model(f"replay/{script}", memoize=False), "problem", 7)
    assert (first.completion, second.completion) == ("The answer is 1.", "The answer is 2.")


# --- an OpenAI-compatible server, as vLLM and SGLang serve -----------------------------------------------------


class Server(ChatServer):
    """Lists ``cards`` (as vLLM does: ``id``, ``root``, ``parent``); a completion's text is the content of the served
    checkpoint's weights file and the seed."""

    def __init__(self, cards: list[dict[str, Any]], weights: Path | None = None) -> None:
        self.cards, self.weights = cards, weights

        def reply(request: dict[str, Any]) -> str:
            return f"{self.weights.read_text() if self.weights else 'hi'} seed {request.get('seed')}"

        super().__init__(lambda: self.cards, reply)


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[Server] = []

    def start(cards: list[dict[str, Any]], weights: Path | None = None) -> Server:
        servers.append(Server(cards, weights))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


async def test_a_checkpoint_retrained_in_place_and_served_again_never_reads_the_first(
    serve: Any, weights: Path
) -> None:
    server = serve([{"id": str(weights), "root": str(weights), "parent": None}], weights / "model.safetensors")
    first = await _ask(get_model(f"vllm/{weights}", base_url=server.url, memoize=False), "problem", 7)
    (weights / "model.safetensors").write_bytes(b"weights B")  # retrained into the same directory, served again
    second = await _ask(get_model(f"vllm/{weights}", base_url=server.url, memoize=False), "problem", 7)
    assert (first.completion, second.completion) == ("weights A seed 7", "weights B seed 7")
    assert server.completions == 2
    again = await _ask(get_model(f"vllm/{weights}", base_url=server.url, memoize=False), "problem", 7)
    assert again.completion == "weights B seed 7" and server.completions == 2, "the same weights still share"


async def test_a_served_identity_is_its_root_and_its_parents(serve: Any, tmp_path: Path) -> None:
    base, adapter = tmp_path / "base", tmp_path / "adapter"
    for directory in (base, adapter):
        directory.mkdir()
        (directory / "weights.bin").write_bytes(b"1")
    cards = [
        {"id": "base", "root": str(base), "parent": None},
        {"id": "tuned", "root": str(adapter), "parent": "base"},  # a LoRA adapter, as vLLM lists one
    ]
    server = serve(cards)

    async def identity() -> str:
        return await weights_identity(
            get_model("openai-api/local/tuned", base_url=server.url, api_key="k", memoize=False)
        )

    seen = [await identity()]
    (base / "weights.bin").write_bytes(b"2")
    seen.append(await identity())
    (adapter / "weights.bin").write_bytes(b"2")
    seen.append(await identity())
    cards[1]["root"] = "org/tuned-v2"  # a hub id: not readable here, told apart by name
    seen.append(await identity())
    assert len(set(seen)) == 4
    assert await identity() == seen[-1]


@pytest.mark.parametrize(
    "cards",
    [
        [{"id": "gpt-x"}],  # what an API that names models but not weights lists
        [{"id": "a", "root": "org/a"}, {"id": "b", "root": "org/b"}],  # the model is not served there
    ],
)
async def test_a_server_that_does_not_say_which_weights_it_serves_is_refused(serve: Any, cards: list[Any]) -> None:
    server = serve(cards)
    model = get_model("openai-api/local/gpt-x", base_url=server.url, api_key="k", memoize=False)
    with pytest.raises(WeightsUnknownError, match="openai-api/local/gpt-x"):
        await _ask(model, "problem", 7)
    assert server.completions == 0


# --- the embedded model's adapters ----------------------------------------------------------------------------


def _write_adapter(source: Path, target: Path) -> None:
    target.mkdir(exist_ok=True)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copyfile(source / name, target / name)


def test_an_embedded_adapters_identity_is_its_files_and_its_base(tmp_path: Path) -> None:
    adapter = tmp_path / "adapter"
    _write_adapter(ADAPTERS / "smollm2-tools-sft", adapter)
    sft = wi.embedded_identity_parts(str(adapter), "torch.bfloat16")
    assert wi.embedded_identity_parts(str(adapter), "torch.bfloat16") == sft
    assert wi.embedded_identity_parts(str(adapter), "torch.float32") != sft
    assert path_fingerprint(embedded_gguf_path()) in sft, "and the base it is merged into"
    _write_adapter(ADAPTERS / "smollm2-tools", adapter)
    assert wi.embedded_identity_parts(str(adapter), "torch.bfloat16") != sft


@pytest.mark.slow
async def test_an_adapter_retrained_into_the_same_directory_never_reads_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.evals import embedded

    calls = Counter[str]()
    generate = embedded.EmbeddedAPI.generate

    async def counted(self: embedded.EmbeddedAPI, *args: Any, **kwargs: Any) -> Any:
        calls[self.model_name] += 1
        return await generate(self, *args, **kwargs)

    monkeypatch.setattr(embedded.EmbeddedAPI, "generate", counted)
    adapter = tmp_path / "adapter"

    def evaluation() -> Model:
        """The model as a new ``inspect eval`` process loads it."""
        monkeypatch.setattr(embedded, "_models", {})
        return get_model(f"embedded/{adapter}", memoize=False)

    _write_adapter(ADAPTERS / "smollm2-tools-sft", adapter)
    await _ask(evaluation(), "What is 2+2?", 7)
    await _ask(evaluation(), "What is 2+2?", 7)
    assert calls[str(adapter)] == 1, "the same adapter shares its generation"
    _write_adapter(ADAPTERS / "smollm2-tools", adapter)  # retrained into the same directory
    await _ask(evaluation(), "What is 2+2?", 7)
    assert calls[str(adapter)] == 2


# --- the fingerprint of a checkpoint ----------------------------------------------------------------------------


def test_a_directorys_fingerprint_changes_with_any_files_content_and_only_then(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    (ckpt / "sub" / "weights.bin").write_bytes(b"aaaa")
    first = path_fingerprint(ckpt)
    assert path_fingerprint(ckpt) == first
    (ckpt / ".lock").write_text("")  # hidden files (locks, download metadata) are no weights
    assert path_fingerprint(ckpt) == first
    shutil.copytree(ckpt, tmp_path / "copy")
    assert path_fingerprint(tmp_path / "copy") == first, "a copy is the same checkpoint"
    (ckpt / "sub" / "weights.bin").write_bytes(b"aaab")  # same size, other content
    second = path_fingerprint(ckpt)
    assert second != first
    (ckpt / "sub" / "weights.bin").rename(ckpt / "weights.bin")
    assert path_fingerprint(ckpt) not in (first, second)
    with pytest.raises(FileNotFoundError):
        path_fingerprint(tmp_path / "missing")


def test_a_large_file_is_fingerprinted_by_its_ends_size_and_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wi, "LARGE_FILE_BYTES", 64)
    monkeypatch.setattr(wi, "EDGE_BYTES", 8)
    shard = tmp_path / "model-00001.safetensors"
    shard.write_bytes(b"h" * 100)
    os.utime(shard, ns=(1, 1))
    first = path_fingerprint(tmp_path)
    assert path_fingerprint(tmp_path) == first
    shard.write_bytes(b"h" * 50 + b"x" + b"h" * 49)  # rewritten: the middle differs, and so does the time
    os.utime(shard, ns=(2, 2))
    assert path_fingerprint(tmp_path) != first
    shard.write_bytes(b"h" * 99 + b"x")
    os.utime(shard, ns=(1, 1))
    assert path_fingerprint(tmp_path) != first
