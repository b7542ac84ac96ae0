"""The Inspect face of the rollout core: one solver that runs a tool-use trajectory with SAAR.

The solver hands Inspect's model to :func:`harness.core.rollout.rollout` as its
``generate`` and the sample's sandbox as its executor. Every generation is sent with its
own seed (a per-call ``GenerateConfig(seed=...)``, which overrides any run-wide seed):
the (sample, epoch) seed comes from the task's ``seed`` (:mod:`harness.core.seeds`), so epochs
are different samples while both SAAR arms sample a (sample, epoch) from the same seeds. The purified trajectory
becomes the sample's messages, its SAAR events go to the transcript (so ``inspect
view`` shows what was purified) and to the sample's metadata (for scorers and
reports).

The transcript holds the trajectory as Inspect's own events, in order:

* every program run is a ``tool`` span (named after the tool, as Inspect's own tool calls are) holding
  the :class:`~inspect_ai.event.SandboxEvent` that Inspect's sandbox proxy records for an exec: the
  program (the exec's input), its exit status, its output, start and end. The rollout still gets the
  structured :class:`~sandboxes.base.ExecResult` (ok, error kind) the proxy cannot carry
  (:class:`TranscribedSandbox`);
* every SAAR rollback is a ``saar`` span (opened by :func:`harness.core.saar.rollback` through the
  rollout's ``spans``), with one ``regeneration`` span per retry holding that regeneration's model event
  and the run of the call installed from it. The failed call's own run comes just before it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from inspect_ai.log import transcript
from inspect_ai.model import GenerateConfig, ModelOutput, get_model
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import ExecResult as InspectExecResult
from inspect_ai.util import OutputLimitExceededError, SandboxEnvironment, SandboxEnvironmentConfigType, span
from inspect_ai.util import sandbox as inspect_sandbox

from harness.core.chat import tool_result_counter
from harness.core.messages import Generation, Message
from harness.core.rollout import CountTokens, RolloutConfig, rollout
from harness.core.seeds import trajectory_seed
from harness.engines.launch_check import check_vllm_command, vllm_would_start
from harness.evals.convert import to_generation, to_inspect, tool_info
from harness.evals.served_tools import send_tools_unconstrained
from harness.evals.shared_prefix import generate_shared
from harness.evals.tokenizers import for_model
from sandboxes.base import ExecResult, Sandbox

#: Key of the trajectory summary in a sample's metadata.
TRAJECTORY = "trajectory"
#: The command a program run is recorded as (the program is the exec's input).
EXEC_CMD = ["python3", "-"]


def current_sandbox() -> Sandbox:
    """The structured sandbox behind the sample's Inspect sandbox environment."""
    from sandboxes.inspect_provider import structured

    return structured(inspect_sandbox())


class _OneRun(SandboxEnvironment):
    """One structured run as an Inspect sandbox environment, for Inspect's proxy to record (it keeps the result)."""

    def __init__(self, run: Callable[[], Awaitable[ExecResult]]) -> None:
        super().__init__()
        self._run = run
        self.result: ExecResult | None = None

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> InspectExecResult[str]:
        self.result = result = await self._run()
        code = result.exit_code if result.exit_code is not None else -1  # None: killed (timeout) or no exit
        return InspectExecResult(success=result.ok, returncode=code, stdout=result.stdout, stderr=result.stderr)

    async def write_file(self, file: str, contents: str | bytes) -> None:  # pragma: no cover - never called
        raise NotImplementedError("a recorded program run writes no files")

    async def read_file(self, file: str, text: bool = True) -> Any:  # pragma: no cover - never called
        raise NotImplementedError("a recorded program run reads no files")

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:  # pragma: no cover - nothing to clean
        return None


