"""The Inspect face of the rollout core: one solver that runs a tool-use trajectory with SAAR.

The solver hands Inspect's model to :func:`harness.core.rollout.rollout` as its
``generate`` and the sample's sandbox as its executor. Every generation is sent with its
own seed (a per-call ``GenerateConfig(seed=...)``, which overrides any run-wide seed):
the (sample, epoch) seed comes from the task's ``seed`` (:mod:`harness.core.seeds`), so epochs
are different samples while both SAAR arms sample a (sample, epoch) from the same seeds. The purified trajectory
becomes the sample's messages, its SAAR events go to the transcript (so ``inspect
view`` shows what was purified) and to the sample's metadata (for scorers and
reports).
"""

from __future__ import annotations

from inspect_ai.log import transcript
from inspect_ai.model import GenerateConfig, ModelOutput, get_model
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import sandbox as inspect_sandbox
from inspect_ai.util import span

from harness.core.messages import Generation, Message
from harness.core.rollout import RolloutConfig, rollout
from harness.core.seeds import trajectory_seed
from harness.evals.convert import PYTHON_TOOL, to_generation, to_inspect
from sandboxes.base import Sandbox

#: Key of the trajectory summary in a sample's metadata.
TRAJECTORY = "trajectory"


def current_sandbox() -> Sandbox:
    """The structured sandbox behind the sample's Inspect sandbox environment."""
    from sandboxes.inspect_provider import structured

    return structured(inspect_sandbox())


@solver
def saar_agent(config: RolloutConfig, run_seed: int = 0) -> Solver:
    """Run the shared rollout loop (tool calls, SAAR) for one sample.

    Args:
        config: the rollout's limits, parse mode and SAAR settings (:func:`harness.core.problems.rollout_config`).
        run_seed: the seed each (sample, epoch) derives its trajectory seed from (:mod:`harness.core.seeds`).
    """

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        model = get_model()
        sandbox = current_sandbox()

        async def model_generate(messages: list[Message], *, seed: int | None = None) -> Generation:
            output = await model.generate(to_inspect(messages), tools=[PYTHON_TOOL], config=GenerateConfig(seed=seed))
            return to_generation(output)

        prompt = [Message(m.role, m.text) for m in state.messages if m.role in ("system", "user")]  # type: ignore[arg-type]
        async with span("rollout"):
            trajectory = await rollout(
                prompt, model_generate, sandbox, config, seed=trajectory_seed(run_seed, state.sample_id, state.epoch)
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
