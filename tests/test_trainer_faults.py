"""A sandbox that fails mid-rollout in training: the rollout reruns from its start, is never scored as the model's
failure, and past its reruns the step errors (both trainers: the OpenRLHF executor's ``run`` and the CPU trainer's
run_one). The OpenRLHF executor's ``execute`` contains any exception of one rollout, reruns spent included: it
records it, returns a loss-masked placeholder, and stops the job past its failure limit.

The failure is injected (a sandbox whose first runs come back ``sandbox_failed``, as a killed container's call
does: `tests/test_sandbox_soak.py` kills real ones); every other run goes to a real local sandbox.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from needs import import_or_skip

import_or_skip("openrlhf.utils.agent")
import_or_skip("trl")

from harness.benchmarks.problem import Problem  # noqa: E402
from harness.core.protocol import serialize_call  # noqa: E402
from harness.core.rollout import RolloutConfig  # noqa: E402
from harness.core.saar import SaarConfig  # noqa: E402
from harness.core.toolenv import PROJECT  # noqa: E402
from sandboxes.base import ExecResult, Sandbox, SandboxError  # noqa: E402
from trainers.core import _compat, data  # noqa: E402
from trainers.core.config import CpuConfig  # noqa: E402
from trainers.core.faults import RolloutsKeepFailing  # noqa: E402
from trainers.cpu.rollouts import run_one  # noqa: E402
from trainers.openrlhf_plugin.executor import AgentExecutor, ExecutorConfig  # noqa: E402

#: the CPU trainer's reward as a project recipe judges it (the final answer, strictly)
JUDGE = ExecutorConfig(saar=SaarConfig())

A, B = 12345678, 87654321
ANSWER = str(A * B)
CALL = "I will multiply with the tool.\n" + serialize_call(f"print({A} * {B})")
FINAL = f"The product is \\boxed{{{ANSWER}}}."


class _DyingSandbox(Sandbox):
    """A real local sandbox whose first ``failures`` runs come back as a killed container's do."""

    backend = "dying"

    def __init__(self, failures: int) -> None:
        from sandboxes.local.sandbox import LocalSandbox

        self.real = LocalSandbox()
        self.failures = failures
        self.runs = 0

    async def run_python(self, code, *, timeout=10.0, stdin=b"", files=None) -> ExecResult:
        self.runs += 1
        if self.runs <= self.failures:
            return ExecResult(ok=False, stderr="container killed", error_kind="SandboxDied", sandbox_failed=True)
        return await self.real.run_python(code, timeout=timeout, stdin=stdin, files=files)

    async def close(self) -> None:
        await self.real.close()


class _Backend:
    def __init__(self, failures: int) -> None:
        self.sandbox = _DyingSandbox(failures)
        self.acquired = self.released = 0

    async def acquire(self) -> Sandbox:
        self.acquired += 1
        return self.sandbox

    async def release(self, sandbox: Sandbox) -> None:
        self.released += 1


@pytest.fixture(scope="module")
def tokenizer():
    return _compat.load_tokenizer()


def _item() -> Problem:
    return Problem("mul-1", f"What is {A} * {B}? Put the answer in \\boxed{{}}.", ANSWER, "math")


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


class _Engine:
    """OpenRLHF's rollout engine's generate, scripted: CALL until the tool has printed the product, then FINAL."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.calls = tokenizer, 0

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        self.calls += 1
        text = FINAL if ANSWER in self.tokenizer.decode(prompt_token_ids) else CALL  # the tool printed it
        out = SimpleNamespace(token_ids=_ids(self.tokenizer, text), finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


async def _execute(tokenizer, failures: int, retries: int = 2):
    backend = _Backend(failures)
    executor = AgentExecutor(
        ExecutorConfig(saar=SaarConfig(enabled=True, prob=1.0), seed=0, sandbox_retries=retries), backend=backend
    )
    item = _item()
    params = SimpleNamespace(max_tokens=None, logprobs=None, temperature=1.0)
    result, traj = await executor.run(item.prompt, data.label(item), params, 4096, tokenizer, _Engine(tokenizer))
    return result, traj, backend


async def test_the_executor_reruns_a_rollout_whose_sandbox_died_and_scores_only_the_rerun(tokenizer):
    result, traj, backend = await _execute(tokenizer, failures=1)
    assert backend.sandbox.runs == 2  # the killed call, then the rerun's call
    assert result["extra_logs"]["sandbox_reruns"] == 1.0
    assert result["reward"] == 1.0  # the rerun's right answer
    assert traj.tool_failures == 0  # the kill is nowhere in what is trained on
    text = tokenizer.decode(result["observation_tokens"])
    assert "container killed" not in text and "SandboxDied" not in text
    assert text.count(CALL) == 1  # nothing of the failed attempt was kept


async def test_the_executor_raises_instead_of_scoring_when_every_attempt_dies(tokenizer):
    with pytest.raises(SandboxError, match="rollout of 'mul-1'.*3 attempt.*not scored"):
        await _execute(tokenizer, failures=10, retries=2)


class _Sampler:
    """The CPU trainer's sampler, scripted like _Engine."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.stop_token_ids = {tokenizer.eos_token_id}

    async def __call__(self, ids: list[int], budget: int, seed: int | None) -> tuple[list[int], bool]:
        text = FINAL if ANSWER in self.tokenizer.decode(ids) else CALL
        return _ids(self.tokenizer, text), False


