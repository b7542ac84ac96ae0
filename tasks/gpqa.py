"""GPQA-Diamond: 198 four-choice science questions, choices shuffled with a fixed seed; answer letter in \\boxed{}.

The hub dataset is gated: accept its terms on the dataset page and set HF_TOKEN, or pass a local copy with -T data=...

    # the reference protocols of the 4B and the 7B model:
    inspect eval tasks/gpqa.py --model sglang/Qwen/Qwen3-4B-Instruct-2507 \\
        -M tool_call_parser=qwen25 -T preset=cleaner-paper
    inspect eval tasks/gpqa.py --model vllm/Qwen/Qwen2.5-7B-Instruct -M enable_auto_tool_choice=true \\
        -M tool_call_parser=hermes -T preset=cleaner-paper-7b
    inspect eval tasks/gpqa.py --model embedded/smollm2 -T data=fixture --limit 3
"""

from inspect_ai import Task, task

from harness.benchmarks.datasets import load_gpqa
from harness.benchmarks.presets import Judge
from harness.core.saar import Similarity
from harness.evals.scorers import gpqa_scorer
from harness.evals.tasks import SandboxName, TaskOptions, benchmark_task


@task
def gpqa(
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
    sandbox: SandboxName = "auto",
    data: str | None = None,
    seed: int = 0,
    share_prefix: str | None = None,
    tool_env: str | None = None,
    judge: Judge | None = None,
    prompt_template: str | None = None,
    tokenizer: str | None = None,
) -> Task:
    """GPQA-Diamond with the shared rollout core (choices shuffled with `seed`).

    Args:
        preset: a named protocol ("cleaner-paper", "cleaner-paper-7b": the authors' 4B and 7B evaluations).
        saar: SAAR (rollback) at inference. Unset: the preset's choice, else off.
        saar_prob, gamma, similarity, max_retries: SAAR's parameters (paper: 1.0, 0.5, "code", 3).
        max_turns, max_total_tokens, timeout, output_chars: the rollout's limits.
        epochs: samples per problem; temperature, top_p, max_tokens: the sampling.
        sandbox: where programs run ("auto", "local" or "docker").
        data: a local file or directory, or "fixture" (default: the hub).
        seed: the run's seed; per-(sample, epoch) sampling seeds derive from it, the same in both SAAR arms.
        share_prefix: an id shared by both SAAR arms of one run: the requests they have in common (before
            SAAR first acts) are generated once and read from Inspect\'s cache by the other arm.
        tool_env: the tool environment, "project" or "reference" (Open-CLEANER's). Unset: the preset's, else project.
        judge: the reported accuracy, "lenient" (equivalence) or "reference" (the strict box on the whole
            response; the lenient verdict beside it). Unset: the preset's, else lenient.
        prompt_template: a prompt template file (docs/benchmarks.md, "Prompts"); unset: the project's.
        tokenizer: what a response budget counts tool output with (hub id or path); unset: the model's own.
    """
    options = TaskOptions.of(locals())
    return benchmark_task(
        lambda templates: load_gpqa(data, seed=seed, templates=templates),
        lambda problems, judge: gpqa_scorer(judge=judge),
        options,
    )
