"""The Inspect face's conversion of a provider's output into what the rollout core sees."""

from __future__ import annotations

from typing import get_args

import pytest
from inspect_ai.model import ModelOutput, StopReason

from harness.core.toolenv import PROJECT
from harness.evals.convert import CUT_SHORT, to_generation


@pytest.mark.parametrize("reason", ["max_tokens", "model_length", "content_filter"])
def test_every_stop_reason_that_cuts_a_turn_is_truncation(reason: str) -> None:
    """An output cut by the model's context (or a filter) is no answer: the rollout must end with ``length``."""
    output = ModelOutput.from_content(model="m", content="The answer is \\boxed{4", stop_reason=reason)  # type: ignore[arg-type]
    assert to_generation(output, PROJECT).truncated


@pytest.mark.parametrize("reason", ["stop", "tool_calls", "unknown"])
def test_stop_reasons_that_end_a_turn_are_not_truncation(reason: str) -> None:
    output = ModelOutput.from_content(model="m", content="\\boxed{4}", stop_reason=reason)  # type: ignore[arg-type]
    assert not to_generation(output, PROJECT).truncated


def test_every_inspect_stop_reason_is_mapped() -> None:
    assert set(CUT_SHORT) == set(get_args(StopReason))