async def test_the_cpu_trainers_rollout_reruns_after_a_sandbox_death_and_counts_it(tokenizer):
    backend = _Backend(failures=2)
    rcfg = RolloutConfig(max_turns=3, saar=SaarConfig(enabled=True, prob=1.0), tool_env=PROJECT)
    record = await run_one(
        _item(), _Sampler(tokenizer), backend, rcfg, CpuConfig(sandbox_retries=2), seed=7, judge=JUDGE
    )
    assert record.sandbox_reruns == 2
    assert record.reward == 1.0 and record.traj.tool_failures == 0
    assert backend.acquired == backend.released == 3  # every attempt gave its sandbox back
    assert tokenizer.decode(record.completion_ids).count(CALL) == 1

    with pytest.raises(SandboxError, match="not scored"):
        await run_one(
            _item(), _Sampler(tokenizer), _Backend(failures=5), rcfg, CpuConfig(sandbox_retries=1), seed=7, judge=JUDGE
        )


def test_sandbox_retries_below_zero_is_refused():
    with pytest.raises(ValueError, match="sandbox_retries"):
        ExecutorConfig(saar=SaarConfig(enabled=True), sandbox_retries=-1)
    with pytest.raises(ValueError, match="sandbox_retries"):
        CpuConfig(sandbox_retries=-1)


# --- a step that ends on sandbox faults, and --resume -------------------------------------------------------------

FAULTY = """
name: faulty
model: null
data: {source: trainers/data/bignum.jsonl, limit: 4}
executor:
  saar: {enabled: true, prob: 1.0, max_retries: 1}
  max_turns: 1
  timeout: 5.0
  sandbox: local
cpu: {steps: 3, prompts_per_step: 1, num_generations: 2, max_new_tokens: 8, max_total_tokens: 400, save_steps: 1,
      sandbox_retries: 0, step_fault_runs: 2}
"""


class _FailingBackend:
    """The real local backend, whose leases fail (as a removed container's do) after ``healthy`` of them."""

    def __init__(self, healthy: int) -> None:
        from sandboxes.local.pool import LocalBackend

        self.real, self.healthy, self.leases = LocalBackend(), healthy, 0

    async def acquire(self) -> Sandbox:
        self.leases += 1
        if self.leases > self.healthy:
            raise SandboxError("sandbox container removed from outside")
        return await self.real.acquire()

    async def release(self, sandbox: Sandbox) -> None:
        await self.real.release(sandbox)

    async def shutdown(self) -> None:
        await self.real.shutdown()