class TranscribedSandbox(Sandbox):
    """The sample's structured sandbox, every run in the transcript as Inspect records a tool's exec.

    Each :meth:`run_python` is a ``tool`` span holding the ``SandboxEvent`` of Inspect's own sandbox
    proxy (program, exit status, output, start and end; Inspect's working-time accounting too); the
    caller gets the structured result of the sandbox underneath, as without the transcript.
    """

    def __init__(self, sandbox: Sandbox, tool_name: str) -> None:
        self.inner = sandbox
        self.backend = sandbox.backend
        self.tool_name = tool_name

    async def run_python(
        self,
        code: str,
        *,
        timeout: float = 10.0,
        stdin: str | bytes = b"",
        files: dict[str, str | bytes] | None = None,
    ) -> ExecResult:
        from inspect_ai.util._sandbox.events import SandboxEnvironmentProxy

        run = _OneRun(lambda: self.inner.run_python(code, timeout=timeout, stdin=stdin, files=files))
        async with span(name=self.tool_name, type="tool"):
            try:
                await SandboxEnvironmentProxy(run).exec(EXEC_CMD, input=code, timeout=timeout)  # type: ignore[arg-type]
            except OutputLimitExceededError:  # recorded; the sandbox's own output cap already applied
                pass
        assert run.result is not None
        return run.result


@solver
def saar_agent(
    config: RolloutConfig,
    run_seed: int = 0,
    share_prefix: str | None = None,
    max_tokens: int | None = None,
    tokenizer: str | None = None,
) -> Solver:
    """Run the shared rollout loop (tool calls, SAAR) for one sample.

    Args:
        config: the rollout's limits, parse mode, SAAR settings and tool environment
            (:func:`harness.core.problems.rollout_config`).
        run_seed: the seed each (sample, epoch) derives its trajectory seed from (:mod:`harness.core.seeds`).
        share_prefix: arms with the same id generate the requests they have in common once
            (:mod:`harness.evals.shared_prefix`); None: every request is generated.
        max_tokens: tokens per generation (the task's own limit; a response budget may lower it per call).
        tokenizer: the model's tokenizer (:func:`harness.evals.tokenizers.for_model`): what a response budget
            counts tool output with, and where the model's end-of-turn token comes from
            (:func:`harness.core.chat.tool_env_for`).
    """
    tools = [tool_info(config.tool_env)]
    task_max_tokens = max_tokens

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        model = get_model()
        if vllm_would_start(model.api):
            check_vllm_command()  # Inspect is about to start `vllm serve`: say first if it cannot be found
        send_tools_unconstrained(model.api)  # a served model may write any call, as the trainers' engines let it
        sandbox = TranscribedSandbox(current_sandbox(), config.tool_env.tool_name)
        seed = trajectory_seed(run_seed, state.sample_id, state.epoch)
        tok, run_config = for_model(model, config, tokenizer)  # the tool environment for this model
        count_tokens: CountTokens | None = tool_result_counter(tok) if config.response_budget else None

        async def model_generate(
            messages: list[Message], *, seed: int | None = None, max_tokens: int | None = None
        ) -> Generation:
            limit = max_tokens if max_tokens is None or task_max_tokens is None else min(max_tokens, task_max_tokens)
            request, gen_config = to_inspect(messages), GenerateConfig(seed=seed, max_tokens=limit)
            if share_prefix is None:
                output = await model.generate(request, tools=tools, config=gen_config)
            else:
                output = await generate_shared(
                    model, request, tools=tools, config=gen_config, share=share_prefix, epoch=state.epoch
                )
            return to_generation(output, config.tool_env)

        def spans(name: str, type: str) -> AbstractAsyncContextManager[None]:
            return span(name, type=type)

        prompt = [Message(m.role, m.text) for m in state.messages if m.role in ("system", "user")]  # type: ignore[arg-type]
        async with span("rollout"):
            trajectory = await rollout(
                prompt, model_generate, sandbox, run_config, seed=seed, spans=spans, count_tokens=count_tokens
            )
        summary = trajectory.summary()
        state.messages = to_inspect(trajectory.messages)
        state.output = ModelOutput.from_content(model=str(model), content=trajectory.final_text)
        state.metadata[TRAJECTORY] = summary
        transcript().info(
            {
                "saar_on": summary["saar_on"],
                "stop_reason": summary["stop_reason"],
                "seed": summary["seed"],
                "saar_events": summary["saar_events"],
            },
            source="SAAR",
        )
        return state

    return solve
