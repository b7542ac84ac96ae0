"""Both SAAR arms generate the requests they have in common once (``-T share_prefix``).

A request counts as common only when everything that decides its text is the same: context, seed,
epoch and run. The provider here counts the calls that reach it and answers from the seed, as a
seeded engine does; the end-to-end checks on real engines are in tests/test_seeds.py (in process)
and tests/test_demo.py (vLLM).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from inspect_ai.model import (
    ChatMessage,
    ChatMessageUser,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    get_model,
    modelapi,
)
from inspect_ai.tool import ToolChoice, ToolInfo

from harness.evals.convert import PYTHON_TOOL
from harness.evals.shared_prefix import generate_shared

CALLS: Counter[str] = Counter()


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


def _ask(model, text: str, seed: int, share: str = "run-1", epoch: int = 1):  # type: ignore[no-untyped-def]
    return generate_shared(
        model,
        [ChatMessageUser(content=text)],
        tools=[PYTHON_TOOL],
        config=GenerateConfig(seed=seed),
        share=share,
        epoch=epoch,
    )


async def test_a_request_both_arms_send_at_once_is_generated_once_and_read_by_the_other() -> None:
    model = get_model("seeded-test/m", memoize=False)
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
async def test_a_request_that_differs_in_anything_is_generated_by_each(other: dict[str, object]) -> None:
    model = get_model("seeded-test/m", memoize=False)
    first = {"text": "problem", "seed": 7, "share": "run-1", "epoch": 1}
    await _ask(model, **first)  # type: ignore[arg-type]
    await _ask(model, **{**first, **other})  # type: ignore[arg-type]
    assert sum(CALLS.values()) == 2


async def test_arms_one_after_the_other_share_through_the_cache_directory(cache_dir: Path) -> None:
    await _ask(get_model("seeded-test/m", memoize=False), "problem", 7)
    again = await _ask(get_model("seeded-test/m", memoize=False), "problem", 7)
    assert again.completion == "seed 7 after 'problem'" and sum(CALLS.values()) == 1
    assert any(cache_dir.rglob("*")), "the shared generation is in the run's cache directory"
