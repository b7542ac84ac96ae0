"""Building blocks of the four benchmark tasks (``tasks/*.py`` are thin wrappers over these)."""

from __future__ import annotations

from collections.abc import Sequence

from inspect_ai import Epochs, Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import Scorer
from inspect_ai.util import SandboxEnvironmentSpec

from harness.datasets import Problem
from harness.evals.solver import saar_agent
from harness.rollout import RolloutConfig
from harness.saar import SaarConfig
from sandboxes.inspect_provider import CleanerSandboxConfig

#: Sampling of the reference evaluation (CLEANER): temperature 1.0, top_p 0.6.
REFERENCE_SAMPLING = GenerateConfig(temperature=1.0, top_p=0.6)


#: Problem fields kept out of sample metadata (and so out of logs): the scorer holds them.
HEAVY_FIELDS = ("public_test_cases", "private_test_cases")


def to_samples(problems: Sequence[Problem]) -> MemoryDataset:
    samples = []
    for p in problems:
        metadata = {k: v for k, v in p.metadata.items() if k not in HEAVY_FIELDS}
        samples.append(Sample(id=p.id, input=p.prompt, target=p.target, metadata={"kind": p.kind, **metadata}))
    return MemoryDataset(samples)


def sandbox_spec(backend: str) -> SandboxEnvironmentSpec:
    """The Inspect sandbox spec for ``-T sandbox=docker|local|auto`` (the project's ``cleaner`` provider)."""
    if backend not in ("auto", "local", "docker"):
        raise ValueError(f"-T sandbox={backend!r}: choose 'auto', 'local' or 'docker'")
    return SandboxEnvironmentSpec("cleaner", CleanerSandboxConfig(backend=backend))  # type: ignore[arg-type]


def benchmark_task(
    problems: Sequence[Problem],
    scorer: Scorer,
    *,
    saar: bool,
    saar_prob: float,
    gamma: float,
    similarity: str,
    max_retries: int,
    max_turns: int,
    max_total_tokens: int | None,
    timeout: float,
    output_chars: int,
    sandbox: str,
    seed: int,
    epochs: int,
    accept_python_fence: bool = True,
) -> Task:
    """A benchmark task: the shared rollout solver with the SAAR switch, a scorer, pass@1 over epochs."""
    config = RolloutConfig(
        max_turns=max_turns,
        max_total_tokens=max_total_tokens,
        timeout=timeout,
        output_chars=output_chars,
        accept_python_fence=accept_python_fence,
        saar=SaarConfig(enabled=saar, prob=saar_prob, gamma=gamma, similarity=similarity, max_retries=max_retries),  # type: ignore[arg-type]
    )
    reducers = ["mean"] if epochs <= 1 else ["mean", f"pass_at_{epochs}"]
    return Task(
        dataset=to_samples(problems),
        solver=saar_agent(config, seed=seed),
        scorer=scorer,
        sandbox=sandbox_spec(sandbox),
        config=REFERENCE_SAMPLING,
        epochs=Epochs(epochs, reducers),
        metadata={"saar": saar, "saar_prob": saar_prob, "gamma": gamma, "similarity": similarity},
    )
