"""The warm model on vLLM in float32 through the three rollout paths (``python -m trainers parity --model warm``).

One server (``vllm serve`` on loopback, float32, no prefix caching) is the engine of all three: Inspect's ``vllm/``
provider talks to it through the chat API (the served chat template, the hermes parser), the OpenRLHF executor and
the CPU trainer's vLLM sampler send it token ids. Under the ``reference`` tool environment (its tool, its parsing,
its response budget, the reference's judge), on the first two aime24 fixture problems: the paths take the same
turns, reach the same verdicts and rewards with the same seeds, count the same tokens (every path lets the model end
a call turn with its end-of-turn token) and stop at the same point of the response budget. The served eval sends
its tool unconstrained (no ``"strict": true``), so vLLM samples its calls as freely as the token paths'.

One profile only (the command runs both): a server start (about 30 s on an idle machine) and six short rollouts.
"""

from __future__ import annotations

import pytest
from chat_server import NoServer
from needs import import_or_skip, needs_vllm

import_or_skip("openrlhf.utils.agent")

from trainers import parity  # noqa: E402
from trainers.core._compat import load_tokenizer  # noqa: E402

pytestmark = pytest.mark.slow

TOOL_ENV = "reference"
#: the response budget: the first problem's call turn and its result reach it
BUDGET = 80
SETTINGS = parity.WarmSettings(limit=2, max_tokens=64, max_turns=3, budget=BUDGET)


@pytest.fixture(scope="module")
def runs() -> dict[str, parity.PathRun]:
    needs_vllm()
    with parity.warm_server() as server:
        model = parity.WarmModel(server, SETTINGS)
        paths = parity.run_paths("aime24", model, TOOL_ENV, judge="reference", tokenizer=load_tokenizer())
    return {run.path: run for run in paths}


def test_the_run_exercises_a_call_the_response_budget_and_seeds(runs):
    samples = list(runs["inspect"].samples.values())
    assert any(s.summary["tool_calls"] for s in samples)  # the model called the tool
    assert any(t.endswith("</tool_call>") for s in samples for t in _turns(s))  # so a call turn's count is compared
    assert "token_budget" in {s.summary["stop_reason"] for s in samples}  # and the budget ended a response
    assert all(s.counts and s.counts["response_tokens"] > 0 for s in samples)  # counted in tokens on Inspect too
    assert all(s.seeds and all(isinstance(x, int) for x in s.seeds) for s in samples)


@pytest.mark.parametrize("path", ["executor", "cpu"])
def test_every_path_takes_inspects_turns_verdicts_seeds_and_token_counts(runs, path):
    assert parity.first_difference(runs["inspect"], runs[path]) is None
    assert parity.first_difference(runs["executor"], runs["cpu"]) is None  # rewards and contexts too


def _turns(record: parity.SampleRecord) -> list[str]:
    return [m["text"] for m in record.messages if m["role"] == "assistant"]


def test_the_command_prints_where_each_pair_of_paths_parts(runs, monkeypatch, capsys):
    from dataclasses import replace

    from trainers.__main__ import main

    paths = [runs["inspect"], runs["executor"], runs["cpu"]]
    monkeypatch.setattr(parity, "run_paths", lambda *a, **k: paths)
    monkeypatch.setattr(parity, "warm_server", NoServer)
    argv = ["parity", "--model", "warm", "--tool-env", TOOL_ENV, "--budget", str(BUDGET)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "inspect vs executor: same" in out and "inspect vs cpu: same" in out and "executor vs cpu: same" in out
    cpu = runs["cpu"]
    first = min(cpu.samples)
    counts = {**cpu.samples[first].counts, "turn_tokens": [n - 1 for n in cpu.samples[first].counts["turn_tokens"]]}
    paths[2] = parity.PathRun("cpu", cpu.tool_env, {**cpu.samples, first: replace(cpu.samples[first], counts=counts)})
    assert main(argv) == 1
    assert f"inspect vs cpu: differ at sample {first}, counts.turn_tokens[0]" in capsys.readouterr().out
    # a budget needs a tool environment that counts the response
    assert main(["parity", "--model", "warm", "--tool-env", "project", "--budget", "80"]) == 2
    assert "--budget is a response budget" in capsys.readouterr().err
