"""GPQA-Diamond: 198 four-choice science questions, choices shuffled with a fixed seed; answer letter in \\boxed{}.

The hub dataset is gated: accept its terms on the dataset page and set HF_TOKEN, or pass a local copy with -T data=...

    inspect eval tasks/gpqa.py --model sglang/Qwen/Qwen3-4B -T saar=true
    inspect eval tasks/gpqa.py --model embedded/smollm2 -T data=fixture --limit 3
"""

from inspect_ai import Task, task

from harness.datasets import load_gpqa
from harness.evals.scorers import gpqa_scorer
from harness.evals.tasks import benchmark_task


@task
def gpqa(
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
    """GPQA-Diamond with the shared rollout core; `data` is a local file/dir or "fixture" (default: the hub)."""
    options = dict(locals())  # the task arguments, as given
    return benchmark_task(load_gpqa(options.pop("data"), seed=seed), gpqa_scorer(), **options)
