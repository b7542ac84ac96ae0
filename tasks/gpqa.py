"""GPQA-Diamond: 198 four-choice science questions, choices shuffled with a fixed seed; answer letter in \\boxed{}.

The hub dataset is gated: accept its terms on the dataset page and set HF_TOKEN, or pass a local copy with -T data=...

    # the reference protocols of the 4B and the 7B model:
    inspect eval tasks/gpqa.py --model sglang/Qwen/Qwen3-4B-Instruct-2507 \\
        -M tool_call_parser=qwen25 -T preset=cleaner-paper
    inspect eval tasks/gpqa.py --model vllm/Qwen/Qwen2.5-7B-Instruct -M enable_auto_tool_choice=true \\
        -M tool_call_parser=hermes -T preset=cleaner-paper-7b
    inspect eval tasks/gpqa.py --model embedded/smollm2 -T data=fixture --limit 3
"""

from typing import Any

from inspect_ai import Task, task

from harness.evals.tasks import registered_task, task_arguments


@task
@task_arguments("gpqa")
def gpqa(**args: Any) -> Task:
    """GPQA-Diamond with the shared rollout core (choices shuffled with `seed`)."""
    return registered_task("gpqa", **args)
