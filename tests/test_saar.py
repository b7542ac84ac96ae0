"""Every SAAR branch, pinned by the exact message sequence it leaves behind.

The model is the deterministic replay model (scripted completions); the code runs
for real in the local sandbox, so failures are real Python errors.
"""

from __future__ import annotations

import json
import random

import pytest

from harness.core import protocol
from harness.core.messages import Generation, Message, user
from harness.core.rollout import RolloutConfig, Trajectory, rollout
from harness.core.saar import SaarConfig, similarity
from harness.core.toolenv import PROJECT
from harness.engines.replay import ReplayScript


def call(code: str, reasoning: str = "") -> str:
    payload = json.dumps({"name": "python", "arguments": {"code": code}})
    return f"{reasoning}<tool_call>\n{payload}\n</tool_call>"


GOOD = "print(sum(range(101)))"
SYNTAX = "print(sum(range(101))"  # similar to GOOD: shallow
OTHER = "total = 0\nfor i in range(1, 101):\n    total += i\nprint(total)"  # unlike SYNTAX: deep
NAME_ERR = "print(totl)"
ANSWER = "The sum is \\boxed{5050}."


async def run(turns: list, sandbox, **saar) -> Trajectory:
    script = ReplayScript.from_dict({"default": turns})
    calls = {"n": 0}

    async def generate(messages: list[Message], *, seed: int | None = None):
        calls["n"] += 1
        return script.generation("q", calls["n"] - 1)

    saar_cfg = SaarConfig(enabled=saar.pop("enabled", True), **saar)
    return await rollout(
        [user("Sum 1..100.")], generate, sandbox, RolloutConfig(saar=saar_cfg, tool_env=PROJECT), random.Random(0)
    )


def shape(traj: Trajectory) -> list[tuple]:
    """(role, reasoning, code or tool text start) for each message after the prompt."""
    out = []
    for m in traj.messages[1:]:
        if m.role == "assistant":
            out.append(("assistant", m.content, m.call.code if m.call else None))
        else:
            out.append(("tool", m.content.splitlines()[0] if m.content else ""))
    return out


async def test_success_first_try_keeps_plain_trajectory(local_sandbox):
    traj = await run([call(GOOD, "Compute.\n"), ANSWER], local_sandbox)
    assert shape(traj) == [("assistant", "Compute.\n", GOOD), ("tool", "5050"), ("assistant", ANSWER, None)]
    assert traj.events == [] and traj.stop_reason == "answer" and traj.tool_failures == 0


async def test_shallow_keeps_old_reasoning_and_swaps_the_call(local_sandbox):
    traj = await run([call(SYNTAX, "Compute.\n"), call(GOOD, "Oops, fix paren.\n"), ANSWER], local_sandbox)
    assert shape(traj) == [("assistant", "Compute.\n", GOOD), ("tool", "5050"), ("assistant", ANSWER, None)]
    [ev] = traj.events
    assert (ev.turn, ev.retry, ev.action, ev.error_kind, ev.ok) == (0, 1, "shallow", "SyntaxError", True)
    assert ev.similarity is not None and ev.similarity >= 0.5
    assert traj.tool_calls == 2 and traj.tool_failures == 1 and traj.failures_kept == 0


async def test_deep_replaces_the_whole_turn(local_sandbox):
    traj = await run([call(SYNTAX, "Compute.\n"), call(OTHER, "Use a loop.\n"), ANSWER], local_sandbox)
    assert shape(traj) == [("assistant", "Use a loop.\n", OTHER), ("tool", "5050"), ("assistant", ANSWER, None)]
    [ev] = traj.events
    assert ev.action == "deep" and ev.similarity is not None and ev.similarity < 0.5 and ev.ok


async def test_second_failure_is_corrected_relative_to_installed_turn(local_sandbox):
    # fail (syntax) -> deep to NAME_ERR turn (fails) -> shallow fix of that turn keeps ITS reasoning
    turns = [call(SYNTAX, "A.\n"), call(NAME_ERR, "B.\n"), call("print(5050)", "C.\n"), ANSWER]
    traj = await run(turns, local_sandbox)
    assert shape(traj) == [("assistant", "B.\n", "print(5050)"), ("tool", "5050"), ("assistant", ANSWER, None)]
    assert [(e.retry, e.action, e.error_kind, e.ok) for e in traj.events] == [
        (1, "deep", "SyntaxError", False),
        (2, "shallow", "NameError", True),
    ]


