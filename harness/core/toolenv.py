"""The tool environment: everything about the python tool that a model meets, as one named object.

A :class:`ToolEnv` fixes the tool's schema (name, descriptions), how a call is read from a turn, how
its program runs, how long it may run, how its result is shown, what SAAR compares, and what the
response budget counts. Evaluation (the Inspect solver, every provider) and both trainers take the
profile from :class:`~harness.core.rollout.RolloutConfig`, so one run cannot mix two environments.

Two profiles:

``project``
    This project's own environment (the warm model, the demo and the baselines use it): a tool
    ``python``, strict JSON calls (a call that cannot be read is a failed call, which SAAR may purify),
    the program's own output or ``Error:`` and its traceback, a 10 s limit, SAAR comparing the two
    programs, and a budget of generated tokens.
``reference``
    Open-CLEANER's environment (commit 91e40ad: ``recipe/cleaner/rstar_code_judge.yaml``,
    ``code_judge_utils.py``, ``verl/verl/experimental/agent_loop/tool_agent_loop.py`` and
    ``tool_parser.py``): a tool ``code_interpreter``, calls read with a lenient JSON repair (a turn
    whose call cannot be read has no call and is the answer), the call's final expression echoed
    (:mod:`harness.core.echo_runner`), ``Tool call success``/``Tool call failure`` framing, SAAR
    comparing the two calls as written to the end of their turns (every readable or failed call, whatever
    tool it names), a regeneration that counts as a turn, and a budget of every response token, tool
    output included.

Its interface strings are facts of that protocol, matched exactly; they are documented where they
come from (docs/benchmarks.md, "Tool environments").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from sandboxes.runtimes import Runtime

Parse = Literal["strict", "repair"]
Execution = Literal["plain", "echo"]
Framing = Literal["project", "reference"]
Budget = Literal["generated", "response"]
Similarity = Literal["code", "call"]


@dataclass(frozen=True)
class ToolEnv:
    """One tool environment (see the module docstring for the two profiles)."""

    name: str
    tool_name: str  #: the function name in the schema, and the name calls are rendered with
    description: str  #: the tool's description in the schema
    code_description: str  #: the description of its one argument, ``code``
    #: names a call may use (the tool's own name first)
    aliases: tuple[str, ...]
    #: "strict": a call must be valid JSON, and one that is not is a failed call (SAAR may purify it);
    #: "repair": JSON is repaired (json_repair), and a call that still cannot be read is no call, so the turn
    #: is the answer (:func:`harness.core.protocol.parse_turn`)
    parse: Parse
    #: besides ``<tool_call>`` tags, a fenced ``json`` call object and (not for code problems) a bare
    #: fenced ``python`` block are calls
    fenced_calls: bool
    #: "plain": the program runs as written; "echo": a final bare expression's repr is printed
    execution: Execution
    timeout: float  #: seconds per call
    #: whether the call of the last turn ``max_turns`` allows runs (its result is then the trajectory's end)
    call_on_last_turn: bool
    framing: Framing  #: how a result is shown to the model (:func:`harness.core.protocol.frame_result`)
    output_chars: int  #: characters of a result the model sees (cut in the middle)
    similarity: Similarity  #: SAAR's similarity input: the two programs, or the two calls as written
    #: the text of the token that ends a turn, which a call as written runs to (``ToolCall.raw``, what a
    #: ``call`` similarity compares): the generated text does not hold it
    turn_end: str
    #: whether a SAAR regeneration counts as an assistant turn against ``max_turns``: one that reaches
    #: the limit then ends the trajectory at the failed turn, before its error (no answer)
    regeneration_is_turn: bool
    #: "generated": the budget counts generated tokens kept; "response": every response token
    #: (tool output included), and each generation may take only what is left
    budget: Budget
    #: the programs' runtime (:mod:`sandboxes.runtimes`): the Python packages they can import (the docker image)
    #: and how much output a stream may hold; every sandbox backend of a rollout path is made with it
    runtime: Runtime

    def schema(self) -> dict[str, Any]:
        """The tool as chat templates and OpenAI-compatible servers take it."""
        return {
            "type": "function",
            "function": {
                "name": self.tool_name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": {"code": {"type": "string", "description": self.code_description}},
                    "required": ["code"],
                },
            },
        }

    @property
    def counts_response(self) -> bool:
        """Whether a token budget counts every response token, tool output included (and caps each generation)."""
        return self.budget == "response"

    def to_dict(self) -> dict[str, Any]:
        """The whole profile, as every log records it."""
        return asdict(self)


PROJECT = ToolEnv(
    name="project",
    tool_name="python",
    description=(
        "Execute a Python 3 program and return what it prints. Each call runs in a fresh "
        "interpreter: variables do not persist between calls, so print what you need. "
        "numpy and sympy are available."
    ),
    code_description="The Python program to run.",
    aliases=("python", "code_interpreter", "python_interpreter", "run_python"),
    parse="strict",
    fenced_calls=True,
    execution="plain",
    timeout=10.0,
    call_on_last_turn=True,
    framing="project",
    output_chars=256,
    similarity="code",
    turn_end="",
    regeneration_is_turn=False,
    budget="generated",
    runtime="project",
)

REFERENCE = ToolEnv(
    name="reference",
    tool_name="code_interpreter",
    description="A tool for executing code.",
    code_description="The code to execute.",
    aliases=("code_interpreter",),
    parse="repair",
    fenced_calls=False,
    execution="echo",
    timeout=4.0,
    call_on_last_turn=False,
    framing="reference",
    output_chars=256,
    similarity="call",
    turn_end="<|im_end|>",  # Qwen3's end of turn (ChatML), the reference's models'
    regeneration_is_turn=True,
    budget="response",
    runtime="reference",
)

#: The profiles by name (``-T tool_env=...``, a recipe's ``tool_env``).
PROFILES: dict[str, ToolEnv] = {env.name: env for env in (PROJECT, REFERENCE)}


def env_of_tool(tool_name: str) -> ToolEnv:
    """The profile whose tool is called ``tool_name`` (a provider that is handed only the tool); a ValueError for
    a tool no profile has."""
    for env in PROFILES.values():
        if env.tool_name == tool_name:
            return env
    raise ValueError(
        f"no tool environment has a tool {tool_name!r}; tools: {', '.join(e.tool_name for e in PROFILES.values())}"
    )


def get_tool_env(name: str | ToolEnv, where: str = "tool_env") -> ToolEnv:
    """The profile called ``name`` (a :class:`ToolEnv` is returned as is); a ValueError naming ``where``."""
    if isinstance(name, ToolEnv):
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"{where}: unknown tool environment {name!r}; profiles: {', '.join(PROFILES)}") from None
