"""The first-run GPU smoke command: its dry run validates every command it would run, on CPU.

The stages themselves need a GPU (SGLang, vLLM, DeepSpeed) and have not been run by this project.
What is tested here is everything a CPU can check: the commands are built, Inspect's CLI and the
task accept their options, Inspect resolves the model to its SGLang provider at the server's address,
OpenRLHF's real parser and post-parse checks accept the training flags, the executor loads as OpenRLHF
loads it, the preflight names what is missing with the command that installs it, and a run reports
PASS/FAIL/SKIP per stage from real exit codes, real Inspect logs and checkpoints, within its time limit.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from ablation_logs import make_log, trajectory
from needs import import_or_skip

import_or_skip("openrlhf")

from trainers.core.recipes import RecipeError, openrlhf_checks, openrlhf_parser  # noqa: E402
from trainers.openrlhf_plugin import gpu_checks, gpu_envs, gpu_smoke  # noqa: E402


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return gpu_smoke.plan(run_dir=tmp_path_factory.mktemp("smoke"))


def test_dry_run_validates_every_command_and_runs_nothing(tmp_path, capsys):
    assert gpu_smoke.main(["--dry-run", "--run-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in ("engine", "eval-saar-off", "eval-saar-on", "train", "resume"):
        assert f"ok  {name}:" in out
    assert "sglang/Qwen/Qwen3-4B-Instruct-2507 --model-base-url http://127.0.0.1:" in out
    assert "-T saar=true" in out and "-T saar=false" in out and "-T tool_env=reference -T sandbox=docker" in out
    assert "--rollout.max_new_tokens 1024" in out and f"--train.agent_func_path {gpu_smoke.EXECUTOR_PATH}" in out
    assert "preflight here" in out and "tox -e gpu-sglang" in out  # no GPU environments on this machine
    assert json.loads(out.strip().splitlines()[-1])["dry_run"] == "ok"
    rows = [json.loads(line) for line in (tmp_path / "prompts.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(set(r) == {"prompt", "label"} for r in rows)  # two steps of two prompts
    assert not (tmp_path / "train.log").exists() and not (tmp_path / "eval-saar-on").exists()


def test_each_stage_runs_in_its_roles_environment(smoke):
    engine, off, on, train, resume = smoke.stages
    assert engine.argv[0] == str(gpu_envs.ENGINE_SGLANG.python()) and engine.argv[1:3] == ["-m", "sglang.launch_server"]
    assert engine.argv[engine.argv.index("--host") + 1] == "127.0.0.1"  # loopback only
    assert engine.argv[engine.argv.index("--tool-call-parser") + 1] == "qwen25"
    trainer = str(gpu_envs.TRAINER.python())  # it holds Inspect's client too: evaluations run there
    assert off.argv[0] == on.argv[0] == train.argv[0] == resume.argv[0] == trainer


def test_training_is_two_steps_saved_then_resumed_in_the_4b_recipes_environment(smoke):
    flags = smoke.recipe.openrlhf
    assert flags["actor.num_gpus_per_node"] == 1 and flags["vllm.num_engines"] == 1
    n_prompts = len((smoke.run_dir / "prompts.jsonl").read_text().splitlines())
    assert n_prompts // flags["rollout.batch_size"] * flags["train.num_episodes"] == 2
    train, resume = smoke.stages[-2:]
    assert train.argv[1:3] == ["-m", "openrlhf.cli.train_ppo_ray"]
    ckpt = Path(flags["ckpt.path"])
    assert ckpt.is_absolute() and ckpt.parent == smoke.run_dir and flags["ckpt.save_steps"] == 1
    assert train.checkpoint == ckpt / "_actor" / "global_step2"  # OpenRLHF's tag for the step it saved
    assert "--ckpt.load_enable" in resume.argv and "--ckpt.load_enable" not in train.argv
    assert resume.argv[resume.argv.index("--train.num_episodes") + 1] == "2"
    assert resume.checkpoint == ckpt / "_actor" / "global_step4"  # only reached by going on from step 2
    agent = json.loads(train.env["CLEANER_AGENT_CONFIG"])
    assert agent["max_new_tokens"] == flags["rollout.max_new_tokens"] and agent["saar"]["enabled"]
    assert (agent["tool_env"], agent["sandbox"]) == ("reference", "docker")  # the 4B recipe's


def test_the_first_step_trains_at_the_recipes_learning_rate(smoke):
    """OpenRLHF warms up ceil(ratio x steps) steps from lr 0; with two steps any ratio > 0 wastes the first."""
    import torch
    from transformers import get_scheduler

    args = openrlhf_parser().parse_args(smoke.stages[-2].argv[3:])
    ratio, lr = getattr(args, "actor.lr_warmup_ratio"), getattr(args, "actor.adam.lr")
    steps = 2
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = get_scheduler(
        getattr(args, "actor.lr_scheduler"),
        optimizer,
        num_warmup_steps=math.ceil(steps * ratio),  # as openrlhf/utils/deepspeed/deepspeed.py computes it
        num_training_steps=steps,
        scheduler_specific_kwargs={"min_lr_rate": getattr(args, "actor.min_lr_ratio")},
    )
    assert scheduler.get_last_lr()[0] == pytest.approx(lr)


def test_a_task_argument_the_task_does_not_take_is_caught(smoke):
    argv = [*smoke.stages[1].argv, "-T", "saar_probability=0.5"]
    with pytest.raises(ValueError, match="saar_probability"):
        gpu_checks.check_task_args(argv)


def test_a_task_path_inspects_cli_cannot_load_is_caught(smoke):
    argv = list(smoke.stages[1].argv)
    assert argv[argv.index("eval") + 1] == "tasks/aime24.py"  # run from the project's directory
    argv[argv.index("eval") + 1] = str(gpu_checks.TASK_FILE)  # absolute: Inspect's loader globs it and fails
    with pytest.raises(ValueError, match="Inspect's CLI cannot load it"):
        gpu_checks.check_task_args(argv)


def test_an_option_inspect_does_not_have_is_caught(smoke):
    with pytest.raises(ValueError, match="--max-token-count"):
        gpu_checks.check_inspect_cli([*smoke.stages[1].argv, "--max-token-count", "5"])


def test_model_resolves_to_inspects_sglang_provider_at_the_servers_address(smoke):
    assert gpu_checks.check_model_resolution(smoke.stages[1].argv) == "SGLangAPI"
    # the address as an -M argument collides with the CLI's own base_url (TypeError from Inspect's resolve_models)
    argv = [*smoke.stages[1].argv, "-M", "base_url=http://127.0.0.1:9/v1"]
    with pytest.raises(TypeError, match="base_url"):
        gpu_checks.check_model_resolution(argv)
    with pytest.raises(ValueError, match="not Inspect's SGLang provider"):
        gpu_checks.check_model_resolution(["--model", "mockllm/model"])


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


def test_preflight_names_each_missing_environment_with_the_command_that_builds_it(tmp_path):
    problems = gpu_checks.preflight(
        (gpu_envs.ENGINE_SGLANG, gpu_envs.TRAINER),
        {"engine-sglang": tmp_path / "none" / "python", "trainer": tmp_path / "none2" / "python"},
        extra=(),
    )
    assert len(problems) == 2
    assert "engine-sglang: no environment at" in problems[0] and "tox -e gpu-sglang" in problems[0]
    assert "pip install --no-deps -r packaging/gpu/engine-sglang.txt" in problems[0]
    assert "tox -e gpu-trainer" in problems[1] and "pip install --no-deps -e ." in problems[1]


def test_an_environment_that_differs_from_its_lock_is_named_with_what_differs(tmp_path, monkeypatch):
    import yaml

    monkeypatch.setattr(gpu_envs, "LOCKS", tmp_path)
    (tmp_path / "trainer.txt").write_text(f"pyyaml=={yaml.__version__}\nno-such-package==1.0\n")
    problems = gpu_envs.check_env(gpu_envs.TRAINER, Path(sys.executable))  # this CPU environment as the trainer's
    assert any("1 packages differ from trainer.txt: no-such-package missing (locked 1.0)" in p for p in problems)
    flash = next(p for p in problems if "no flash_attn" in p)  # OpenRLHF is installed here, flash-attn is not
    assert "--no-build-isolation 'flash-attn==2.8.3'" in flash and ".tox/gpu-trainer/bin/python -m pip" in flash


def test_a_missing_prerequisite_stops_the_run_before_anything_starts(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gpu_smoke, "preflight", lambda: ["trainer: no flash_attn; pip install ..."])
    assert gpu_smoke.main(["--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "FAIL preflight: trainer: no flash_attn; pip install ..." in err and "nothing ran" in err
    assert not (tmp_path / "engine.log").exists()


def _stage(tmp_path, name, code, kind="train", **kw):
    return gpu_smoke.Stage(name, [sys.executable, "-c", code], tmp_path / f"{name}.log", kind, **kw)


def test_a_run_reports_each_stage_and_skips_what_cannot_run(tmp_path):
    smoke = gpu_smoke.SmokePlan(
        "m",
        tmp_path,
        9,
        None,
        [
            _stage(tmp_path, "engine", "raise SystemExit(3)", "engine"),
            _stage(tmp_path, "eval-saar-off", "pass", "eval", eval_dir=tmp_path),
            _stage(tmp_path, "train", "pass", checkpoint=tmp_path / "ckpt" / "global_step2"),
        ],
    )
    lines = []
    assert gpu_smoke.run(smoke, timeout=60, report=lines.append) == 1
    assert lines[0].startswith("FAIL engine (") and "exited with code 3" in lines[0]
    assert lines[1].startswith("SKIP eval-saar-off") and "the engine did not start" in lines[1]
    assert lines[2].startswith("FAIL train") and "no checkpoint" in lines[2]  # exit 0 is not enough
    assert lines[3].startswith("0/3 stages passed")


def test_the_time_limit_kills_a_stage_and_skips_the_rest(tmp_path):
    slow = _stage(tmp_path, "train", "import time; time.sleep(60)")
    smoke = gpu_smoke.SmokePlan("m", tmp_path, 9, None, [slow, _stage(tmp_path, "resume", "pass")])
    lines = []
    assert gpu_smoke.run(smoke, timeout=1.5, report=lines.append) == 1
    assert lines[0].startswith("FAIL train") and "timed out after" in lines[0]
    assert lines[1].startswith("SKIP resume") and "no time left" in lines[1]


def test_the_training_commands_are_checked_in_the_trainers_environment_when_openrlhf_is_not_here(
    smoke, monkeypatch, tmp_path
):
    monkeypatch.setattr(gpu_checks, "_openrlhf_here", lambda: False)  # as in the harness's environment
    train = smoke.stages[-2]
    args, config = train.argv[3:], train.env["CLEANER_AGENT_CONFIG"]
    # one run there, refused by OpenRLHF's parser before its checks import torch: the refusal comes back from there
    with pytest.raises(ValueError, match=r"trainer's environment .*unrecognized arguments: --rollout.no_such_flag"):
        gpu_checks.check_training([*args, "--rollout.no_such_flag", "1"], config, "r.yaml", Path(sys.executable))
    absent = gpu_checks.check_training(args, config, "r.yaml", trainer=tmp_path / "python")
    assert absent.startswith("not checked: no OpenRLHF here") and "tox -e gpu-trainer" in absent


@pytest.mark.slow  # two Inspect evaluations
def test_the_run_serves_evaluates_at_the_servers_address_and_stops_the_server(tmp_path):
    """The smoke's engine and eval stages end to end on CPU, with the project's stand-in engine (a scripted
    OpenAI-compatible server, not a model) in SGLang's place: the engine stage waits for /health, the evaluations
    reach it through Inspect's sglang/ provider at --model-base-url, and the server is stopped at the end."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = _stage(tmp_path, "engine", "", "engine")
    engine = replace(engine, argv=[sys.executable, "-m", "bench.standin", "--port", str(port)])
    stages = [engine]
    for saar in (False, True):
        name = f"eval-saar-{'on' if saar else 'off'}"
        argv = gpu_smoke.eval_argv(
            "cleaner-standin", tmp_path / name, saar, python=Path(sys.executable), port=port, limit=2, data="fixture"
        )
        argv += ["-T", "tool_env=project", "-T", "sandbox=local"]  # no tokenizer for the stand-in, no docker here
        stages.append(gpu_smoke.Stage(name, argv, tmp_path / f"{name}.log", "eval", eval_dir=tmp_path / name))
    lines = []
    assert gpu_smoke.run(gpu_smoke.SmokePlan("m", tmp_path, port, None, stages), 300, lines.append) == 0, lines
    assert lines[0].startswith("PASS engine") and f"answers on http://127.0.0.1:{port}/v1" in lines[0]
    assert lines[1].startswith("PASS eval-saar-off") and "success" in lines[1]
    assert lines[2].startswith("PASS eval-saar-on") and lines[3].startswith("3/3 stages passed")
    with pytest.raises(OSError):  # stopped
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
