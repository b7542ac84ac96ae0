"""``python -m trainers warmup-measure`` end to end on the warm model: a float32 measure is a figure, not a sample."""

from __future__ import annotations

import json

import pytest
from needs import import_or_skip

import_or_skip("peft")

pytestmark = pytest.mark.slow


def test_a_float32_measure_gives_the_same_figures_when_rerun(tmp_path):
    """``--engine-dtype float32``: every request is seeded per (sample, epoch) and a seeded request's tokens do not
    depend on what shares its batch, so measuring the same model twice gives the same counts, error kinds and
    regenerations (in bfloat16, the default, a rerun is another sample)."""
    from inspect_ai.log import read_eval_log

    from trainers.warmup.measure import main

    argv = ["--model", "smollm2-tools", "--engine", "embedded", "--engine-dtype", "float32", "--saar"]
    argv += ["--heldout-math", "4", "--heldout-code", "0", "--no-fixtures", "--max-turns", "2", "--max-tokens", "96"]
    argv += ["--top-p", "1.0"]
    runs = []
    for run in ("first", "again"):
        assert main([*argv, "--out", str(tmp_path / run)]) == 0
        measured = json.loads((tmp_path / run / "measure.json").read_text())
        assert measured["settings"]["engine_dtype"] == "float32"
        (log,) = (tmp_path / run).rglob("*.eval")
        assert read_eval_log(str(log), header_only=True).eval.model_args["dtype"] == "float32"  # the engine got it
        (source,) = measured["models"][0]["sources"]
        runs.append({key: value for key, value in source.items() if key != "wall_s"})
    assert runs[0] == runs[1]
    assert runs[0]["samples"] == 4 and runs[0]["tool_calls"] > 0  # the model called the tool: the runs compare calls
