"""LiveCodeBench (code_generation_lite, release_v6): a program must pass every public and private test.

The reference evaluation used problems dated 2025-02 to 2025-05 (the defaults). Tests run in the sandbox.
The final ```python block is the answer, never a tool call (harness.core.problems: the "code" kind).

    # the reference protocols of the 4B and the 7B model:
    inspect eval tasks/livecodebench.py --model sglang/Qwen/Qwen3-4B-Instruct-2507 \\
        -M tool_call_parser=qwen25 -T preset=cleaner-paper
    inspect eval tasks/livecodebench.py --model vllm/Qwen/Qwen2.5-7B-Instruct -M enable_auto_tool_choice=true \\
        -M tool_call_parser=hermes -T preset=cleaner-paper-7b
    inspect eval tasks/livecodebench.py --model embedded/smollm2 -T data=fixture --limit 3
"""

from typing import Any

from inspect_ai import Task, task

from harness.evals.tasks import registered_task, task_arguments


@task
@task_arguments("livecodebench")
def livecodebench(**args: Any) -> Task:
    """LiveCodeBench with the shared rollout core."""
    return registered_task("livecodebench", **args)
