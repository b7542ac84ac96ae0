"""AIME 2025: 30 problems, integer answers 0-999 in the last \\boxed{}; the model may run Python.

inspect eval tasks/aime25.py --model sglang/Qwen/Qwen3-4B -T saar=true
inspect eval tasks/aime25.py --model embedded/smollm2 -T data=fixture --limit 3
"""

from inspect_ai import Task, task

from harness.datasets import load_aime25
from harness.evals.scorers import math_scorer
from harness.evals.tasks import benchmark_task


@task
def aime25(
    saar: bool = False,
    saar_prob: float = 1.0,
    gamma: float = 0.5,
    similarity: str = "code",
    max_retries: int = 3,
    max_turns: int = 16,
    max_total_tokens: int | None = None,
    timeout: float = 10.0,
    output_chars: int = 256,
    sandbox: str = "auto",
    data: str | None = None,
    seed: int = 0,
    epochs: int = 1,
) -> Task:
    """AIME 2025 with the shared rollout core; `data` is a local file/dir or "fixture" (default: the hub)."""
    options = dict(locals())  # the task arguments, as given
    return benchmark_task(load_aime25(options.pop("data")), math_scorer(), **options)
