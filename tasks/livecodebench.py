"""LiveCodeBench (code_generation_lite, release_v6): a program must pass every public and private test.

The reference evaluation used problems dated 2025-02 to 2025-05 (the defaults). Tests run in the sandbox.

    inspect eval tasks/livecodebench.py --model sglang/Qwen/Qwen3-4B -T saar=true
    inspect eval tasks/livecodebench.py --model embedded/smollm2 -T data=fixture --limit 3
"""

from inspect_ai import Task, task

from harness.datasets import load_livecodebench
from harness.evals.scorers import code_scorer
from harness.evals.tasks import benchmark_task


@task
def livecodebench(
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
    start_date: str = "2025-02-01",
    end_date: str = "2025-05-31",
    release: str = "release_v6",
    seed: int = 0,
    epochs: int = 1,
) -> Task:
    """LiveCodeBench with the shared rollout core; `data` is a local file/dir or "fixture" (default: the hub)."""
    options = dict(locals())  # the task arguments, as given
    window = {k: options.pop(k) for k in ("start_date", "end_date", "release")}
    problems = load_livecodebench(options.pop("data"), **window)
    # the final answer is a ```python block, not a call: bare python fences are not executed
    return benchmark_task(problems, code_scorer(problems), accept_python_fence=False, **options)
