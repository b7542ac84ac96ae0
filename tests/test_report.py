"""The ablation report on fixed eval logs: numbers in the tables, the paired tests, valid PNG plots."""

from __future__ import annotations

import json
import math
from pathlib import Path

import ablation_logs as logs
import pytest

from harness.__main__ import main
from harness.reports.compare import CompareError, read_arms, task_file, task_name
from harness.reports.plots import PLOTS
from harness.reports.report import write_report
from harness.reports.stats import mcnemar_exact, paired_test, pass_at_k, summarize

T, E = logs.trajectory, logs.event


def _both_epochs(sid: str, accs: tuple[float, float], traj: dict) -> list[tuple]:
    return [(sid, 1, accs[0], traj), (sid, 2, accs[1], traj)]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """aime24 with 4 problems x 2 epochs per arm, gpqa with 8 problems x 1 epoch per arm."""
    d = tmp_path / "logs"
    d.mkdir()
    off = [
        *_both_epochs("s1", (1, 1), T(calls=2, failures=1, kept=1, tokens=100, error_kinds={"NameError": 1})),
        *_both_epochs("s2", (0, 1), T(calls=1, tokens=200)),
        *_both_epochs("s3", (0, 0), T(calls=2, failures=2, kept=2, tokens=300, error_kinds={"SyntaxError": 2})),
        *_both_epochs("s4", (0, 0), T(tokens=400)),
    ]
    on = [
        *_both_epochs(
            "s1",
            (1, 1),
            T(
                calls=3,
                failures=1,
                tokens=120,
                saar_on=True,
                error_kinds={"NameError": 1},
                events=[E("shallow", "NameError", ok=True)],
            ),
        ),
        *_both_epochs("s2", (1, 1), T(calls=1, tokens=200, saar_on=True)),
        *_both_epochs(
            "s3",
            (1, 0),
            T(
                calls=3,
                failures=2,
                tokens=350,
                saar_on=True,
                error_kinds={"SyntaxError": 2},
                events=[E("deep", "SyntaxError", similarity=1.0), E("shallow", "SyntaxError", ok=True, retry=2)],
            ),
        ),
        *_both_epochs("s4", (0, 0), T(tokens=400, saar_on=True)),
    ]
    logs.make_log(d, "aime24", False, off, epochs=2)
    logs.make_log(d, "aime24", True, on, epochs=2, seconds=30)
    g_off = [0, 0, 0, 0, 0, 0, 1, 1]
    g_on = [1, 1, 1, 1, 1, 1, 1, 0]
    logs.make_log(d, "gpqa", False, [(f"g{i}", 1, float(a), T()) for i, a in enumerate(g_off)])
    logs.make_log(d, "gpqa", True, [(f"g{i}", 1, float(a), T(saar_on=True)) for i, a in enumerate(g_on)])
    return d


def test_pass_at_k_and_mcnemar_known_values():
    assert pass_at_k(2, 1, 1) == 0.5
    assert pass_at_k(2, 1, 2) == 1.0
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(6, 0) == pytest.approx(2 / 64)
    assert mcnemar_exact(6, 1) == pytest.approx(2 * 8 / 128)
    with pytest.raises(ValueError, match="pass@k"):
        pass_at_k(2, 3, 1)


def test_summary_metrics_of_fixed_logs(log_dir: Path):
    arms, notes = read_arms([log_dir])
    assert notes == []
    by = {(a.task, a.arm): a for a in arms}
    off, on = summarize(by[("aime24", "off")]), summarize(by[("aime24", "on")])
    sd = math.sqrt(0.6875 / 3 / 4)  # per-sample pass@1 [1, .5, 0, 0] and [1, 1, .5, 0] share this spread
    assert off["samples"] == 4 and off["epochs"] == 2
    assert off["accuracy"] == pytest.approx(0.375) and off["accuracy_stderr"] == pytest.approx(sd)
    assert on["accuracy"] == pytest.approx(0.625) and on["accuracy_stderr"] == pytest.approx(sd)
    assert off["pass_at_k"] == pytest.approx(0.5) and on["pass_at_k"] == pytest.approx(0.75)
    assert (off["tool_calls"], off["tool_failures"], off["failures_kept"]) == (10, 6, 6)
    assert off["tool_failure_rate_pooled"] == pytest.approx(0.6)
    assert (on["tool_calls"], on["tool_failures"], on["failures_kept"]) == (14, 6, 0)
    assert on["tool_failure_rate_pooled"] == pytest.approx(6 / 14)
    assert (on["saar_shallow"], on["saar_deep"], on["saar_purified"]) == (4, 2, 4)
    assert off["saar_shallow"] == off["saar_deep"] == 0
    assert on["errors.SyntaxError"] == 4 and on["errors.NameError"] == 2
    assert off["tokens_mean"] == pytest.approx(250.0) and on["tokens_mean"] == pytest.approx(267.5)
    assert on["saar_on_rate"] == 1.0 and off["saar_on_rate"] == 0.0
    assert on["wall_time"] == pytest.approx(30.0)


