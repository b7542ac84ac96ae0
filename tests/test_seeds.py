"""Sampling seeds per (sample, epoch): epochs are different samples, both SAAR arms share them.

The end-to-end test runs ``python -m harness compare`` on the real embedded model
(SmolLM2-135M on the CPU) at temperature 1.0, as a user would.
"""

from __future__ import annotations

from pathlib import Path

from inspect_ai.log import read_eval_log

from harness.core.seeds import derive, generation_seed, trajectory_seed
from harness.reports.compare import log_files


def test_seeds_are_stable_distinct_and_31_bit() -> None:
    assert trajectory_seed(0, "p1", 1) == trajectory_seed(0, "p1", 1)
    seeds = {trajectory_seed(s, i, e) for s in (0, 1) for i in ("p1", "p2") for e in (1, 2)}
    assert len(seeds) == 8
    t = trajectory_seed(0, "p1", 1)
    assert generation_seed(t, turn=0) != generation_seed(t, turn=0, retry=1) != generation_seed(t, turn=1)
    assert all(0 <= derive(i) < 2**31 for i in range(100))


def _first_turns(arm_dir: Path) -> dict[tuple[str, int], str]:
    [path] = log_files([arm_dir])
    log = read_eval_log(str(path))
    assert log.status == "success", log.error
    out = {}
    for sample in log.samples or []:
        first = next(m for m in sample.messages if m.role == "assistant")
        out[(str(sample.id), int(sample.epoch))] = first.text
    return out


def test_epochs_differ_and_arms_start_alike_on_the_embedded_model(tmp_path: Path) -> None:
    from harness.__main__ import main

    argv = ["compare", "--tasks", "aime24", "--model", "embedded/smollm2", "--epochs", "2", "--limit", "1"]
    argv += ["--data", "fixture", "--sandbox", "local", "--temperature", "1.0", "--max-tokens", "24"]
    argv += ["-T", "max_turns=1", "-M", "max_batch=1", "--display", "none", "--bootstrap", "100"]
    argv += ["--run", "seeds", "--runs-dir", str(tmp_path / "runs"), "--out-dir", str(tmp_path / "out")]
    assert main(argv) == 0
    arms = {arm: _first_turns(tmp_path / "runs" / "seeds" / "aime24" / f"saar-{arm}") for arm in ("off", "on")}
    for arm, turns in arms.items():
        assert len(turns) == 2, turns
        (_, first), (_, second) = sorted(turns.items())
        assert first != second, f"SAAR {arm}: both epochs sampled the same text: {first!r}"
    assert arms["off"] == arms["on"]  # common random numbers: each (sample, epoch) starts identically
