"""AIME 2024: 30 problems, integer answers 0-999 in the last \\boxed{}; the model may run Python.

# the reference protocols of the 4B and the 7B model:
inspect eval tasks/aime24.py --model sglang/Qwen/Qwen3-4B-Instruct-2507 \\
    -M tool_call_parser=qwen25 -T preset=cleaner-paper
inspect eval tasks/aime24.py --model vllm/Qwen/Qwen2.5-7B-Instruct -M enable_auto_tool_choice=true \\
    -M tool_call_parser=hermes -T preset=cleaner-paper-7b
inspect eval tasks/aime24.py --model embedded/smollm2 -T data=fixture --limit 3
"""

from typing import Any

from inspect_ai import Task, task

from harness.evals.tasks import registered_task, task_arguments


@task
@task_arguments("aime24")
def aime24(**args: Any) -> Task:
    """AIME 2024 with the shared rollout core."""
    return registered_task("aime24", **args)
