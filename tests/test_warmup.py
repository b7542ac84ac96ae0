"""The warm-up SFT: demonstrations made by the rollout core and the real sandbox, loss masks, the shared-prefix loss."""

from __future__ import annotations

import random

import pytest
from tiny_models import tiny_lora_model

from harness.benchmarks.generators import generate
from harness.core import protocol
from harness.core.toolenv import PROJECT
from trainers.warmup.demonstrations import build_demonstrations, error_summary
from trainers.warmup.sft import Example, _batch_loss, epoch_batches, trained_tokens


def test_shared_prefix_loss_equals_the_plain_loss_and_its_gradients():
    """Running the batch's common prefix once and repeating its keys/values changes nothing but the cost."""
    import torch

    model = tiny_lora_model()
    rng = random.Random(1)
    prefix = [rng.randrange(1, 64) for _ in range(9)]
    batch = []
    for n in (5, 11, 8):
        ids = prefix + [rng.randrange(1, 64) for _ in range(n)]
        labels = [-100] * (len(prefix) + 2) + ids[len(prefix) + 2 :]
        batch.append(Example(ids, labels))

    loss = _batch_loss(model, batch, pad_id=0) / sum(trained_tokens(ex) for ex in batch)  # summed token losses
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()

    total, count = 0.0, 0
    for ex in batch:  # one row at a time, no cache, no padding: the reference
        logits = model(input_ids=torch.tensor([ex.ids])).logits[0, :-1]
        target = torch.tensor(ex.labels[1:])
        keep = target != -100
        total = total + torch.nn.functional.cross_entropy(logits[keep], target[keep], reduction="sum")
        count += int(keep.sum())
    reference = total / count
    reference.backward()

    assert float(loss) == pytest.approx(float(reference), rel=1e-5)
    assert grads, "no LoRA parameter received a gradient"
    for name, p in model.named_parameters():
        if name in grads:
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-4, atol=1e-6)


def test_epoch_batches_cover_every_row_once_and_never_mix_groups():
    groups = [i % 3 == 0 for i in range(50)]
    lengths = [random.Random(i).randrange(100) for i in range(50)]
    batches = epoch_batches(groups, lengths, 8, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(50))
    assert all(len({groups[i] for i in b}) == 1 for b in batches)
    assert batches == epoch_batches(groups, lengths, 8, random.Random(0))  # seeded


def test_error_summary_of_a_malformed_call_does_not_quote_the_example_call():
    """The fixing turn quotes the error; quoting the protocol's example call would make the example the call."""
    message = protocol.format_call_error("the tool call is not valid JSON (Expecting ',' delimiter)", env=PROJECT)
    summary = error_summary(message)
    assert protocol.CALL_OPEN not in summary
    assert "not valid JSON" in summary
    traceback = "Error:\nTraceback (most recent call last):\n  File ...\nNameError: name 'math' is not defined"
    assert error_summary(traceback) == "NameError: name 'math' is not defined"


@pytest.mark.slow
async def test_demonstrations_show_real_errors_and_train_only_on_the_fix():
    """Every failing demonstration's error comes from the real sandbox/protocol; the failed turn is not trained."""
    problems = generate(10, seed=7, prefix="t")
    demos = await build_demonstrations(problems, fail_share=1.0, seed=3)
    assert len(demos) == len(problems)
    kinds = set()
    for demo in demos:
        tools = [m for m in demo.messages if m.role == "tool"]
        assistants = [m for m in demo.messages if m.role == "assistant"]
        assert demo.bug is not None
        assert tools[0].meta["ok"] is False and tools[-1].meta["ok"] is True
        kinds.add(tools[0].meta["error_kind"])
        assert demo.trained_turns == list(range(1, len(assistants)))  # the failed first turn is masked
        assert "\\boxed{" in assistants[-1].text or "```python" in assistants[-1].text
    assert len(kinds) >= 2, kinds  # several real error kinds, not one canned message
    again = await build_demonstrations(problems, fail_share=1.0, seed=3)
    assert [[m.text for m in d.messages] for d in again] == [[m.text for m in d.messages] for d in demos]


