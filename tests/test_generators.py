"""Problem generators: seeded, checkable answers that the reference programs really print, benchmark schemas."""

from __future__ import annotations

import pytest

from harness.benchmarks.datasets import load_aime24, load_livecodebench
from harness.benchmarks.generators import (
    GENERATORS,
    MATH_GENERATORS,
    answer_of,
    generate,
    generator_of,
    program_of,
    question_of,
    write_aime_jsonl,
    write_lcb_jsonl,
)
from harness.benchmarks.lcb_cases import problem_tests


def test_same_seed_same_problems_other_seed_other_problems():
    a, b, c = generate(30, seed=5), generate(30, seed=5), generate(30, seed=6)
    assert a == b
    assert [question_of(p) for p in a] != [question_of(p) for p in c]
    assert {generator_of(p) for p in generate(200, seed=1)} == set(GENERATORS)


def test_math_answers_are_aime_answers():
    for p in generate(300, seed=2, generators=MATH_GENERATORS):
        assert 0 <= int(answer_of(p)) <= 999, p


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown or no generators"):
        generate(3, seed=0, generators=("geometry",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="2 weights for 5 generators"):
        generate(3, seed=0, weights=[1.0, 2.0])


async def test_reference_programs_print_the_answer_in_the_real_sandbox():
    from sandboxes.backends import get_backend

    problems = generate(25, seed=11)
    backend = get_backend("local")
    box = await backend.acquire()
    try:
        for p in problems:
            for test in p.tests or ({"input": "", "output": answer_of(p) + "\n"},):
                result = await box.run_python(program_of(p), stdin=test["input"], timeout=20)
                assert result.ok, (p.id, result.stderr)
                assert result.stdout == test["output"], (p.id, question_of(p))
    finally:
        await backend.release(box)
        await backend.shutdown()


def test_problems_load_through_the_benchmark_loaders(tmp_path):
    problems = generate(40, seed=3)
    math = [p for p in problems if p.kind != "code"]
    code = [p for p in problems if p.kind == "code"]
    loaded = load_aime24(write_aime_jsonl(problems, tmp_path / "math.jsonl"))
    assert [(x.id, x.target) for x in loaded] == [(p.id, answer_of(p)) for p in math]
    assert loaded[0].prompt == math[0].prompt
    lcb = load_livecodebench(write_lcb_jsonl(problems, tmp_path / "code.jsonl"))
    assert [x.id for x in lcb] == [p.id for p in code]
    assert problem_tests(lcb[0].metadata) == list(code[0].tests)
    assert lcb[0].prompt == code[0].prompt
