"""Deterministic replay model: scripted completions instead of a neural network.

A script is a YAML (or JSON) file::

    samples:
      - match: "sum of the first 100"      # substring of the first user message
        turns:
          - "Let me compute.\\n<tool_call>{...}</tool_call>"
          - {text: "...", truncated: true}   # a generation that hit its length limit
    default: ["\\\\boxed{0}"]                  # for prompts no entry matches
    turn_end: "<|im_end|>"                    # optional: the token that ends the scripted model's turns

A script has no tokenizer; ``turn_end`` names the end-of-turn token of the model it stands for, which the
``reference`` tool environment's SAAR compares a call's span to (:mod:`harness.evals.tokenizers`).

Each generate call of a sample takes the next turn of its entry, whatever the
context (a SAAR regeneration is simply the next completion). Past the end of the
list the last turn repeats. This exercises every SAAR branch with no network and no
model, identically in evaluation (the ``replay/<script>`` Inspect provider) and in
training tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.core.messages import Generation


class ReplayScriptError(ValueError):
    """A replay script is malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class Turn:
    text: str
    truncated: bool = False

    def generation(self) -> Generation:
        return Generation(text=self.text, truncated=self.truncated, output_tokens=max(1, len(self.text.split())))


@dataclass(frozen=True)
class Entry:
    match: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class ReplayScript:
    entries: tuple[Entry, ...]
    default: tuple[Turn, ...] = ()
    source: str = "<memory>"
    turn_end: str | None = None  #: the scripted model's end-of-turn token, when the script names it

    @classmethod
    def load(cls, path: str | Path) -> ReplayScript:
        path = Path(path)
        if not path.is_file():
            raise ReplayScriptError(f"replay script {path} does not exist")
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "<memory>") -> ReplayScript:
        if not isinstance(data, dict) or not isinstance(data.get("samples", []), list):
            raise ReplayScriptError(f"{source}: a replay script is a mapping with a list 'samples'")
        entries = []
        for i, item in enumerate(data.get("samples", [])):
            where = f"{source}: samples[{i}]"
            if not isinstance(item, dict) or not isinstance(item.get("match"), str) or not item["match"]:
                raise ReplayScriptError(f"{where} needs a non-empty string 'match'")
            entries.append(Entry(item["match"], _turns(item.get("turns"), where)))
        default = _turns(data["default"], f"{source}: default") if "default" in data else ()
        if not entries and not default:
            raise ReplayScriptError(f"{source}: the script has no samples and no default")
        turn_end = data.get("turn_end")
        if turn_end is not None and (not isinstance(turn_end, str) or not turn_end.strip()):
            raise ReplayScriptError(f"{source}: 'turn_end' must be the text of a token, got {turn_end!r}")
        return cls(tuple(entries), default, source, turn_end)

    def turns_for(self, prompt: str) -> tuple[Turn, ...]:
        for entry in self.entries:
            if entry.match in prompt:
                return entry.turns
        if self.default:
            return self.default
        raise ReplayScriptError(f"{self.source}: no entry matches the prompt {prompt[:80]!r} and there is no default")

    def generation(self, prompt: str, index: int) -> Generation:
        """The ``index``-th completion (0-based) for the sample whose first user message is ``prompt``."""
        turns = self.turns_for(prompt)
        return turns[min(index, len(turns) - 1)].generation()


def _turns(raw: Any, where: str) -> tuple[Turn, ...]:
    if not isinstance(raw, list) or not raw:
        raise ReplayScriptError(f"{where}: 'turns' must be a non-empty list")
    turns = []
    for j, t in enumerate(raw):
        if isinstance(t, str):
            turns.append(Turn(t))
        elif isinstance(t, dict) and isinstance(t.get("text"), str):
            turns.append(Turn(t["text"], bool(t.get("truncated", False))))
        else:
            raise ReplayScriptError(f"{where}[{j}]: a turn is a string or a mapping with 'text' (and 'truncated')")
    return tuple(turns)
