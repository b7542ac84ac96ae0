"""The first-run GPU smoke command: its dry run validates every command it would run, on CPU.

The stages themselves need a GPU (SGLang, vLLM, DeepSpeed) and have not been run by this project.
What is tested here is everything a CPU can check: the commands are built, Inspect's CLI and the
task accept their options, Inspect resolves the model to its SGLang provider, OpenRLHF's real
parser and post-parse checks accept the training flags, the executor loads as OpenRLHF loads it,
and a run reports PASS/FAIL per stage from real exit codes and real Inspect logs.
"""

from __future__ import annotations

import json
import sys

import pytest
from ablation_logs import make_log, trajectory
from needs import import_or_skip

import_or_skip("openrlhf")

from trainers.core.recipes import RecipeError, openrlhf_checks  # noqa: E402
from trainers.openrlhf_plugin import gpu_smoke  # noqa: E402


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return gpu_smoke.plan(run_dir=tmp_path_factory.mktemp("smoke"))


def test_dry_run_validates_every_command_and_runs_nothing(tmp_path, capsys):
    assert gpu_smoke.main(["--dry-run", "--run-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in ("eval-saar-off", "eval-saar-on", "train"):
        assert f"ok  {name}:" in out
    assert "sglang/Qwen/Qwen2.5-0.5B-Instruct" in out and "-T saar=true" in out and "-T saar=false" in out
    assert "--rollout.max_new_tokens 1024" in out and f"--train.agent_func_path {gpu_smoke.EXECUTOR_PATH}" in out
    assert json.loads(out.strip().splitlines()[-1])["dry_run"] == "ok"
    rows = [json.loads(line) for line in (tmp_path / "prompts.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(set(r) == {"prompt", "label"} for r in rows)  # two steps of two prompts
    assert not (tmp_path / "train.log").exists() and not (tmp_path / "eval-saar-on").exists()


def test_training_stage_is_two_steps_on_one_gpu(smoke):
    flags = smoke.recipe.openrlhf
    assert flags["actor.num_gpus_per_node"] == 1 and flags["vllm.num_engines"] == 1
    n_prompts = len((smoke.run_dir / "prompts.jsonl").read_text().splitlines())
    assert n_prompts // flags["rollout.batch_size"] * flags["train.num_episodes"] == 2
    train = smoke.stages[-1]
    assert train.argv[1:3] == ["-m", "openrlhf.cli.train_ppo_ray"]
    agent = json.loads(train.env["CLEANER_AGENT_CONFIG"])
    assert agent["max_new_tokens"] == flags["rollout.max_new_tokens"] and agent["saar"]["enabled"]


def test_a_task_argument_the_task_does_not_take_is_caught(smoke):
    argv = [*smoke.stages[0].argv, "-T", "saar_probability=0.5"]
    with pytest.raises(ValueError, match="saar_probability"):
        gpu_smoke.check_task_args(argv)


def test_an_option_inspect_does_not_have_is_caught(smoke):
    with pytest.raises(ValueError, match="--max-token-count"):
        gpu_smoke.check_inspect_cli([*smoke.stages[0].argv, "--max-token-count", "5"])


def test_model_resolves_to_inspects_sglang_provider_without_a_server(smoke):
    assert gpu_smoke.check_model_resolution(smoke.stages[0].argv) == "SGLangAPI"
    with pytest.raises(ValueError, match="not Inspect's SGLang provider"):
        gpu_smoke.check_model_resolution(["--model", "mockllm/model"])


def test_openrlhf_post_parse_checks_run_on_cpu():
    argv = ["--actor.model_name_or_path", "m", "--algo.advantage.estimator", "group_norm"]
    with pytest.raises(RecipeError, match="n_samples_per_prompt > 1"):  # OpenRLHF's own assertion
        openrlhf_checks([*argv, "--rollout.n_samples_per_prompt", "1"], "r.yaml")
    assert openrlhf_checks([*argv, "--rollout.n_samples_per_prompt", "2"], "r.yaml") == []


def test_a_stage_reports_pass_or_fail_from_its_exit_code_and_inspect_log(tmp_path):
    fail = gpu_smoke.Stage(
        "x", [sys.executable, "-c", "print('boom'); raise SystemExit(3)"], tmp_path / "x.log", "train"
    )
    assert gpu_smoke.run_stage(fail) == (False, "exit code 3")
    assert "boom" in (tmp_path / "x.log").read_text()
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    ok = gpu_smoke.Stage("e", [sys.executable, "-c", "pass"], tmp_path / "e.log", "eval", eval_dir=eval_dir)
    assert gpu_smoke.run_stage(ok)[0] is False  # exit 0 but no Inspect log: not a pass
    make_log(eval_dir, "aime24", True, [("1", 1, 1.0, trajectory())], status="error")
    passed, detail = gpu_smoke.run_stage(ok)
    assert not passed and detail.startswith("error")  # `inspect eval` exits 0 on a task error; the log says so
    make_log(eval_dir, "aime24", True, [("1", 1, 1.0, trajectory())], status="success")
    assert gpu_smoke.eval_status(eval_dir)[0] is True


def test_preflight_names_what_a_gpu_run_needs(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gpu_smoke, "GPU_PACKAGES", ("json", "no_such_gpu_package"))
    assert gpu_smoke.missing_prerequisites() == ["no_such_gpu_package"]
    assert gpu_smoke.main(["--run-dir", str(tmp_path)]) == 2  # nothing runs
    assert "FAIL preflight: missing no_such_gpu_package" in capsys.readouterr().err