def test_paired_tests(log_dir: Path):
    arms, _ = read_arms([log_dir])
    by = {(a.task, a.arm): a for a in arms}
    boot = paired_test(by[("aime24", "off")], by[("aime24", "on")], n_boot=2000)
    assert boot.method == "bootstrap" and boot.pairs == 4
    assert boot.diff == pytest.approx(0.25)
    assert (boot.ci_low, boot.ci_high) == (pytest.approx(0.0), pytest.approx(0.5))
    assert 0.0 < boot.p_value < 1.0
    mc = paired_test(by[("gpqa", "off")], by[("gpqa", "on")])
    assert mc.method == "mcnemar" and mc.discordant == (6, 1)
    assert mc.p_value == pytest.approx(0.125)
    assert mc.diff == pytest.approx(5 / 8)
    same = paired_test(by[("gpqa", "off")], by[("gpqa", "off")])
    assert same.p_value == 1.0 and same.p_bootstrap == 1.0


def test_report_tables_and_plots(log_dir: Path, tmp_path: Path):
    arms, _ = read_arms([log_dir])
    report = write_report(arms, tmp_path / "out", n_boot=2000)
    text = report.read_text()
    assert (
        "| aime24 | off | replay/test.yaml | 4 x 2 | 0.375 ± 0.239 | 0.500 (k=2) | 10 | 0.375 | 0.600 | 6 "
        "| 0 | 0 | 0 | 0 | 250.0 | 2.00 | 12.0 | success |"
    ) in text
    assert (
        "| aime24 | on | replay/test.yaml | 4 x 2 | 0.625 ± 0.239 | 0.750 (k=2) | 14 | 0.250 | 0.429 | 0 "
        "| 4 | 2 | 4 | 0 | 267.5 | 2.00 | 30.0 | success |"
    ) in text
    assert "| gpqa | 8 | 0.250 | 0.875 | +0.625 |" in text
    assert "McNemar exact (b=6, c=1) | 0.1250 |" in text
    assert "| aime24 | 4 | 0.375 | 0.625 | +0.250 | [+0.000, +0.500] | paired bootstrap |" in text
    assert "| aime24 | on | SyntaxError | 4 | 2 | 2 | 2 | 2 | 0 | 0 |" in text  # the deep regeneration repeated
    assert "| aime24 | on | NameError | 2 | 2 | 0 | 0 | 2 | 0 | 0 |" in text
    assert "| aime24 | off | NameError | 2 | 0 | 0 | 0 | 0 | 0 | 0 |" in text
    for name in PLOTS:
        data = (report.parent / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name
        import matplotlib.image

        image = matplotlib.image.imread(report.parent / name)
        assert image.shape[0] > 100 and image.shape[1] > 100 and image.std() > 0  # decodes, and is not blank
        assert f"]({name})" in text
    summary = json.loads((report.parent / "summary.json").read_text())
    assert {(a["task"], a["arm"]) for a in summary["arms"]} == {
        ("aime24", "off"),
        ("aime24", "on"),
        ("gpqa", "off"),
        ("gpqa", "on"),
    }


def test_unpaired_errored_and_failed_logs_are_noted(tmp_path: Path):
    d = tmp_path / "logs"
    d.mkdir()
    logs.make_log(d, "aime25", True, [("a", 1, 1.0, T())], errored=[("b", 1)], status="error")
    arms, _ = read_arms([d])
    assert arms[0].errored == ["b#1"] and arms[0].status == "error"
    text = write_report(arms, tmp_path / "out").read_text()
    assert "aime25 / SAAR on: log status error" in text
    assert "has only the SAAR on arm: no paired test" in text


def test_duplicate_logs_keep_the_successful_one_and_say_so(tmp_path: Path):
    d = tmp_path / "logs"
    d.mkdir()
    logs.make_log(d, "aime24", False, [("a", 1, 0.0, T())], status="error")
    good = logs.make_log(d, "aime24", False, [("a", 1, 1.0, T())])
    arms, notes = read_arms([d])
    assert len(arms) == 1 and arms[0].location.endswith(good.name)
    assert len(notes) == 1 and "ignored" in notes[0] and "status error" in notes[0]


def test_bad_inputs_are_named(tmp_path: Path):
    with pytest.raises(CompareError, match="does not exist"):
        read_arms([tmp_path / "nope"])
    with pytest.raises(CompareError, match="no eval logs"):
        read_arms([tmp_path])
    with pytest.raises(CompareError, match="unknown task 'aime99'"):
        task_file("aime99")
    assert task_name("tasks/aime24.py@aime24") == "aime24" and task_name("gpqa") == "gpqa"


def test_cli_compare_from_logs(log_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    rc = main(
        ["compare", "--from-logs", str(log_dir), "--run", "r1", "--out-dir", str(tmp_path / "ab"), "--bootstrap", "500"]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert (tmp_path / "ab" / "r1" / "report.md").is_file()
    assert "aime24 SAAR off" in out and "0.625 ± 0.239" in out and "SAAR shallow/deep" in out
    assert main(["compare", "--tasks", "aime24"]) == 2  # neither --model nor --from-logs


def test_real_comparison_with_the_replay_model_resumes_without_rerunning(tmp_path: Path):
    """Both arms of aime25 through eval_set; the same command again finds them finished and only reports."""
    argv = [
        "compare",
        "--tasks",
        "aime25",
        "--model",
        "replay/{task}.yaml",
        "--data",
        "fixture",
        "--sandbox",
        "local",
        "--run",
        "r",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--out-dir",
        str(tmp_path / "ab"),
        "--display",
        "none",
    ]
    assert main(argv) == 0
    first = sorted(p.name for p in (tmp_path / "runs").rglob("*.eval"))
    assert len(first) == 2
    arms, _ = read_arms([tmp_path / "runs"])
    assert {(a.task, a.arm, a.model) for a in arms} == {
        ("aime25", "off", "replay/aime25.yaml"),
        ("aime25", "on", "replay/aime25.yaml"),
    }
    on = next(a for a in arms if a.arm == "on")
    assert all(r.saar_on for r in on.samples) and not any(r.saar_on for a in arms if a.arm == "off" for r in a.samples)
    assert main(argv) == 0
    assert sorted(p.name for p in (tmp_path / "runs").rglob("*.eval")) == first
    text = (tmp_path / "ab" / "r" / "report.md").read_text()
    assert "| aime25 | off | replay/aime25.yaml | 3 x 1 |" in text and "| aime25 | 3 |" in text


def test_the_committed_purification_logs_read_as_their_readme_says(tmp_path: Path):
    """results/purification/README.md quotes these figures; a change in how logs are read must not move them."""
    root = Path(__file__).resolve().parent.parent / "results" / "purification"
    arms, _ = read_arms([root / "top-p-1.0-seed2001" / "logs"])
    on = next(a for a in arms if a.arm == "on")
    regenerated = [e for r in on.samples for e in r.events if e["action"] in ("shallow", "deep")]
    assert (len(regenerated), sum(e["ok"] for e in regenerated)) == (25, 2)
    test = paired_test(next(a for a in arms if a.arm == "off"), on, n_boot=200, seed=0)
    assert (test.method, test.off, test.on) == ("mcnemar", pytest.approx(5 / 24), pytest.approx(7 / 24))
    text = write_report(arms, tmp_path).read_text()
    assert "| demo-2001-0010-modular | 1 | 0 | TypeError | shallow | 0.67 | `print(divmod(65, 7)**359) % 7` " in text


def test_the_verdict_says_plainly_whether_the_difference_is_significant() -> None:
    from harness.reports.report import verdict
    from harness.reports.stats import PairedTest

    noise = PairedTest("aime24", 100, 0.39, 0.41, 0.02, -0.03, 0.07, "bootstrap", 0.43, 0.43)
    assert verdict(noise).startswith("aime24: NOT significant at the 5% level")
    real = PairedTest("aime24", 100, 0.30, 0.45, 0.15, 0.06, 0.24, "mcnemar", 0.002, 0.003, (18, 3))
    assert "significant at the 5% level: SAAR on is better by 0.150" in verdict(real)
    worse = PairedTest("aime24", 100, 0.45, 0.30, -0.15, -0.24, -0.06, "mcnemar", 0.002, 0.003, (3, 18))
    assert "SAAR off is better" in verdict(worse)
