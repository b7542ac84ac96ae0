"""Every program run and every SAAR rollback of a sample is in its Inspect transcript, as Inspect's own events.

The replay model's evals of the four fixtures (SAAR on: shallow, deep, exhausted, no_call and length
rollbacks) are read back from their logs: each run is a ``tool`` span holding a ``SandboxEvent`` (the program,
exit status, output, start and end) and the runs come in the order the model wrote the calls; each rollback
is a ``saar`` span, after the failed call's run, holding one ``regeneration`` span per retry with that
regeneration's model event and the run of the call installed from it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import EvalLog, EvalSample, resolve_sample_attachments

from harness.benchmarks.registry import NAMES
from harness.core.problems import rollout_config
from harness.core.rollout import to_assistant
from harness.core.toolenv import PROJECT
from harness.evals.convert import to_generation

ROOT = Path(__file__).resolve().parents[1]
TASKS = list(NAMES)
REGENERATED = ("shallow", "deep", "no_call", "length")


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[tuple[str, bool], EvalLog]:
    tmp = tmp_path_factory.mktemp("transcripts")
    cwd = os.getcwd()
    os.chdir(ROOT)  # this Inspect version resolves task files relative to the working directory
    try:
        out = {}
        for task in TASKS:
            for saar in (True, False):
                [out[(task, saar)]] = inspect_eval(
                    f"tasks/{task}.py",
                    model=f"replay/{task}.yaml",
                    task_args={"saar": saar, "data": "fixture", "sandbox": "local"},
                    log_dir=str(tmp),
                    display="none",
                )
                log = out[(task, saar)]
                log.samples = [resolve_sample_attachments(s) for s in log.samples or []]  # the events' full text
        return out
    finally:
        os.chdir(cwd)


def spans(sample: EvalSample) -> dict[str, object]:
    return {e.id: e for e in sample.events if e.event == "span_begin"}


def ancestors(span_id: str | None, by_id: dict) -> list:
    out = []
    while span_id in by_id:
        out.append(by_id[span_id])
        span_id = by_id[span_id].parent_id
    return out


def calls_written(sample: EvalSample) -> list[str]:
    """The program of every call the model wrote that the rollout runs, in order (from the model events)."""
    fence = rollout_config(sample.metadata["kind"], tool_env=PROJECT).accept_python_fence
    out = []
    for e in sample.events:
        if e.event == "model":
            gen = to_generation(e.output, PROJECT)
            turn = to_assistant(gen, env=PROJECT, accept_python_fence=fence)
            if turn.call is not None and not gen.truncated:
                out.append(turn.call.code)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("saar", [True, False])
@pytest.mark.parametrize("task", TASKS)
def test_every_execution_is_a_sandbox_event_in_a_tool_span_in_order(logs, task, saar):
    log = logs[(task, saar)]
    assert log.status == "success", log.error
    for sample in log.samples or []:
        by_id = spans(sample)
        runs = [e for e in sample.events if e.event == "sandbox"]
        traj = sample.metadata["trajectory"]
        executed = traj["tool_calls"] - traj["error_kinds"].get("MalformedToolCall", 0)
        assert len(runs) == executed, sample.id
        assert [r.input for r in runs] == calls_written(sample), sample.id
        for run in runs:
            tool_span = by_id[run.span_id]
            assert (tool_span.type, tool_span.name) == ("tool", "python")
            assert run.action == "exec" and run.result is not None and run.completed >= run.timestamp
        failed = [r for r in runs if r.result != 0]
        assert len(failed) == traj["tool_failures"] - traj["error_kinds"].get("MalformedToolCall", 0), sample.id
        for run in failed:  # the error the model was shown is in the event's output
            assert run.output.strip(), sample.id


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_every_rollback_is_a_span_around_its_regenerations(logs, task):
    seen_actions = set()
    for sample in logs[(task, True)].samples or []:
        by_id = spans(sample)
        events = sample.metadata["trajectory"]["saar_events"]
        regenerated = [e for e in events if e["action"] in REGENERATED]
        seen_actions |= {e["action"] for e in regenerated}
        rollbacks = [s for s in by_id.values() if s.type == "saar"]
        turns = list(dict.fromkeys(e["turn"] for e in regenerated))
        assert [s.name for s in rollbacks] == [f"saar rollback: turn {t}" for t in turns], sample.id
        for rollback, turn in zip(rollbacks, turns, strict=True):
            mine = [e for e in regenerated if e["turn"] == turn]
            retries = [s for s in by_id.values() if s.type == "regeneration" and s.parent_id == rollback.id]
            assert [s.name for s in retries] == [f"regeneration {e['retry']}" for e in mine], sample.id
            begin = sample.events.index(rollback)
            before = [e for e in sample.events[:begin] if e.event == "sandbox"]
            if mine[0]["error_kind"] != "MalformedToolCall":  # a malformed call never ran
                assert before[-1].result != 0, sample.id  # the failed call ran just before its rollback
                assert mine[0]["failed_code"] in (None, before[-1].input), sample.id  # (no_call, length: none kept)
            for retry, event in zip(retries, mine, strict=True):
                inside = [e for e in sample.events if retry in ancestors(e.span_id, by_id)]
                assert [e.event for e in inside if e.event == "model"] == ["model"], sample.id
                runs = [e.input for e in inside if e.event == "sandbox"]
                assert runs == ([event["new_code"]] if event["action"] in ("shallow", "deep") else []), sample.id
    assert seen_actions, task


def test_the_fixtures_reach_every_rollback_ending(logs):
    actions = {
        e["action"]
        for task in TASKS
        for s in logs[(task, True)].samples or []
        for e in s.metadata["trajectory"]["saar_events"]
    }
    assert {"shallow", "deep", "no_call", "length", "exhausted"} <= actions
    assert not any(s.type == "saar" for t in TASKS for sm in logs[(t, False)].samples for s in spans(sm).values())
