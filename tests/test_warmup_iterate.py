"""Expert iteration for the warm model: what a round keeps, how it trains, and the held-out table's definitions.

Fast tests run the real rollout core and the local sandbox with scripted "models" (no model loaded); the
one slow test tokenizes a correction with the real tokenizer.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import replace

import pytest
from tiny_models import tiny_lora_model

from harness.benchmarks.generators import generate, generated_problem
from harness.core import protocol
from harness.core.messages import Generation, Message
from harness.core.metrics import Regenerations, is_repeat
from harness.core.problems import rollout_config
from harness.core.rollout import rollout
from harness.core.saar import SaarConfig, SaarEvent
from harness.core.toolenv import PROJECT
from harness.engines.models import ADAPTERS_DIR, TOOLS_NAME
from trainers.warmup.artifacts import host
from trainers.warmup.iterate import (
    IterateConfig,
    examples_digest,
    fit_settings,
    problem_seed,
    round_problems,
    sample_round,
)
from trainers.warmup.selection import Recorder, Sampled, differs, select
from trainers.warmup.sft import Example, FitSettings, batch_step, fit, frozen_weights_in_bf16

PROBLEM = generated_problem("t-0-0000-modular", "modular", "What is 7 * 6?", "42", "print(7 * 6)")
BROKEN = "print(undefined_name)"
RIGHT = "print(7 * 6)"


def call(code: str, reasoning: str = "I compute it.") -> str:
    return f"{reasoning}\n{protocol.serialize_call(code)}"


class Script:
    """A scripted model: the next text of ``turns`` at every generation."""

    def __init__(self, *turns: str) -> None:
        self.turns = list(turns)

    async def __call__(self, context: list[Message], *, seed: int | None = None) -> Generation:
        text = self.turns.pop(0)
        return Generation(text=text, output_tokens=len(text) // 4)


@pytest.fixture
async def box():
    from sandboxes.backends import get_backend

    backend = get_backend("local")
    sandbox = await backend.acquire()
    yield sandbox
    await backend.release(sandbox)
    await backend.shutdown()


async def sampled(box, *turns: str, saar: bool, answer: str = "42", seed: int = 11) -> Sampled:
    """One trajectory of ``turns`` through the rollout core and the sandbox, with the outcome the text implies."""
    from trainers.core.reward import compute_reward

    config = rollout_config("math", max_turns=4, saar=SaarConfig(enabled=saar, max_retries=2), tool_env=PROJECT)
    recorder = Recorder(Script(*turns), config)
    traj = await rollout([Message("user", PROBLEM.prompt)], recorder, box, config, seed=seed)
    outcome = await compute_reward(PROBLEM, traj.final_text, box)
    return Sampled(PROBLEM, traj, outcome.correct, recorder.by_seed)


# ------------------------------------------------------------------------------------------ selection


async def test_the_filter_keeps_only_right_endings_and_masks_their_failed_turns(box):
    recovered = await sampled(box, call(BROKEN), call(RIGHT), "So \\boxed{42}.", saar=False)
    wrong = await sampled(box, call(RIGHT), "So \\boxed{41}.", saar=False)
    loose = await sampled(box, call(RIGHT), "So 42.", saar=False)  # no box: the strict check refuses it
    kept = select([recovered, wrong, loose])
    rights = [s for s in kept if s.source.startswith("right")]
    assert [s.demo.messages for s in rights] == [recovered.trajectory.messages]
    assert rights[0].source == "right_recovered"
    assert rights[0].demo.trained_turns == [1, 2]  # the failed first turn gets no loss
    assert not [s for s in kept if s.source.startswith("correction")]  # a right ending's recovery is trained once


async def test_a_saar_purified_trajectory_is_kept_whole_and_its_correction_on_its_own(box):
    purified = await sampled(box, call(BROKEN), call(RIGHT, "Fixed."), "So \\boxed{42}.", saar=True)
    assert [e.ok for e in purified.trajectory.events] == [True]
    kept = select([purified])
    assert [s.source for s in kept] == ["right_purified", "correction_saar"]
    right, correction = kept
    assert right.demo.trained_turns == [0, 1]  # the failure is cut out: every turn left is trained
    context, turn = correction.demo.messages[:-1], correction.demo.messages[-1]
    assert context[-1].role == "tool" and not context[-1].meta["ok"]  # the real error, last in view
    assert context[-2].call is not None and context[-2].call.code == BROKEN  # after the failed call
    assert turn.call is not None and turn.call.code == RIGHT and turn.content.strip() == "Fixed."
    assert correction.demo.trained_turns == [1]  # the corrected turn only


async def test_what_counts_as_a_correction(box):
    # SAAR regenerates the failed call verbatim, then another program that ran, then the answer is wrong
    repeat_then_fix = await sampled(box, call(BROKEN), call(BROKEN), call(RIGHT), "\\boxed{41}", saar=True)
    events = repeat_then_fix.trajectory.events
    assert [(e.ok, is_repeat(e)) for e in events] == [(False, True), (True, False)]
    kept = select([repeat_then_fix])
    assert [s.source for s in kept] == ["correction_saar"]  # the verbatim repeat is no correction
    assert kept[0].demo.messages[-1].call.code == RIGHT
    assert kept[0].demo.messages[-2].role == "tool" and not kept[0].demo.messages[-2].meta["ok"]
    # without SAAR: a failed call, its error, a different call that ran, in a trajectory that ends wrong
    next_turn = await sampled(box, call(BROKEN), call("print(41)"), "\\boxed{41}", saar=False)
    kept = select([next_turn])
    assert [s.source for s in kept] == ["correction_next_turn"]
    assert kept[0].demo.trained_turns == [1] and len(kept[0].demo.messages) == 4  # user, failed, error, fix
    # the same program again is not a correction; a failure that stays failed is not either
    same = await sampled(box, call(BROKEN), call(BROKEN), "\\boxed{41}", saar=False)
    still = await sampled(box, call(BROKEN), call("print(also_undefined)"), "\\boxed{41}", saar=False)
    assert select([same, still]) == []
    assert differs(None, RIGHT) and not differs(RIGHT + "\n", RIGHT) and not differs(RIGHT, None)


class Searched:
    """A scripted model for the correction search: per seed, the failed program again, another failing one, or
    a program that runs; it records every context it saw."""

    def __init__(self, *codes: str) -> None:
        self.codes, self.contexts = codes, []

    async def __call__(self, context: list[Message], *, seed: int | None = None) -> Generation:
        self.contexts.append(context)
        text = call(random.Random(seed).choice(self.codes), "Searched.")
        return Generation(text=text, output_tokens=len(text) // 4)


async def test_the_search_keeps_a_different_call_that_runs_after_a_failure_saar_did_not_correct(box):
    from sandboxes.backends import get_backend
    from trainers.warmup.search import failure_points, search_corrections, uncorrected

    config = rollout_config("math", max_turns=4, saar=SaarConfig(enabled=True, max_retries=2), tool_env=PROJECT)
    stuck = await sampled(box, call(BROKEN), call(BROKEN), call("print(also_undefined)"), "\\boxed{41}", saar=True)
    purified = await sampled(box, call(BROKEN), call(RIGHT), "\\boxed{42}", saar=True)
    assert stuck.trajectory.events and not any(e.ok for e in stuck.trajectory.events)
    assert [e.turn for e, _ in uncorrected(stuck)] == [0] and list(uncorrected(purified)) == []

    backend = get_backend("local")
    try:
        model = Searched(BROKEN, "print(also_undefined)", RIGHT)
        found = await search_corrections(
            failure_points([stuck, purified]), model, backend, lambda s: config, k=8, concurrency=4
        )
        assert len(model.contexts) == 8  # the purified trajectory's failure is not searched again
        nothing = await search_corrections(
            failure_points([stuck]), Searched(BROKEN), backend, lambda s: config, k=4, concurrency=4
        )
        # a regeneration without a call records no failed program: the failed turn in context is the one compared,
        # so a repeat of a program that failed by chance (here: too early) and then runs is still no correction
        flaky = f"import time\nassert time.time() > {time.time() + 0.5}"
        gave_up = await sampled(box, call(flaky), "I cannot fix it.", saar=True)
        assert [e.action for e in gave_up.trajectory.events] == ["no_call"]
        await asyncio.sleep(0.6)
        nothing += await search_corrections(
            failure_points([gave_up]), Searched(flaky), backend, lambda s: config, k=4, concurrency=4
        )
    finally:
        await backend.shutdown()
    assert nothing == []  # the failed program again is no correction, however often it is drawn
    [correction] = found
    assert correction.source == "correction_search"
    context, turn = correction.demo.messages[:-1], correction.demo.messages[-1]
    assert context == model.contexts[0]  # what the first regeneration saw: the failed call and its real error last
    assert context[-2].call.code == BROKEN and context[-1].role == "tool" and "NameError" in context[-1].content
    assert turn.call.code == RIGHT and correction.demo.trained_turns == [1]


async def test_distillation_puts_the_generators_program_after_each_failure_saar_did_not_correct(box):
    from sandboxes.backends import get_backend
    from trainers.warmup.demonstrations import DemonstrationError
    from trainers.warmup.reference import reference_corrections
    from trainers.warmup.search import failure_points

    config = rollout_config("math", max_turns=4, saar=SaarConfig(enabled=True, max_retries=2), tool_env=PROJECT)
    stuck = await sampled(box, call(BROKEN), call(BROKEN), call("print(also_undefined)"), "\\boxed{41}", saar=True)
    purified = await sampled(box, call(BROKEN), call(RIGHT), "\\boxed{42}", saar=True)
    defective = generated_problem("t-0-0001-modular", "modular", "What is 7 * 6?", "42", "print(seven * 6)")
    backend = get_backend("local")
    try:
        found = await reference_corrections(failure_points([stuck, purified]), backend, lambda s: config, 2)
        with pytest.raises(DemonstrationError, match="t-0-0001-modular: the reference program did not run"):
            await reference_corrections(
                failure_points([Sampled(defective, stuck.trajectory, False, stuck.recorded)]), backend,
                lambda s: config, 2,
            )  # fmt: skip
    finally:
        await backend.shutdown()
    [correction] = found  # the purified trajectory's failure has the model's own correction already
    assert correction.source == "correction_reference"
    context, turn = correction.demo.messages[:-1], correction.demo.messages[-1]
    assert context[-2].call.code == BROKEN and "NameError" in context[-1].content  # the model's failure, in view
    assert turn.call.code == RIGHT  # the generator's program (PROBLEM.code)
    assert "NameError: name 'undefined_name' is not defined" in turn.content  # the turn names the real error
    assert correction.demo.trained_turns == [1]


async def test_distillation_with_finish_goes_on_to_the_programs_output_and_the_answer(box):
    from sandboxes.backends import get_backend
    from trainers.warmup.demonstrations import DemonstrationError
    from trainers.warmup.reference import reference_corrections
    from trainers.warmup.search import failure_points

    config = rollout_config("math", max_turns=4, saar=SaarConfig(enabled=True, max_retries=2), tool_env=PROJECT)
    stuck = await sampled(box, call(BROKEN), call(BROKEN), call("print(also_undefined)"), "\\boxed{41}", saar=True)
    wrong = generated_problem("t-0-0002-modular", "modular", "What is 7 * 6?", "42", "print(7 * 7)")
    backend = get_backend("local")
    try:
        [finished] = await reference_corrections(failure_points([stuck]), backend, lambda s: config, 2, finish=True)
        again = await reference_corrections(failure_points([stuck]), backend, lambda s: config, 2, finish=True)
        with pytest.raises(DemonstrationError, match="t-0-0002-modular: the reference program printed '49', not '42'"):
            await reference_corrections(
                failure_points([Sampled(wrong, stuck.trajectory, False, stuck.recorded)]), backend,
                lambda s: config, 2, finish=True,
            )  # fmt: skip
    finally:
        await backend.shutdown()
    *context, turn, result, closing = finished.demo.messages
    assert context[-1].role == "tool" and "NameError" in context[-1].content  # the model's own failure, in view
    assert turn.call.code == RIGHT and result.role == "tool" and result.meta["ok"] and result.content.strip() == "42"
    assert closing.call is None and "\\boxed{42}" in closing.content  # the answer, from the program's real output
    assert finished.demo.trained_turns == [1, 2]  # the correcting turn and the closing turn, not the failed one
    assert again[0].demo.messages[-1].content == closing.content  # the closing wording is seeded


@pytest.mark.slow
async def test_a_corrections_loss_lies_on_the_corrected_turn_only(box):
    """With the real tokenizer: the labels are exactly the corrected turn's tokens."""
    from harness.engines.models import load_model
    from trainers.warmup.sft import tokenize

    purified = await sampled(box, call(BROKEN), call(RIGHT, "Fixed."), "So \\boxed{42}.", saar=True)
    correction = [s for s in select([purified]) if s.source == "correction_saar"][0]
    _, tokenizer = load_model(None)
    ex = tokenize(tokenizer, correction.demo)
    trained = tokenizer.decode([i for i, lbl in zip(ex.ids, ex.labels, strict=True) if lbl != -100])
    assert "Fixed." in trained and RIGHT.replace(" ", "") in trained.replace(" ", "")
    assert BROKEN not in trained and "NameError" not in trained and "What is 7 * 6" not in trained
    first = next(i for i, lbl in enumerate(ex.labels) if lbl != -100)
    assert all(lbl != -100 for lbl in ex.labels[first:-1])  # one contiguous span, at the end


