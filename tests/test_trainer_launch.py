"""Recipes, the launcher's validation against OpenRLHF's real parser, and the training data."""

from __future__ import annotations

import json
import shlex

import pytest
from needs import import_or_skip

from trainers.__main__ import main
from trainers.core.data import DataError, bignum_items, export_openrlhf, from_label, item_from_row, load_items
from trainers.core.recipes import RECIPES, RecipeError, load_recipe

import_or_skip("openrlhf")


def _flags(cmd: str) -> dict[str, list[str]]:
    argv = shlex.split(cmd)
    argv = argv[argv.index("openrlhf.cli.train_ppo_ray") + 1 :]
    out: dict[str, list[str]] = {}
    key = None
    for tok in argv:
        if tok.startswith("--"):
            key = tok[2:]
            out[key] = []
        else:
            out[key].append(tok)
    return out


def test_4b_recipe_mirrors_the_reference(capsys):
    assert main(["launch", "--recipe", "qwen3-4b-cleaner", "--dry-run"]) == 0
    cmd = capsys.readouterr().out.strip()
    assert cmd.startswith("ray job submit")
    f = _flags(cmd)
    assert f["algo.advantage.estimator"] == ["group_norm"]
    assert f["algo.kl.init_coef"] == ["0.0"]
    assert f["actor.eps_clip_low_high"] == ["0.2", "0.28"]
    assert f["actor.adam.lr"] == ["2e-06"]
    assert f["rollout.batch_size"] == ["128"] and f["rollout.n_samples_per_prompt"] == ["16"]
    assert f["train.agent_func_path"] == ["trainers/openrlhf_plugin/executor.py"]
    assert f["algo.advantage.is_correction_level"] == ["off"]
    assert f["data.label_key"] == ["label"]
    runtime = json.loads(shlex.split(cmd)[shlex.split(cmd).index("--runtime-env-json") + 1])
    agent = json.loads(runtime["env_vars"]["CLEANER_AGENT_CONFIG"])
    assert agent["max_turns"] == 16 and agent["saar"]["prob"] == 1.0


def test_saar_with_importance_sampling_correction_is_launched(capsys):
    assert main(["launch", "--recipe", "qwen3-4b-cleaner-is", "--dry-run"]) == 0
    cmd = capsys.readouterr().out.strip()
    f = _flags(cmd)
    assert f["algo.advantage.is_correction_level"] == ["token"]
    assert f["rollout.temperature"] == ["1.0"] and f["rollout.top_p"] == ["1.0"]
    runtime = json.loads(shlex.split(cmd)[shlex.split(cmd).index("--runtime-env-json") + 1])
    assert json.loads(runtime["env_vars"]["CLEANER_AGENT_CONFIG"])["saar"]["enabled"] is True


def test_the_correction_with_saar_off_takes_any_sampling(tmp_path):
    body = "openrlhf: {algo.advantage.is_correction_level: token, rollout.temperature: 0.9}\n"
    recipe = load_recipe(_write(tmp_path, BASE + body + "executor: {saar: {enabled: false}}\n"))
    assert "token" in recipe.train_args()


def test_7b_recipe_uses_the_curriculum():
    r = load_recipe("qwen2.5-7b-cleaner")
    assert r.executor.saar.prob == 0.7
    assert _flags(r.shell())["actor.adam.lr"] == ["1e-06"]


def _write(tmp_path, text):
    """A recipe file of ``text``; SAAR on unless ``text`` has an executor section of its own (which must state it)."""
    p = tmp_path / "r.yaml"
    p.write_text(text if "executor:" in text else f"{text}\nexecutor: {{saar: {{enabled: true}}}}\n")
    return p


