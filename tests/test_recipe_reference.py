"""The recipes named after the reference run, setting by setting against the reference's training scripts.

The reference is Open-CLEANER (verl) at commit 91e40ad: ``recipe/cleaner/qwen3_4b_cleaner.sh`` and
``recipe/cleaner/qwen2_7b_cleaner.sh``, and verl's defaults where a script sets nothing
(``verl/verl/trainer/config/optim/fsdp.yaml``, ``.../rollout/rollout.yaml``, ``verl/verl/workers/config/rollout.py``).
Each row below gives a setting as this project resolves it (OpenRLHF's own parser applied to the recipe's command,
defaults included, or the executor's configuration), the reference's value in the same terms, and where the
reference sets it. A row either matches, or says why the recipe differs: then the recipe must hold that value and
a comment saying "differs from the reference" on or right above the setting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
import yaml
from needs import import_or_skip

import_or_skip("openrlhf")

from trainers.core.recipes import RECIPES, load_recipe, openrlhf_parser  # noqa: E402

FOUR_B, SEVEN_B = "qwen3-4b-cleaner", "qwen2.5-7b-cleaner"
S4, S7 = "qwen3_4b_cleaner.sh", "qwen2_7b_cleaner.sh"
#: prompts in Open-AgentRL-30K per rollout step of 128: the steps of one epoch
STEPS = 30000 // 128


@dataclass(frozen=True)
class Row:
    setting: str  #: as :func:`resolved` names it
    reference: dict[str, Any]  #: recipe -> the reference's value, in this project's terms
    where: dict[str, str]  #: recipe -> the reference's file and line
    #: why the recipe differs (None: it matches); ``ours`` is then the recipe's value, ``comment`` what the
    #: recipe's comment is attached to when the setting is no key of the recipe
    differs: str | None = None
    ours: Any = None
    comment: str | None = None


def both(value: Any) -> dict[str, Any]:
    return {FOUR_B: value, SEVEN_B: value}


def at(line4: int | str, line7: int | str) -> dict[str, str]:
    return {FOUR_B: f"{S4}:{line4}", SEVEN_B: f"{S7}:{line7}"}


def verl(where: str) -> dict[str, str]:
    return both(where)


TABLE = [
    Row("algo.advantage.estimator", both("group_norm"), at("27 (grpo, std-normalised: ppo_trainer.yaml:84)", 26)),
    Row("algo.kl.init_coef", both(0.0), at("31-33", "30-32")),
    Row("actor.eps_clip_low_high", both([0.2, 0.28]), at("36-37", "35-36")),
    Row("actor.dual_clip", both(10.0), at(114, 118)),
    Row("actor.loss_agg_mode", both("token-mean"), at(40, 39)),
    Row("actor.adam.lr", {FOUR_B: 2e-6, SEVEN_B: 1e-6}, at(58, 58)),
    Row("actor.adam.betas", both([0.9, 0.999]), verl("optim/fsdp.yaml:27 (no script sets it)")),
    Row("actor.adam.weight_decay", both(0.01), verl("optim/fsdp.yaml:21")),
    Row("actor.lr_scheduler", both("constant_with_warmup"), verl("optim/fsdp.yaml:39 and warm-up steps below")),
    Row("warmup rollout steps", both(20), at(160, 162)),
    Row("actor.max_norm", both(1.0), at(113, 117)),
    Row("rollout.batch_size", both(128), at(60, 60)),
    Row("rollout.n_samples_per_prompt", both(16), at(62, 62)),
    Row("train.batch_size", both(32 * 16), at(61, 61)),
    Row("data.max_len", both(2560 + 20480), at("56-57", "56-57")),
    Row("rollout.max_new_tokens", both(20480), at(57, 57)),
    Row("rollout.temperature", both(1.0), verl("rollout/rollout.yaml:11")),
    Row("rollout.top_p", both(1.0), verl("rollout/rollout.yaml:17")),
    Row("algo.advantage.is_correction_level", both("off"), at("159 (176-179 commented out)", 170)),
    Row("train.num_episodes", both(1), at(161, 171)),
    Row("actor.num_nodes", both(1), at(147, 151)),
    Row("actor.num_gpus_per_node", both(4), at(70, 70)),
    Row("actor.gradient_checkpointing_enable", both(True), at(108, 112)),
    Row("ckpt.save_steps", both(10), at(148, 152)),
    Row("vllm.enable_prefix_caching", both(True), verl("rollout/rollout.yaml:74")),
    Row("executor.max_turns", both(16), at(55, 55)),
    Row("executor.saar.enabled", both(True), at(166, 165)),
    Row("executor.saar.max_retries", both(3), at(167, 166)),
    Row(
        "executor.saar.prob",
        {FOUR_B: 1.0, SEVEN_B: 0.7},
        {FOUR_B: "workers/config/rollout.py:64", SEVEN_B: f"{S7}:174"},
    ),
    Row("executor.overlong_buffer_len", both(4096), at(45, 45)),
    Row("executor.overlong_penalty_factor", both(1.0), at(46, 46)),
    Row("data.source", {FOUR_B: "Gen-Verse/Open-AgentRL-30K"}, {FOUR_B: f"{S4}:9"}),
    Row(
        "data.source",
        {SEVEN_B: "a pass-rate-filtered subset"},
        {SEVEN_B: f"{S7}:8"},
        differs="the filtered set is a local file the script names but nobody published",
        ours="Gen-Verse/Open-AgentRL-30K",
        comment="pass-rate-filtered",
    ),
    Row(
        "ds.param_dtype",
        both("fp16"),
        at("162-163", "163-164"),
        differs="OpenRLHF 0.11.2 builds vLLM in bfloat16 whatever the trainer's dtype; fp16 training would sample "
        "from a policy rounded otherwise, and without importance sampling nothing corrects the larger mismatch",
        ours="bf16",
    ),
    Row(
        "rollout.micro_batch_size",
        both(4),
        at("74, 121", "78, 125"),
        differs="OpenRLHF holds a micro-batch's logits in bf16 and float32: 4 x 23040 tokens cannot fit an H100",
        ours=1,
    ),
    Row(
        "ds.zero_stage",
        both("FSDP2, weights and optimizer offloaded"),
        at("151, 156-157", "155, 160-161"),
        differs="OpenRLHF trains with DeepSpeed; ZeRO-3 without offload fits",
        ours=3,
    ),
    Row(
        "vllm.gpu_memory_utilization",
        both(0.80),
        at(169, 172),
        differs="the reference's engine (SGLang) ran beside offloaded FSDP states; not yet measured here",
        ours=0.6,
    ),
    Row(
        "rollout engine",
        both("sglang"),
        at(122, 126),
        differs="OpenRLHF's rollout engine is vLLM",
        ours="vllm",
        comment="vllm.gpu_memory_utilization",
    ),
    Row(
        "eval.dataset",
        both("AIME 2024 and 2025 every 10 steps"),
        at("15, 150", "154"),
        differs="the harness evaluates the saved checkpoints instead",
        ours=None,
        comment="eval.dataset",
    ),
    Row(
        "prompts over 2560 tokens",
        both("dropped"),
        at(101, 105),
        differs="OpenRLHF 0.11.2 has no prompt-length filter",
        ours="kept",
        comment="prompts over 2560 tokens",
    ),
]


@cache
def resolved(name: str) -> dict[str, Any]:
    """The recipe's settings as the job gets them: OpenRLHF's parsed arguments (its defaults included), the
    executor's configuration, and what follows from them."""
    recipe = load_recipe(name)
    args = vars(openrlhf_parser().parse_args(recipe.train_args()[2:]))
    out: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v for k, v in args.items()}
    cfg = recipe.executor
    out.update(
        {
            "executor.max_turns": cfg.max_turns,
            "executor.saar.enabled": cfg.saar.enabled,
            "executor.saar.prob": cfg.saar.prob,
            "executor.saar.max_retries": cfg.saar.max_retries,
            "executor.overlong_buffer_len": cfg.overlong_buffer_len,
            "executor.overlong_penalty_factor": cfg.overlong_penalty_factor,
            "data.source": recipe.data.get("source"),
            "warmup rollout steps": round(args["actor.lr_warmup_ratio"] * STEPS),
            "rollout engine": "vllm",  # OpenRLHF's only rollout engine
            "prompts over 2560 tokens": "kept",  # OpenRLHF 0.11.2 has no prompt-length filter flag
        }
    )
    return out