async def test_regeneration_sees_the_error_but_the_error_is_removed(local_sandbox):
    seen: list[list[Message]] = []
    script = ReplayScript.from_dict({"default": [call(SYNTAX, "A.\n"), call(GOOD, "B.\n"), ANSWER]})

    async def generate(messages, *, seed=None):
        seen.append(list(messages))
        return script.generation("q", len(seen) - 1)

    traj = await rollout(
        [user("q")], generate, local_sandbox, RolloutConfig(saar=SaarConfig(enabled=True), tool_env=PROJECT)
    )
    assert [m.role for m in seen[1]] == ["user", "assistant", "tool"]  # the regeneration saw the error
    assert "SyntaxError" in seen[1][-1].content
    assert [m.role for m in seen[2]] == ["user", "assistant", "tool"]  # the next turn sees only the success
    assert seen[2][-1].content.strip() == "5050"
    assert all("SyntaxError" not in m.content for m in traj.messages)


async def test_exhausted_retries_keep_last_error_with_note_and_turn_rollback_off(local_sandbox):
    fails = [call(f"print(x{i})", "A.\n") for i in range(4)]
    traj = await run([*fails, call("print(y)", "again\n"), ANSWER], local_sandbox)
    roles = [m.role for m in traj.messages[1:]]
    assert roles == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert traj.messages[1].call.code == "print(x3)"  # last installed attempt (shallow each time)
    assert traj.messages[2].content.startswith("Error:") and "failed 4 times" in traj.messages[2].content
    # rollback is off afterwards: the next failure stays without regeneration
    assert traj.messages[3].call.code == "print(y)"
    assert "NameError" in traj.messages[4].content
    assert [e.action for e in traj.events] == ["shallow", "shallow", "shallow", "exhausted"]
    assert traj.failures_kept == 2 and traj.tool_calls == 5


async def test_regenerated_turn_without_call_keeps_error_and_ends(local_sandbox):
    traj = await run([call(SYNTAX, "A.\n"), "I give up. \\boxed{1}", call(GOOD)], local_sandbox)
    assert shape(traj) == [
        ("assistant", "A.\n", SYNTAX),
        ("tool", "Error:"),
        ("assistant", "I give up. \\boxed{1}", None),
    ]
    assert [e.action for e in traj.events] == ["no_call"] and traj.stop_reason == "answer"


async def test_regenerated_turn_hitting_length_restores_state_before_error(local_sandbox):
    traj = await run([call(SYNTAX, "A.\n"), {"text": "very long...", "truncated": True}, ANSWER], local_sandbox)
    assert shape(traj) == [("assistant", "A.\n", SYNTAX)]
    assert traj.stop_reason == "length" and [e.action for e in traj.events] == ["length"]


async def test_saar_off_keeps_errors_in_trajectory(local_sandbox):
    traj = await run([call(SYNTAX, "A.\n"), call(GOOD, "B.\n"), ANSWER], local_sandbox, enabled=False)
    assert shape(traj) == [
        ("assistant", "A.\n", SYNTAX),
        ("tool", "Error:"),
        ("assistant", "B.\n", GOOD),
        ("tool", "5050"),
        ("assistant", ANSWER, None),
    ]
    assert traj.events == [] and traj.failures_kept == 1 and not traj.saar_on


async def test_malformed_call_gets_tool_error_and_is_purified(local_sandbox):
    bad = '<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"\n</tool_call>'
    off = await run([bad, ANSWER], local_sandbox, enabled=False)
    assert off.messages[2].role == "tool" and "malformed tool call" in off.messages[2].content
    on = await run([bad, call(GOOD, "Fixed.\n"), ANSWER], local_sandbox)
    assert shape(on) == [("assistant", "Fixed.\n", GOOD), ("tool", "5050"), ("assistant", ANSWER, None)]
    assert on.events[0].error_kind == "MalformedToolCall" and on.events[0].action == "deep"


async def test_probability_zero_never_and_one_always():
    rng = random.Random(1)
    assert not any(SaarConfig(enabled=True, prob=0.0).draw(rng) for _ in range(50))
    assert all(SaarConfig(enabled=True, prob=1.0).draw(rng) for _ in range(50))
    draws = [SaarConfig(enabled=True, prob=0.7).draw(random.Random(s)) for s in range(1000)]
    assert 0.65 < sum(draws) / len(draws) < 0.75


async def test_attempt_cap_turns_rollback_off(local_sandbox):
    fails = [call(f"print(x{i})") for i in range(6)]
    traj = await run([*fails, ANSWER], local_sandbox, max_attempts=2)
    assert [e.action for e in traj.events] == ["shallow", "cap"]
    assert traj.failures_kept >= 1


