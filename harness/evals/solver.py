"""The Inspect face of the rollout core: one solver that runs a tool-use trajectory with SAAR.

The solver hands Inspect's model to :func:`harness.rollout.rollout` as its
``generate`` and the sample's sandbox as its executor. The purified trajectory
becomes the sample's messages, its SAAR events go to the transcript (so ``inspect
view`` shows what was purified) and to the sample's metadata (for scorers and
reports).
"""

from __future__ import annotations

import random
import zlib

from inspect_ai.log import transcript
from inspect_ai.model import GenerateConfig, ModelOutput, get_model
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import sandbox as inspect_sandbox
from inspect_ai.util import span

from harness.evals.convert import PYTHON_TOOL, to_generation, to_inspect
from harness.messages import Generation, Message
from harness.rollout import RolloutConfig, rollout
from sandboxes.base import Sandbox

#: Key of the trajectory summary in a sample's metadata.
TRAJECTORY = "trajectory"


def current_sandbox() -> Sandbox:
    """The structured sandbox behind the sample's Inspect sandbox environment."""
    from sandboxes.inspect_provider import structured

    return structured(inspect_sandbox())


def sample_seed(seed: int, sample_id: object, epoch: int) -> int:
    """A stable per-(sample, epoch) seed for the SAAR draw (independent of scheduling order)."""
    return zlib.crc32(f"{seed}:{sample_id}:{epoch}".encode())


@solver
def saar_agent(config: RolloutConfig, seed: int = 0) -> Solver:
    """Run the shared rollout loop (tool calls, SAAR) for one sample."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        model = get_model()
        sandbox = current_sandbox()

        async def model_generate(messages: list[Message]) -> Generation:
            output = await model.generate(to_inspect(messages), tools=[PYTHON_TOOL], config=GenerateConfig())
            return to_generation(output)

        prompt = [Message(m.role, m.text) for m in state.messages if m.role in ("system", "user")]  # type: ignore[arg-type]
        rng = random.Random(sample_seed(seed, state.sample_id, state.epoch))
        async with span("rollout"):
            trajectory = await rollout(prompt, model_generate, sandbox, config, rng)
        summary = trajectory.summary()
        state.messages = to_inspect(trajectory.messages)
        state.output = ModelOutput.from_content(model=str(model), content=trajectory.final_text)
        state.metadata[TRAJECTORY] = summary
        transcript().info(
            {
                "saar_on": summary["saar_on"],
                "stop_reason": summary["stop_reason"],
                "saar_events": summary["saar_events"],
            },
            source="SAAR",
        )
        return state

    return solve
