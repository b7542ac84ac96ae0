"""The one problem type: what a benchmark's loader, the problem generators and the training data all make.

A :class:`Problem` is ready to prompt and to score: ``prompt`` is the complete user message, ``target`` what the
scorer compares with (the answer for math, the letter for GPQA, empty for code), and a code problem is graded on
tests. A problem of the training data or the generators carries those tests in ``tests`` (and ``fn_name``); a
benchmark's code problem keeps them, still encoded, in ``metadata`` and they are decoded only when graded
(:func:`harness.benchmarks.lcb_cases.problem_tests`), since a release's private tests are large. ``metadata`` is
what a loader or generator knows besides (a benchmark's becomes the Inspect sample's metadata); ``source`` says
where the problem came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.core.kinds import Kind, check_kind
from harness.core.messages import Message


@dataclass(frozen=True)
class Problem:
    """One problem, ready to prompt and to score."""

    id: str
    prompt: str  #: the user message, answer-format instructions included
    target: str = ""  #: the answer (math), the letter after shuffling (gpqa); empty for code
    kind: Kind = "math"
    tests: list[dict[str, Any]] = field(default_factory=list)  #: code: {"input", "output", "testtype"}
    fn_name: str | None = None  #: code: the method functional tests call
    source: str = ""  #: where it came from (a data source, a generator: ``gen-<generator>``)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_kind(self.kind, f"problem {self.id!r}")

    def messages(self) -> list[Message]:
        """The prompt of a rollout (system prompt and tool schema are added by the chat rendering)."""
        return [Message("user", self.prompt)]