def _metrics(run) -> list[dict]:
    import json

    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_resume_samples_a_step_that_ended_on_sandbox_faults_anew_and_stops_when_it_keeps_failing(tmp_path, monkeypatch):
    """The real CPU trainer: step 2's sandbox fails past its reruns. --resume runs step 2 with other seeds (its
    metrics line says ``reseed``), never the same ones; after ``step_fault_runs`` failed runs of the step, --resume
    stops before training with what failed, how often and what to do; with the faults moved aside it continues."""
    import trainers.cpu.trainer as trainer
    from trainers.core.faults import StepKeepsFailing
    from trainers.core.recipes import load_recipe
    from trainers.cpu.resume import FAULTS, step_faults

    path = tmp_path / "faulty.yaml"
    path.write_text(FAULTY)
    recipe = load_recipe(path)
    out = tmp_path / "runs"

    def backend(healthy: int) -> None:
        monkeypatch.setattr(trainer, "get_backend", lambda name, runtime: _FailingBackend(healthy))

    backend(healthy=2)  # step 1's two rollouts, then every lease fails
    with pytest.raises(SandboxError, match="not scored"):
        trainer.train_cpu(recipe, out_root=out, run_name="r", progress=False)
    run = out / "r"
    assert [m["step"] for m in _metrics(run)] == [1] and _metrics(run)[0]["reseed"] == 0
    assert [(f.step, f.reseed) for f in step_faults(run)[2]] == [(2, 0)]
    assert "sandbox container removed from outside" in step_faults(run)[2][0].error

    backend(healthy=0)  # still broken: step 2 is sampled with its first reseed, and fails again
    with pytest.raises(SandboxError, match="not scored"):
        trainer.train_cpu(recipe, out_root=out, run_name="r", resume=True, progress=False)
    assert [(f.step, f.reseed) for f in step_faults(run)[2]] == [(2, 0), (2, 1)]

    backend(healthy=100)  # repaired, but the run does not know: two runs of step 2 failed, so --resume stops
    with pytest.raises(StepKeepsFailing, match=r"step 2 of .* in 2 runs.*removed from outside.*'local'.*move"):
        trainer.train_cpu(recipe, out_root=out, run_name="r", resume=True, progress=False)
    assert [m["step"] for m in _metrics(run)] == [1]  # nothing trained

    (run / FAULTS).rename(run / "faults.old.jsonl")  # what the message says to do once the backend is fixed
    trainer.train_cpu(recipe, out_root=out, run_name="r", resume=True, progress=False)
    assert [(m["step"], m["reseed"]) for m in _metrics(run)] == [(1, 0), (2, 0), (3, 0)]


def test_a_reseeded_step_samples_with_other_seeds_and_every_other_step_keeps_its_own(tmp_path):
    from trainers.core.recipes import load_recipe
    from trainers.cpu.resume import StepFault, record_step_fault
    from trainers.cpu.trainer import CpuTrainer

    path = tmp_path / "faulty.yaml"
    path.write_text(FAULTY)
    run = CpuTrainer(load_recipe(path), run_dir=tmp_path / "r")
    seeds = {(step, reseed): run.row_seed(step, 0, reseed) for step in (1, 2) for reseed in (0, 1, 2)}
    assert len(set(seeds.values())) == len(seeds)
    assert run.step_reseed(2) == 0
    (tmp_path / "r").mkdir()
    record_step_fault(tmp_path / "r", StepFault(2, 0, "boom"))
    assert run.step_reseed(2) == 1 and run.step_reseed(1) == run.step_reseed(3) == 0


class _FailingEngine(_Engine):
    """The scripted engine, raising on its ``fail_on``-th generation (a fault in the middle of a rollout)."""

    def __init__(self, tokenizer, fail_on: int) -> None:
        super().__init__(tokenizer)
        self.fail_on = fail_on

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        if self.calls + 1 == self.fail_on:
            raise RuntimeError("injected fault")
        return await super().generate(prompt_token_ids, sampling_params, multi_modal_data)


def _contained_executor(failures: int = 0, **config) -> AgentExecutor:
    cfg = ExecutorConfig(saar=SaarConfig(enabled=True, prob=1.0), seed=0, **config)
    return AgentExecutor(cfg, backend=_Backend(failures))


async def _execute_one(executor, tokenizer, engine, label=None):
    item = _item()
    params = SimpleNamespace(max_tokens=None, logprobs=None, temperature=1.0)
    label = data.label(item) if label is None else label
    return await executor.execute(item.prompt, label, params, 4096, tokenizer, engine)