BASE = "name: t\nmodel: some/model\ndata: {prepared: d.jsonl}\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("openrlhf: {actor.learning_rate: 1.0e-6}", "not an OpenRLHF 0.11 train_ppo_ray flag"),
        ("openrlhf: {rollout.batch_size: many}", "must be int"),
        ("openrlhf: {algo.advantage.estimator: ppo2}", "must be one of"),
        ("openrlhf: {actor.eps_clip_low_high: 0.2}", "takes 2 values"),
        ("openrlhf: {vllm.enable_sleep: 1}", "is a switch"),
        (
            "openrlhf: {algo.advantage.is_correction_level: token, rollout.temperature: 0.9}",
            r"is_correction_level token with SAAR on needs rollout.temperature 1.0 and rollout.top_p 1.0",
        ),
        (
            "openrlhf: {algo.advantage.is_correction_level: seq, rollout.top_p: 0.95}",
            r"is_correction_level seq with SAAR on needs",
        ),
        ("trainer: {}", "unknown top-level keys"),
        ("executor: {saar: {enabled: true, prob: 3}}", "r.yaml: executor: saar prob must be in"),
        ("executor: {max_turns: 3}", r"r.yaml: executor: no 'saar' settings"),
        ("executor: {saar: {prob: 0.7}}", "r.yaml: executor: saar.enabled is not stated"),
        ("executor: {saar: {enabled: true, gama: 0.4}}", r"r.yaml: executor: unknown keys in 'saar': \['gama'\]"),
        ("executor: {max_turn: 3}", "unknown keys"),
        ("openrlhf: {train.agent_func_path: /nope/agent.py}", "does not exist"),
        ("openrlhf: {algo.kl.target: 0.01}", "placeholder"),
        ("gpu: {memory_gib: eighty}", "gpu.memory_gib must be a positive number"),
        ("gpu: {vram: 80}", r"unknown keys in 'gpu'"),
    ],
)
def test_bad_recipes_are_clear_errors(tmp_path, body, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe(_write(tmp_path, BASE + body))


def test_missing_recipe_file_is_reported(capsys):
    assert main(["launch", "--recipe", "/nope.yaml", "--dry-run"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_every_shipped_recipe_loads():
    names = sorted(p.stem for p in RECIPES.glob("*.yaml"))
    assert {"qwen3-4b-cleaner", "qwen2.5-7b-cleaner", "cpu-smoke"} <= set(names)
    for name in names:
        load_recipe(name)


def test_open_agentrl_rows_map_to_items(tmp_path):
    math = {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": "What is 2+3?"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": "5", "style": "rule"},
        "extra_info": {"index": 7},
    }
    code = {
        "data_source": "skywork_code",
        "prompt": [{"role": "user", "content": "Echo a line."}],
        "reward_model": {"ground_truth": json.dumps({"inputs": ["hi\n"], "outputs": ["hi\n"]})},
    }
    choice = {
        "data_source": "mega-science",
        "prompt": [{"role": "user", "content": "Pick:\nA) x\nB) y\nC) z\nD) w"}],
        "reward_model": {"ground_truth": "C"},
    }
    m, c, g = item_from_row(math, 0), item_from_row(code, 1), item_from_row(choice, 2)
    assert (m.id, m.kind, m.target) == ("math_dapo-7", "math", "5") and "\\boxed" in m.prompt
    assert c.kind == "code" and c.tests == [{"input": "hi\n", "output": "hi\n", "testtype": "stdin"}]
    assert g.kind == "gpqa" and g.target == "C"
    with pytest.raises(DataError, match="reward_model"):
        item_from_row({"prompt": [{"role": "user", "content": "q"}]}, 3)
    out = export_openrlhf([m, c], tmp_path / "p.jsonl")
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert from_label(rows[1]["label"]) == c and rows[0]["prompt"] == m.prompt


def test_bignum_set_is_shipped_and_exact():
    items = load_items(RECIPES.parent / "data" / "bignum.jsonl")
    assert items == bignum_items()
    mul = next(i for i in items if " * " in i.prompt and "digits" not in i.prompt)
    a, b = mul.prompt.rsplit("What is ", 1)[1].rstrip("?").split(" * ")
    assert int(mul.target) == int(a) * int(b)


def _runtime(cmd: str) -> dict:
    argv = shlex.split(cmd)
    return json.loads(argv[argv.index("--runtime-env-json") + 1])


@pytest.mark.parametrize("name", ["qwen3-4b-cleaner", "qwen2.5-7b-cleaner"])
def test_gpu_recipes_set_the_reference_lengths_and_install_the_project(name):
    from trainers.core.recipes import project_requirements

    cmd = load_recipe(name).shell()
    f = _flags(cmd)
    assert f["rollout.max_new_tokens"] == ["20480"] and f["data.max_len"] == ["23040"]  # 2560 prompt tokens
    assert "reward.overlong_buffer_len" not in f  # OpenRLHF 0.11.2 would count tool output (its #1243)
    runtime = _runtime(cmd)
    agent = json.loads(runtime["env_vars"]["CLEANER_AGENT_CONFIG"])
    assert agent["max_new_tokens"] == 20480 and agent["overlong_buffer_len"] == 4096
    assert agent["sandbox_pool"] >= 1 and agent["sandbox"] == "docker"
    assert runtime["working_dir"] == "."
    assert {".git", ".tox", "ckpt"} <= set(runtime["excludes"])
    packages = runtime["pip"]["packages"]
    assert packages == project_requirements() and any(p.startswith("inspect-ai") for p in packages)


def test_openrlhf_overlong_penalty_is_refused_with_the_reason(tmp_path):
    body = "openrlhf: {reward.overlong_buffer_len: 4096, rollout.max_new_tokens: 8192}"
    with pytest.raises(RecipeError, match="executor.overlong_buffer_len"):
        load_recipe(_write(tmp_path, BASE + body))


def test_executor_budget_comes_from_rollout_max_new_tokens(tmp_path):
    ok = BASE + "openrlhf: {rollout.max_new_tokens: 8192}\nexecutor: {saar: {enabled: true}, overlong_buffer_len: 1024}"
    assert load_recipe(_write(tmp_path, ok)).executor.max_new_tokens == 8192
    clash = BASE + "openrlhf: {rollout.max_new_tokens: 8192}\nexecutor: {saar: {enabled: true}, max_new_tokens: 4096}"
    with pytest.raises(RecipeError, match="differs from openrlhf.rollout.max_new_tokens"):
        load_recipe(_write(tmp_path, clash))
    with pytest.raises(RecipeError, match="needs max_new_tokens"):
        load_recipe(_write(tmp_path, BASE + "executor: {saar: {enabled: true}, overlong_buffer_len: 1024}"))


def test_ray_env_vars_reach_the_workers(tmp_path):
    body = "openrlhf: {train.num_episodes: 1}\nray: {env_vars: {DOCKER_HOST: 'tcp://10.0.0.5:2375'}}"
    runtime = load_recipe(_write(tmp_path, BASE + body)).runtime_env()
    assert runtime["env_vars"]["DOCKER_HOST"] == "tcp://10.0.0.5:2375" and "CLEANER_AGENT_CONFIG" in runtime["env_vars"]
    with pytest.raises(RecipeError, match="ray.pip must be a list"):
        load_recipe(_write(tmp_path, BASE + "ray: {pip: numpy}"))


def test_settings_openrlhf_refuses_after_parsing_fail_at_load(tmp_path):
    body = "openrlhf: {algo.advantage.estimator: group_norm, rollout.n_samples_per_prompt: 1}"
    with pytest.raises(RecipeError, match="OpenRLHF refuses the settings: group_norm requires n_samples_per_prompt"):
        load_recipe(_write(tmp_path, BASE + body))


GPU_RECIPES = ("qwen3-4b-cleaner", "qwen2.5-7b-cleaner")


def _over_4b(tmp_path, openrlhf: str) -> str:
    p = tmp_path / "wide.yaml"
    p.write_text(f"base: qwen3-4b-cleaner\nname: wide\nopenrlhf: {{{openrlhf}}}\n")
    return str(p)


@pytest.mark.parametrize("name", (*GPU_RECIPES, "qwen-gpu-smoke"))
def test_check_accepts_the_shipped_gpu_recipes(name, capsys):
    assert main(["launch", "--recipe", name, "--check"]) == 0
    out = capsys.readouterr().out
    assert "log-prob pass" in out and "training step" in out and "DOES NOT FIT" not in out


def test_check_refuses_four_long_sequences_per_log_prob_micro_batch_and_names_the_setting(tmp_path, capsys):
    """4 x 23040 tokens x 151936 entries: bf16 logits and OpenRLHF's float32 copy, past an 80 GB H100."""
    recipe = _over_4b(tmp_path, "rollout.micro_batch_size: 4")
    assert main(["launch", "--recipe", recipe, "--check"]) == 2
    err = capsys.readouterr().err
    assert "log-prob pass" in err and "set openrlhf.rollout.micro_batch_size to 2 or less" in err
    plan = load_recipe(recipe).memory_plan()
    logprob = plan.peaks[0]
    assert logprob.parts["logits"] == 4 * 23040 * 151936 * (2 + 4)  # ~28 GB bf16 + ~56 GB float32
    assert main(["launch", "--recipe", recipe, "--check", "--gpu-memory-gib", "141"]) == 0  # an H200's memory


def test_a_launch_checks_before_it_submits(tmp_path, monkeypatch, capsys):
    import subprocess

    calls = []
    monkeypatch.setattr(subprocess, "call", lambda cmd: calls.append(cmd) or 0)
    assert main(["launch", "--recipe", _over_4b(tmp_path, "rollout.micro_batch_size: 4")]) == 2
    assert not calls  # nothing was submitted
    assert main(["launch", "--recipe", "qwen3-4b-cleaner"]) == 0
    assert calls and calls[0][:3] == ["ray", "job", "submit"]


def test_the_training_step_that_cannot_fit_names_its_setting(tmp_path, capsys):
    recipe = _over_4b(tmp_path, "train.micro_batch_size: 4, ds.zero_stage: 1")
    assert main(["launch", "--recipe", recipe, "--check"]) == 2
    err = capsys.readouterr().err
    assert "training step" in err and "train.micro_batch_size" in err


def test_the_model_shape_gives_the_parameter_count():
    from trainers.core.memory import ModelShape

    shape = ModelShape.from_config(load_recipe("qwen3-4b-cleaner").gpu["model"], "4b")
    assert 4.0e9 < shape.parameters < 4.05e9  # Qwen3-4B: 4.02 billion
    shape = ModelShape.from_config(load_recipe("qwen2.5-7b-cleaner").gpu["model"], "7b")
    assert 7.6e9 < shape.parameters < 7.65e9  # Qwen2.5-7B: 7.62 billion (untied output layer)
    with pytest.raises(ValueError, match="lacks.*vocab_size"):
        ModelShape.from_config({"hidden_size": 8}, "x")


def test_outputs_are_absolute_outside_rays_copy_and_one_per_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the launcher runs
    paths = {}
    for name in GPU_RECIPES:
        f = _flags(load_recipe(name).shell())
        out, ckpt = f["ckpt.output_dir"][0], f["ckpt.path"][0]
        assert out == str(tmp_path / "ckpt" / name) and ckpt == str(tmp_path / "ckpt" / name / "checkpoints")
        paths[name] = (out, ckpt)
    assert len({p for pair in paths.values() for p in pair}) == 2 * len(GPU_RECIPES)
    stated = tmp_path / "r.yaml"
    stated.write_text(BASE + "executor: {saar: {enabled: true}}\nopenrlhf: {ckpt.output_dir: out, ckpt.path: /abs/c}")
    f = _flags(load_recipe(stated).shell())
    assert f["ckpt.output_dir"] == [str(tmp_path / "out")] and f["ckpt.path"] == ["/abs/c"]