def test_warm_model_spec_without_its_adapter_names_the_rebuild_command(tmp_path, monkeypatch):
    import harness.engines.models as models

    monkeypatch.setattr(models, "ADAPTERS_DIR", tmp_path / "missing")
    with pytest.raises(models.ModelNotFoundError, match="python -m trainers warmup"):
        models.resolve_spec("smollm2-tools-sft")
    with pytest.raises(models.ModelNotFoundError, match="smollm2-tools/model.json"):
        models.resolve_spec("smollm2-tools")


def test_the_committed_adapter_is_small_and_says_how_it_was_built():
    import json

    from harness.engines.models import ADAPTERS_DIR, TOOLS_SFT_NAME, resolve_spec

    sft = ADAPTERS_DIR / TOOLS_SFT_NAME
    assert resolve_spec("smollm2-tools-sft") == ("adapter", sft)
    weights = sft / "adapter_model.safetensors"
    assert weights.stat().st_size <= 16 * 2**20
    manifest = json.loads((sft / "warmup.json").read_text())
    assert manifest["rebuild"].startswith("python -m trainers warmup")
    assert manifest["failed_call_demonstrations"], "the warm model must have seen failed calls and their fixes"


def test_the_sfts_manifest_records_the_host_its_arithmetic_ran_on(tmp_path):
    """The committed SFT's bits came from an environment its manifest named only by three library versions, and no
    rebuild here gives them back (results/warmup/float32/rebuild-faster/): a new SFT records what a round records."""
    import json

    from trainers.warmup.artifacts import host, save_adapter
    from trainers.warmup.config import WarmupConfig

    out = save_adapter(
        tiny_lora_model(), WarmupConfig(out=str(tmp_path / "sft")), [], [1.0, 0.5], data_s=1.0, train_s=2.0,
        train_cpu_s=2.0,
    )  # fmt: skip
    manifest = json.loads((out / "warmup.json").read_text())
    assert manifest["host"] == host()
    assert manifest["host"]["packages"]["transformers"] and manifest["host"]["cpu_features"]
    assert (out / "adapter_model.safetensors").stat().st_size > 0


@pytest.mark.slow
def test_warm_model_loads_as_the_base_model_plus_the_adapter():
    import torch

    from harness.engines.models import load_model

    base, _ = load_model("smollm2")
    warm, tokenizer = load_model("smollm2-tools")
    assert type(warm) is type(base)  # merged: a plain model again, no peft wrapper
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(base.state_dict()[name], warm.state_dict()[name])
    assert torch.equal(base.state_dict()["model.norm.weight"], warm.state_dict()["model.norm.weight"])
    assert tokenizer.pad_token is not None


def test_warmup_measure_runs_the_fixtures_its_registry_entries_name_in_any_order(tmp_path, monkeypatch):
    """The measured fixtures are the registry's warm-measure entries: a benchmark registered later is measured only
    when its entry says so (the committed warm-model figures stay what their command reproduces), and the held-out
    problems run through the task of their file's schema whatever the registry's order."""
    from dataclasses import replace

    from harness.benchmarks import registry
    from trainers.warmup.measure import sources

    def fixtures(found):
        return [task for _, task, data in found if data == "fixture"]

    before = fixtures(sources(tmp_path, heldout_math=0, heldout_code=0, seed=7, fixtures=True))
    assert before == ["aime24", "aime25", "gpqa", "livecodebench"]
    monkeypatch.setitem(
        registry.BENCHMARKS, "aime26", replace(registry.BENCHMARKS["aime25"], name="aime26", warm_measure=False)
    )
    assert fixtures(sources(tmp_path, heldout_math=0, heldout_code=0, seed=7, fixtures=True)) == before
    monkeypatch.setitem(registry.BENCHMARKS, "aime26", replace(registry.BENCHMARKS["aime25"], name="aime26"))
    assert fixtures(sources(tmp_path, heldout_math=0, heldout_code=0, seed=7, fixtures=True)) == [*before, "aime26"]
    reordered = dict(reversed(list(registry.BENCHMARKS.items())))  # aime26, a math benchmark, registered first
    monkeypatch.setattr(registry, "BENCHMARKS", reordered)
    found = sources(tmp_path, heldout_math=2, heldout_code=2, seed=7, fixtures=False)
    by_name = {name: task for name, task, _ in found}
    assert by_name == {"held-out math": "aime24", "held-out stdin": "livecodebench"}
