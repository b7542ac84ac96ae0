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

# generated: task
from inspect_ai import Task, task

from harness.benchmarks.presets import Judge
from harness.core.saar import Similarity
from harness.evals.tasks import SandboxName, registered_task


@task
def livecodebench(
    preset: str | None = None,
    saar: bool | None = None,
    saar_prob: float | None = None,
    gamma: float | None = None,
    similarity: Similarity | None = None,
    max_retries: int | None = None,
    max_turns: int | None = None,
    max_total_tokens: int | None = None,
    timeout: float | None = None,
    output_chars: int | None = None,
    epochs: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
    tool_env: str | None = None,
    judge: Judge | None = None,
    sandbox: SandboxName = "auto",
    data: str | None = None,
    start_date: str = "2025-02-01",
    end_date: str = "2025-05-31",
    release: str = "release_v6",
    seed: int = 0,
    share_prefix: str | None = None,
    prompt_template: str | None = None,
    tokenizer: str | None = None,
) -> Task:
    """LiveCodeBench with the shared rollout core.

    Args:
        preset: a named protocol: `cleaner-paper` (the 4B model's), `cleaner-paper-7b` (the 7B model's; below)
        saar: SAAR (rollback) on
        saar_prob: probability that SAAR is on for a trajectory (the paper's 70/30 curriculum: 0.7)
        gamma: similarity threshold: ≥ γ shallow, < γ deep
        similarity: `code`: ratio between the two programs (the paper; `project`); `call`: between the calls as
            written, from `<tool_call>` to the turn's end (the reference implementation, whose JSON boilerplate
            pushes ratios up; `reference`)
        max_retries: regenerations per failed turn (so at most 4 attempts)
        max_turns: assistant turns per trajectory
        max_total_tokens: the response budget: generated tokens kept (`project`), or every response token, tool
            output included, each generation taking what is left (`reference`)
        timeout: seconds per tool call (`project` 10, `reference` 4)
        output_chars: tool output shown to the model, middle cut (verl's default)
        epochs: samples per problem; pass@1 is the mean over epochs, pass@k (k = epochs) is reported too; `inspect
            eval --epochs N` replaces the count and reports pass@N (`--epochs-reducer` replaces the reducers)
        temperature: the sampling temperature (the reference's); `--temperature` overrides it
        top_p: the sampling's nucleus mass (the reference's); `--top-p` overrides it
        max_tokens: tokens per generation; `--max-tokens` overrides it
        tool_env: the tool environment: `project` (this project's) or `reference` (Open-CLEANER's)
        judge: the reported `accuracy`: `lenient` (equivalence; LiveCodeBench's official grader) or `reference` (the
            reference's judge of the whole response: the strict box, or code-judge's exact output; the lenient
            verdict beside it as `accuracy_lenient`)
        sandbox: `docker`, `local`, or `auto` (docker when an engine and the image are there; the `reference` tool
            environment has an image of its own: `python -m sandboxes.image build --variant reference`)
        data: a local file or directory with the upstream schema (a relative path resolves against `tasks/`), the
            reference's `.parquet`, or `fixture`
        start_date: the first contest day of the window, YYYY-MM-DD (the reference's by default).
        end_date: the last contest day of the window, inclusive (the reference's by default).
        release: the dataset release: release_vN (cumulative) or vN (one file).
        seed: the run's seed (and the GPQA shuffle): each (sample, epoch) samples from its own seed derived from it
        share_prefix: an id both SAAR arms of one run pass: a request the arms have in common (before SAAR first
            acts) is generated once and read from Inspect's cache by the other arm (`compare` and `demo` set it)
        prompt_template: a prompt template file (`docs/benchmarks.md`, "Prompts"); a relative path resolves against
            `tasks/`; its sha256 is in the log
        tokenizer: the model's tokenizer, which a `reference` budget counts tool output with and SAAR's `reference`
            call span ends with (its end-of-turn token): a hub id or a path (needed for models whose name is not
            one, e.g. `replay/`)
    """
    return registered_task("livecodebench", **locals())


# end generated: task