@pytest.mark.parametrize(
    ("case", "kind"),
    [("engine", "RuntimeError"), ("label", "DataError"), ("sandbox", "SandboxError")],
)
async def test_a_rollout_that_raises_is_recorded_and_replaced_by_a_loss_masked_placeholder(tokenizer, case, kind):
    executor = _contained_executor(failures=10 if case == "sandbox" else 0)
    good = await _execute_one(_contained_executor(), tokenizer, _Engine(tokenizer))
    engine = _FailingEngine(tokenizer, fail_on=2) if case == "engine" else _Engine(tokenizer)
    failed = await _execute_one(executor, tokenizer, engine, label="not json" if case == "label" else None)
    assert executor.ledger.kinds == {kind: 1}
    assert "mul-1" in executor.ledger.last.sample or case == "label"
    assert failed["action_ranges"] == [] and len(failed["observation_tokens"]) >= 2  # no loss falls on it
    assert failed["reward"] == 0.0 and failed["scores"] == 0.0 and failed["rollout_log_probs"] is None
    # OpenRLHF merges every sample's extra_logs key by key: the placeholder has the same keys
    assert set(failed["extra_logs"]) == set(good["extra_logs"])
    assert failed["extra_logs"]["rollout_failed"] == 1.0 and good["extra_logs"]["rollout_failed"] == 0.0
    assert set(failed) == set(good)


async def test_the_job_stops_when_too_many_recent_rollouts_failed(tokenizer):
    executor = _contained_executor(failed_rollout_limit=0.5, failed_rollout_window=4)
    await _execute_one(executor, tokenizer, _Engine(tokenizer))
    await _execute_one(executor, tokenizer, _FailingEngine(tokenizer, fail_on=1))
    await _execute_one(executor, tokenizer, _Engine(tokenizer))
    await _execute_one(executor, tokenizer, _FailingEngine(tokenizer, fail_on=1))  # 2 of 4: at the limit
    with pytest.raises(RolloutsKeepFailing, match=r"3 of the last 4 rollouts failed.*RuntimeError.*injected fault"):
        await _execute_one(executor, tokenizer, _FailingEngine(tokenizer, fail_on=1))


async def test_settings_of_the_job_are_not_contained(tokenizer):
    executor = _contained_executor()
    # rollout log-probs with SAAR on need plain sampling (trainers.core.rescore): a setting of the job
    params = SimpleNamespace(max_tokens=None, logprobs=1, temperature=0.9)
    with pytest.raises(ValueError, match="temperature 1.0"):
        await executor.execute("p", data.label(_item()), params, 4096, tokenizer, _Engine(tokenizer))
    assert not executor.ledger.kinds


@pytest.mark.parametrize(("key", "value"), [("failed_rollout_limit", 1.0), ("failed_rollout_window", 0)])
def test_failure_limits_out_of_range_are_refused(key, value):
    with pytest.raises(ValueError, match=key):
        ExecutorConfig(saar=SaarConfig(enabled=True), **{key: value})


class _ReferenceSampler(_Sampler):
    """The CPU trainer's sampler under the ``reference`` tool environment: it calls Open-CLEANER's tool until the
    tool has printed the product; it records each context and the budget it was given."""

    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer)
        self.contexts: list[str] = []
        self.budgets: list[int] = []

    async def __call__(self, ids: list[int], budget: int, seed: int | None) -> tuple[list[int], bool]:
        context = self.tokenizer.decode(ids)
        self.contexts.append(context)
        self.budgets.append(budget)
        call = "I will multiply with the tool.\n" + serialize_call(f"print({A} * {B})", "code_interpreter")
        return _ids(self.tokenizer, FINAL if f"stdout: {ANSWER}" in context else call), False


async def test_a_reference_recipe_runs_the_reference_environment_on_the_cpu_trainer(tokenizer):
    """A recipe's ``tool_env: reference`` reaches every part of the CPU trainer's rollout, as on the other paths:
    the prompt shows the reference's tool, its calls run and are framed as the reference's, the response
    budget counts tool output (each generation gets what is left), and the reward reads the whole response."""
    judge = ExecutorConfig(
        saar=SaarConfig(enabled=True, prob=1.0), tool_env="reference", reward_on_response=True, max_new_tokens=3000
    )
    sampler = _ReferenceSampler(tokenizer)
    record = await run_one(
        _item(), sampler, _Backend(failures=0), judge.rollout_config(), CpuConfig(max_total_tokens=4096), 7, judge=judge
    )
    first = sampler.contexts[0]
    assert "`code_interpreter`" in first and "`python`" not in first  # the reference's tool, not the project's
    traj = record.traj
    tool = [m for m in traj.messages if m.role == "tool"]
    assert [m.content for m in tool] == [f"Tool call success\nstdout: {ANSWER}\n"]
    assert traj.stop_reason == "answer" and record.reward == 1.0
    assert traj.response_tokens > 0 and sampler.budgets[1] < sampler.budgets[0] <= 3000