def _recipe_lines(name: str) -> list[str]:
    """The recipe's text and its base recipes' texts."""
    lines, path = [], RECIPES / f"{name}.yaml"
    while True:
        text = path.read_text(encoding="utf-8")
        lines += text.splitlines()
        base = (yaml.safe_load(text) or {}).get("base")
        if not base:
            return lines
        path = RECIPES / f"{base}.yaml"


def _comment_for(lines: list[str], key: str) -> str:
    """The comment on the line that sets ``key`` and the comment lines right above it; or, for a key the
    recipe does not set, the comment block that names it."""
    for i, line in enumerate(lines):
        if re.match(rf"\s*{re.escape(key)}:", line):
            above, j = [], i - 1
            while j >= 0 and lines[j].strip().startswith("#"):
                above.insert(0, lines[j])
                j -= 1
            return " ".join([*above, line.partition("#")[2]])
    block = [i for i, line in enumerate(lines) if line.strip().startswith("#") and key in line]
    if not block:
        return ""
    i, out = block[0], []
    while i < len(lines) and lines[i].strip().startswith("#"):
        out.append(lines[i])
        i += 1
    return " ".join(out)


CASES = [(name, row) for row in TABLE for name in row.reference]


@pytest.mark.parametrize(("name", "row"), CASES, ids=[f"{n}-{r.setting}" for n, r in CASES])
def test_each_cleaner_recipe_setting_matches_the_reference_or_says_why_not(name, row):
    value = resolved(name)[row.setting]
    reference = row.reference[name]
    if row.differs is None:
        assert value == pytest.approx(reference) if isinstance(reference, float) else value == reference, (
            f"{name}: {row.setting} is {value!r}; the reference ({row.where[name]}) has {reference!r}"
        )
        return
    assert value == row.ours and value != reference
    comment = _comment_for(_recipe_lines(name), row.comment or row.setting)
    assert "differs from the reference" in comment, f"{name}: {row.setting} differs with no comment saying why"


def test_the_table_covers_both_recipes_and_cites_a_line_for_each_row():
    for name in (FOUR_B, SEVEN_B):
        rows = [r for r in TABLE if name in r.reference]
        assert len(rows) >= 35
        assert all(re.search(r":\d+", r.where[name]) for r in rows)


def test_a_difference_without_its_comment_is_caught(tmp_path, monkeypatch):
    """The check reads comments: the 4B recipe without its dtype comment fails it."""
    text = (RECIPES / f"{FOUR_B}.yaml").read_text(encoding="utf-8")
    bare = re.sub(r"(?m)^  # differs from the reference \(fp16.*\n(  #.*\n)*", "", text)
    assert bare != text
    monkeypatch.setattr(f"{__name__}.RECIPES", tmp_path)
    (tmp_path / f"{FOUR_B}.yaml").write_text(bare, encoding="utf-8")
    assert "differs from the reference" not in _comment_for(_recipe_lines(FOUR_B), "ds.param_dtype")