# ------------------------------------------------------------------------------------------ a round


class SeededModel:
    """A scripted model whose turn depends on its seed only: the first call fails or not, then it answers."""

    async def __call__(self, context: list[Message], *, seed: int | None = None) -> Generation:
        rng = random.Random(seed)
        if context[-1].role == "tool":
            ok = context[-1].meta.get("ok")
            text = f"\\boxed{{{context[-1].content.strip()}}}" if ok else call("print(1)")
        else:
            text = call(rng.choice(["print(1)", BROKEN, "print(2)"]))
        return Generation(text=text, output_tokens=len(text) // 4)


async def test_a_rounds_selection_and_fine_tuning_reproduce_from_their_seeds():
    from sandboxes.backends import get_backend

    cfg = IterateConfig(problems=3, samples=2, max_turns=3, concurrency=4)
    assert round_problems(cfg, 1) == round_problems(cfg, 1) != round_problems(cfg, 2)
    assert all(problem_seed(s, r) < 1000 for s in range(9) for r in range(1, 50))  # never a held-out seed

    async def one_run() -> list[tuple[str, list[str], list[int]]]:
        backend = get_backend("local")
        try:
            found = await sample_round(cfg, 1, SeededModel, backend, round_problems(cfg, 1))
        finally:
            await backend.shutdown()
        return [(s.source, [m.text for m in s.demo.messages], s.demo.trained_turns) for s in select(found)]

    first = await one_run()
    assert first and first == await one_run()
    assert fit_settings(cfg, 1) == fit_settings(cfg, 1) != fit_settings(cfg, 2)

    examples = _examples(random.Random(3), 6)
    changed = [*examples[:-1], Example(examples[-1].ids, [*examples[-1].labels[:-1], -100])]  # one label masked
    assert examples_digest(examples) == examples_digest(_examples(random.Random(3), 6)) != examples_digest(changed)
    model_a, model_b = tiny_lora_model(), tiny_lora_model()
    settings = FitSettings(steps=3, batch_size=4, micro_batch=2, learning_rate=1e-2, warmup_steps=1, seed=5)
    groups = [i % 2 == 0 for i in range(len(examples))]
    a = fit(model_a, examples, groups, settings, 0, progress=False)
    b = fit(model_b, examples, groups, settings, 0, progress=False)
    assert a.losses == b.losses
    for (name, pa), (_, pb) in zip(model_a.named_parameters(), model_b.named_parameters(), strict=True):
        assert pa.equal(pb), name


CPUINFO = """processor\t: 0
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 amx_tile amx_bf16 sha_ni
bogomips\t: 4200.00

processor\t: 1
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 amx_tile amx_bf16 sha_ni
"""


def test_a_build_records_the_cpu_features_and_libraries_its_arithmetic_ran_on(monkeypatch):
    """Two builds whose data agree and whose adapters differ are told apart by the host: the vector features
    that pick torch's and vLLM's kernels (AVX-512, AMX), a cap on oneDNN's and the computing libraries' versions."""
    from importlib.metadata import version

    described = host(CPUINFO)
    assert described["cpu"] == "Intel(R) Xeon(R) Processor"
    assert described["cpu_features"] == ["amx_bf16", "amx_tile", "avx2", "avx512_bf16", "avx512f", "fma"]
    assert described["packages"]["torch"] == version("torch")
    without_amx = host(CPUINFO.replace(" amx_tile amx_bf16", ""))
    assert without_amx["cpu_features"] != described["cpu_features"]  # another CPU generation: another record
    assert host("")["cpu"] == "unknown" and host("")["cpu_features"] == []
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert host(CPUINFO)["onednn_max_cpu_isa"] is None
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")  # AMX present and not used: other bits
    assert host(CPUINFO)["onednn_max_cpu_isa"] == "AVX512_CORE_BF16"


# ------------------------------------------------------------------------------------------ training


def _examples(rng: random.Random, n: int) -> list[Example]:
    prompt = [rng.randrange(1, 64) for _ in range(7)]
    out = []
    for _ in range(n):
        ids = prompt + [rng.randrange(1, 64) for _ in range(rng.randrange(3, 12))]
        start = len(prompt) + rng.randrange(0, 2)
        out.append(Example(ids, [-100] * start + ids[start:]))
    return out


@pytest.mark.parametrize("micro", [1, 2, 3])
def test_micro_batches_give_the_whole_batchs_loss_and_gradient(micro):
    """Token-weighted accumulation: cutting a batch into micro-batches (lone rows included) changes nothing."""
    import torch

    batch = _examples(random.Random(1), 5)
    model = tiny_lora_model()
    whole = batch_step(model, batch, 0, micro_batch=len(batch), bf16=False)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    parts = batch_step(model, batch, 0, micro_batch=micro, bf16=False)
    assert parts == pytest.approx(whole, rel=1e-5)
    assert grads
    for name, p in model.named_parameters():
        if name in grads:
            torch.testing.assert_close(p.grad, grads[name], rtol=1e-4, atol=1e-6)
    model.zero_grad()
    assert batch_step(model, batch, 0, micro_batch=micro) == pytest.approx(whole, rel=1e-3)  # bf16 rounding


def test_frozen_weights_rounded_once_give_the_same_bits_as_autocasts_rounding_at_every_call():
    """:func:`fit` holds the frozen linear weights in bfloat16 while it trains under autocast (which rounds them again
    at every call): the loss and every gradient are the same bits, and the float32 weights come back afterwards."""
    import torch

    batch = _examples(random.Random(4), 5)
    model = tiny_lora_model()
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    plain = batch_step(model, batch, 0, micro_batch=2)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    with frozen_weights_in_bf16(model):
        dtypes = {p.dtype for n, p in model.named_parameters() if "base_layer" in n}
        rounded = batch_step(model, batch, 0, micro_batch=2)
    assert dtypes == {torch.bfloat16} and grads
    assert rounded == plain
    for name, p in model.named_parameters():
        if name in grads:
            assert p.grad.equal(grads[name]), name
    for name, p in model.named_parameters():  # the embedding (tied to the head) was never rounded
        if not p.requires_grad:
            assert p.dtype == torch.float32 and p.equal(frozen[name]), name


def test_a_lone_row_batch_trains():
    batch = _examples(random.Random(2), 1)
    assert batch_step(tiny_lora_model(), batch, 0, micro_batch=8) > 0


# ------------------------------------------------------------------------------------------ the table


def test_regenerations_ran_and_repeated_have_one_definition():
    events = [
        SaarEvent(0, 1, "shallow", "NameError", similarity=1.0, ok=False),  # repeated
        SaarEvent(0, 2, "deep", "NameError", similarity=0.2, ok=True),  # ran
        SaarEvent(1, 1, "no_call", "SyntaxError"),  # a regeneration without a call
        SaarEvent(1, 2, "exhausted", "SyntaxError"),  # no regeneration: the bookkeeping of the end
        SaarEvent(2, 1, "cap", "TypeError"),
    ]
    counted = Regenerations.of(events)
    assert (counted.regenerations, counted.ran, counted.repeated) == (3, 1, 1)
    assert counted.ran_share == pytest.approx(1 / 3) and Regenerations().ran_share == 0.0
    assert Regenerations.of([e.to_dict() for e in events]) == counted  # a log's dicts count the same


def test_the_report_counts_repeats_by_the_same_rule():
    from harness.reports.compare import ArmRun, SampleRecord
    from harness.reports.stats import events_by_error_kind

    events = [
        SaarEvent(0, 1, "shallow", "NameError", similarity=1.0).to_dict(),
        SaarEvent(0, 2, "deep", "NameError", similarity=1.0, ok=False).to_dict(),
        SaarEvent(0, 3, "shallow", "NameError", similarity=0.9, ok=True).to_dict(),
    ]
    record = SampleRecord("s", 1, 0.0, 3, 2, 0, 10, True, events=events)
    arm = ArmRun("aime24", "on", "m", "success", "", 1, [record])
    by_kind = events_by_error_kind(arm)["NameError"]
    counted = Regenerations.of(events)
    assert by_kind["repeated"] == counted.repeated == 2 and by_kind["purified"] == counted.ran == 1


def test_the_measure_table_has_one_row_per_model_and_the_targets():
    from trainers.warmup.measure import ModelFigures, SourceFigures, render_models

    src = SourceFigures(
        "held-out math", samples=4, with_calls=4, tool_calls=8, tool_failures=4, correct=1.0,
        error_kinds={"NameError": 4}, regenerations=Regenerations(6, 2, 1), wall_s=10.0,
    )  # fmt: skip
    assert (src.calls_per_sample, src.failed_call_rate, src.accuracy) == (2.0, 0.5, 0.25)
    table = render_models([ModelFigures("round-0", [src]), ModelFigures("round-1", [src, src])])
    lines = table.splitlines()
    assert len(lines) == 4 and lines[2].startswith("| round-0 |") and lines[3].startswith("| round-1 |")
    assert "| 50% |" in lines[2] and "| 6 | 33% | 17% |" in lines[2]  # ran 2 of 6, repeated 1 of 6
    assert "| 12 | 33% | 17% |" in lines[3]  # pooled over the model's sources


def test_calls_after_a_run_count_turns_that_follow_a_call_that_ran():
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall

    from trainers.warmup.measure import SourceFigures, calls_after_a_run, pooled, render

    def turn(code: str | None) -> ChatMessageAssistant:
        calls = [ToolCall(id="c", function="python", arguments={"code": code})] if code else None
        return ChatMessageAssistant(content="I run it.", tool_calls=calls)

    def result(ok: bool) -> ChatMessageTool:
        return ChatMessageTool(content="42" if ok else "Error: NameError", tool_call_id="c", metadata={"ok": ok})

    rewrites = [ChatMessageUser(content="7*6?"), turn(RIGHT), result(True), turn(RIGHT), result(True), turn(None)]
    fixes = [ChatMessageUser(content="7*6?"), turn(BROKEN), result(False), turn(RIGHT), result(True), turn(None)]
    assert calls_after_a_run([rewrites]) == (2, 1)  # after each run: one call again, one answer
    assert calls_after_a_run([fixes]) == (1, 0)  # the turn after a failed call is not counted
    src = SourceFigures("s", 2, 2, 4, 1, 1.0, turns_after_run=3, calls_after_run=1)
    assert src.calls_again_rate == pytest.approx(1 / 3) and pooled("all", [src, src]).calls_after_run == 2
    assert "| 1 of 3 |" in render([src])


def test_an_adapter_directory_works_as_a_model_spec(tmp_path):
    from harness.engines.models import resolve_spec

    warm = ADAPTERS_DIR / TOOLS_NAME
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (tmp_path / name).write_bytes((warm / name).read_bytes())
    assert resolve_spec(str(tmp_path)) == ("adapter", tmp_path.resolve())
    assert resolve_spec(str(warm)) == ("adapter", warm.resolve())


def test_the_generators_training_seeds_are_the_rounds():
    ids = {p.id for p in round_problems(IterateConfig(), 1)}
    assert ids.isdisjoint({p.id for p in generate(24, seed=1000, prefix="heldout")})


def test_the_committed_run_from_before_the_search_resumes_and_not_with_the_search_on():
    from pathlib import Path

    from trainers.warmup.iterate import read_manifest

    committed = Path(__file__).resolve().parents[1] / "results" / "warmup" / "expert-iteration"
    before = IterateConfig(engine_dtype="bfloat16")  # its rounds sampled on a bfloat16 engine, then the default
    assert len(read_manifest(committed, before)["rounds"]) == 1
    with pytest.raises(ValueError, match=r"engine_dtype 'bfloat16' there, 'float32' here"):
        read_manifest(committed, IterateConfig())  # the error names what differs
    with pytest.raises(ValueError, match="other settings"):
        read_manifest(committed, replace(before, search=8))  # the search changes what a round trains on
    with pytest.raises(ValueError, match="other settings"):
        read_manifest(committed, replace(before, reference=True))  # and so does distillation
    # the earlier bfloat16 distillation still resumes as what it was, and not as a float32 run
    distilled = committed.parent / "distillation"
    cfg = replace(before, rounds=5, reference=True, steps=24, threads=1, out="results/warmup/distillation")
    rounds = read_manifest(distilled, cfg)["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3, 4] and rounds[0]["selected"]["correction_reference"] > 0
    with pytest.raises(ValueError, match="engine_dtype"):
        read_manifest(distilled, IterateConfig(rounds=5, reference=True, steps=24))


def test_the_warm_model_is_the_committed_run_its_model_json_rebuilds():
    """model.json's command, parsed as the command line parses it, is the run whose round 4 is the warm model's
    adapter byte for byte, and resumes it (so it names every setting the run had, the seed included)."""
    import shlex
    from pathlib import Path

    from trainers.warmup.iterate import parse_config, read_manifest

    warm = ADAPTERS_DIR / TOOLS_NAME
    rebuild = json.loads((warm / "model.json").read_text())["rebuild"]
    assert rebuild[0] == "python -m trainers warmup"
    words = shlex.split(rebuild[1])
    assert words[:4] == ["python", "-m", "trainers", "warmup-iterate"]
    cfg = parse_config(words[4:])
    run = Path(__file__).resolve().parents[1] / cfg.out
    rounds = read_manifest(run, cfg)["rounds"]  # refused if any setting differs from the run's
    assert [r["round"] for r in rounds] == [1, 2, 3, 4] and cfg.engine_dtype == "float32"
    # sampled 32 trajectories at a time, and the same data at any other number (how fast, not what, in float32)
    assert json.loads((run / "iterate.json").read_text())["config"]["concurrency"] == 32 != cfg.concurrency
    assert read_manifest(run, replace(cfg, concurrency=7, threads=1))["rounds"] == rounds
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (run / "round-4" / name).read_bytes() == (warm / name).read_bytes()


def test_distillation_is_a_switch_of_its_own_and_the_command_line_says_so():
    from trainers.warmup.iterate import command_line

    assert command_line(IterateConfig(reference=True, rounds=2)).endswith("--rounds 2 --reference")
    with pytest.raises(ValueError, match="alternatives"):
        IterateConfig(search=8, reference=True)
    assert command_line(IterateConfig(reference=True, reference_finish=True)).endswith("--reference --reference-finish")
    with pytest.raises(ValueError, match="add --reference"):
        IterateConfig(reference_finish=True)
    assert command_line(IterateConfig(engine_dtype="bfloat16")).endswith("--engine-dtype bfloat16")
    with pytest.raises(ValueError, match="engine-dtype"):
        IterateConfig(engine_dtype="float16")