def test_similarity_modes_code_vs_whole_call():
    a = Message("assistant", "", call=protocol.parse_turn(call("print(1)"), env=PROJECT).call)
    b = Message("assistant", "", call=protocol.parse_turn(call("import os; os.listdir()"), env=PROJECT).call)
    code, whole = similarity(a, b, "code"), similarity(a, b, "call")
    assert code is not None and whole is not None and whole > code  # JSON boilerplate pushes the ratio up
    assert similarity(a, Message("assistant", "text only")) is None


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="prob"):
        SaarConfig(prob=1.5)
    with pytest.raises(ValueError, match="similarity"):
        SaarConfig(similarity="tokens")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- tokens, attempt cap, ids, seeds


def scripted(gens: list[Generation], seen: list | None = None):
    """A generate function over fixed Generations that records the seed of each call."""
    pending = list(gens)

    async def generate(messages: list[Message], *, seed: int | None = None) -> Generation:
        if seen is not None:
            seen.append(seed)
        return pending.pop(0)

    return generate


async def test_shallow_replacement_counts_the_tokens_it_keeps(local_sandbox):
    failed = Generation(call(SYNTAX, "Compute the sum.\n"), output_tokens=100, reasoning_tokens=60)
    fixed = Generation(call(GOOD, "Oops.\n"), output_tokens=30, reasoning_tokens=10)
    answer = Generation(ANSWER, output_tokens=5)
    cfg = RolloutConfig(max_total_tokens=90, saar=SaarConfig(enabled=True), tool_env=PROJECT)
    traj = await rollout([user("q")], scripted([failed, fixed, answer]), local_sandbox, cfg)
    assert [e.action for e in traj.events] == ["shallow"]
    kept = traj.messages[1]
    assert kept.content == "Compute the sum.\n" and kept.call.code == GOOD
    assert kept.meta["tokens"] == 60 + 20  # the installed reasoning's tokens + the new call's
    assert traj.tokens_kept == 85 and traj.tokens_generated == 135
    assert traj.stop_reason == "answer"  # 80 kept tokens do not exhaust the budget of 90


async def test_attempt_cap_is_recorded_wherever_it_stops_rollback(local_sandbox):
    traj = await run([call("print(x0)"), ANSWER], local_sandbox, max_attempts=1)
    assert [e.action for e in traj.events] == ["cap"]
    assert not traj.messages[2].meta["ok"] and traj.stop_reason == "answer"


async def test_every_parsed_call_has_its_own_id(local_sandbox):
    traj = await run([call(SYNTAX, "A.\n"), call(OTHER, "B.\n"), call(GOOD, "C.\n"), ANSWER], local_sandbox)
    ids = [m.call.id for m in traj.messages if m.role == "assistant" and m.call is not None]
    ids += [m.tool_call_id for m in traj.messages if m.role == "tool"]
    off = await run([call(SYNTAX, "A.\n"), call(OTHER, "B.\n"), ANSWER], local_sandbox, enabled=False)
    off_ids = [m.call.id for m in off.messages if m.role == "assistant" and m.call is not None]
    assert len(set(off_ids)) == 2, off_ids
    tool_ids = [m.tool_call_id for m in off.messages if m.role == "tool"]
    assert tool_ids == off_ids  # each result answers its own call
    assert len(set(ids[:2])) == 2 and ids[2:] == ids[:2]


async def test_generation_seeds_per_turn_and_retry_identical_across_arms(local_sandbox):
    from harness.core.seeds import generation_seed

    gens = [call(SYNTAX, "A.\n"), call(GOOD, "B.\n"), ANSWER]
    on_seen: list = []
    off_seen: list = []
    for enabled, seen in ((True, on_seen), (False, off_seen)):
        g = [Generation(t) for t in gens]
        cfg = RolloutConfig(saar=SaarConfig(enabled=enabled), tool_env=PROJECT)
        await rollout([user("q")], scripted(g, seen), local_sandbox, cfg, seed=1234)
    # turn 0 is seeded identically in both arms; the SAAR regeneration of turn 0 gets its own seed
    assert on_seen[0] == off_seen[0] == generation_seed(1234, turn=0, retry=0)
    assert on_seen[1] == generation_seed(1234, turn=0, retry=1) != on_seen[0]
    assert off_seen[1] == generation_seed(1234, turn=1, retry=0)
    assert on_seen[2] == generation_seed(1234, turn=1, retry=0)  # the answer after the purified turn 0
    assert off_seen[2] == generation_seed(1234, turn=2, retry=0)
    assert len(set(off_seen)) == 3
    unseeded: list = []
    await rollout([user("q")], scripted([Generation(ANSWER)], unseeded), local_sandbox, RolloutConfig(tool_env=PROJECT))
    assert unseeded == [None]  # no trajectory seed: the provider's own randomness
