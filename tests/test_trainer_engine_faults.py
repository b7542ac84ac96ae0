"""A CPU training run on vLLM's engine, whose engine dies under step 2: the step stops unscored, and ``resume``
redoes it on a new engine.

This is also the test of a run on the engine (``cpu.engine: vllm``): step 1 trains on the engine's rollouts, the
weights are synced into the engine before step 2 (the death waits for that sync), and the resumed run logs both
steps, each with its sync. Its own module, run after tests/test_trainer_engine.py: it kills engine processes,
and nothing of it should share a process state with the sync tests there.
"""

from __future__ import annotations

import json

import pytest
from engine_runs import engine_run_recipe
from needs import import_or_skip

import_or_skip("vllm")
import_or_skip("peft")
import_or_skip("trl")

from trainers.core.recipes import load_recipe  # noqa: E402
from trainers.cpu.trainer import train_cpu  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def small_kv_cache(monkeypatch):
    """1 GiB of KV cache per engine, as in tests/test_trainer_engine.py."""
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")


def _kill_engine_processes() -> int:
    """SIGKILL this process's vLLM engine-core children (as the OOM killer would); how many there were."""
    import psutil

    victims = []
    for child in psutil.Process().children(recursive=True):
        try:
            title = " ".join(child.cmdline() or [child.name()])
        except psutil.Error:  # a child that ended (a sandbox's zombie not yet reaped, or gone) is no engine
            continue
        if "EngineCore" in title:
            victims.append(child)
    for child in victims:
        child.kill()
    return len(victims)


def test_an_engine_that_dies_mid_step_stops_the_step_unscored_and_resume_redoes_it(tmp_path, monkeypatch):
    """A 2-step run whose engine dies under step 2: the step stops unscored, and --resume redoes it."""
    from trainers.core.engine_sync import EngineSampler
    from trainers.core.faults import EngineDied

    recipe_path = tmp_path / "engine-run.yaml"
    recipe_path.write_text(engine_run_recipe(steps=2))
    recipe = load_recipe(recipe_path)
    generate, killed = EngineSampler.__call__, []

    async def dying(self, context_ids, budget, seed):
        # step 2's first request (1 optimizer step synced): the engine dies under it
        if self.synced_step == 1 and not killed:
            killed.append(_kill_engine_processes())
        return await generate(self, context_ids, budget, seed)

    monkeypatch.setattr(EngineSampler, "__call__", dying)
    with pytest.raises(EngineDied, match="during step 2's rollouts.*--resume continues"):
        train_cpu(recipe, run_name="dies", out_root=tmp_path, progress=False)
    assert killed and killed[0] >= 1
    run = tmp_path / "dies"
    logged = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in logged] == [1]  # step 2 was not scored
    assert (run / "checkpoints" / "checkpoint-1").is_dir()

    monkeypatch.setattr(EngineSampler, "__call__", generate)
    train_cpu(recipe, run_name="dies", resume=True, out_root=tmp_path, progress=False)
    rows = (run / "metrics.jsonl").read_text().splitlines()
    assert rows[0] == logged[0]  # nothing already logged is lost or rewritten
    rows = [json.loads(x) for x in rows]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["sync_s"] > 0 for r in rows)  # the weights went in before each step's rollouts
    assert all("gen_batches" not in r for r in rows)
    assert all(r["trajectories"] == 2 for r in rows)  # 1 problem x 2 rollouts per step
    assert all(r["tokens_generated"] > 0 for r in rows)
    assert (run / "checkpoints" / "checkpoint-2").is_dir()
