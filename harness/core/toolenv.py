"""The tool environment: everything about the python tool that a model meets, as one named object.

A :class:`ToolEnv` fixes the tool's schema (name, descriptions), how a call is read from a turn, how
its program runs, how long it may run, how its result is shown, what SAAR compares, and what the
response budget counts. Evaluation (the Inspect solver, every provider) and both trainers take the
profile from :class:`~harness.core.rollout.RolloutConfig`, so one run cannot mix two environments.

What differs between profiles is what a profile is made of, one rule in each part: how a call is read and
the span SAAR compares (``reading``: :class:`~harness.core.protocol.StrictCalls`,
:class:`~harness.core.protocol.RepairedCalls`), how a program is wrapped and limited (``execution``:
:class:`PlainExecution`, :class:`~harness.core.echo_runner.EchoExecution`), how a result, an unexecutable call
and exhausted retries are shown (``framing``: :class:`~harness.core.protocol.ProjectFraming`,
:class:`~harness.core.protocol.ReferenceFraming`), and plain facts (limits, the budget rule). The rollout, SAAR
and the trainers call the profile's methods; none of them tests which profile it is.

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
    (:mod:`harness.core.echo_runner`), ``Tool call success``/``Tool call failure`` framing (``reason:
    worker_timeout`` for a run ended at its limit and any failure that ran that long), SAAR comparing the
    two calls as written to the end of their turns, the model's end-of-turn token included (every readable or
    failed call, whatever tool it names; :func:`harness.core.chat.tool_env_for` sets the token from the
    model's tokenizer), a regeneration that counts as a turn, and a budget of every response token, tool
    output included.

Its interface strings are facts of that protocol, matched exactly; they are documented where they
come from (docs/benchmarks.md, "Tool environments").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, Protocol

from harness.core.echo_runner import EchoExecution
from harness.core.protocol import (
    PROJECT_TOOL,
    ParsedTurn,
    ProjectFraming,
    ReferenceFraming,
    RepairedCalls,
    StrictCalls,
    Tool,
)
from sandboxes.base import ExecResult
from sandboxes.runtimes import Runtime

Budget = Literal["generated", "response"]
Similarity = Literal["code", "call"]


class Reading(Protocol):
    """How a call is read from a turn, and the span of it SAAR compares (:mod:`harness.core.protocol`)."""

    @property
    def parse(self) -> str: ...

    @property
    def fenced(self) -> bool: ...

    @property
    def spans_turn(self) -> bool: ...

    @property
    def turn_end(self) -> str | None: ...

    def with_turn_end(self, turn_end: str) -> Reading: ...

    def read(self, text: str, env: ToolEnv, *, accept_python_fence: bool, call_id: str) -> ParsedTurn: ...


class Execution(Protocol):
    """How a call's program is wrapped and limited, and what a failure's kind is."""

    @property
    def name(self) -> str: ...

    def program(self, code: str, timeout: float) -> tuple[str, float]: ...

    def error_kind(self, result: ExecResult) -> str | None: ...


class Framing(Protocol):
    """How a result, a call that cannot run and exhausted SAAR retries are shown to the model."""

    @property
    def name(self) -> str: ...

    def result(
        self, *, ok: bool, stdout: str, stderr: str, error_kind: str | None, limit: int, duration: float, timeout: float
    ) -> str: ...

    def call_error(self, message: str, tool_name: str) -> str: ...

    def retry_note(self, attempts: int, retries: int) -> str: ...


@dataclass(frozen=True)
class PlainExecution:
    """The program as written, under the call's limit; a failure's kind is the sandbox's."""

    name: ClassVar[str] = "plain"

    def program(self, code: str, timeout: float) -> tuple[str, float]:
        return code, timeout

    def error_kind(self, result: ExecResult) -> str | None:
        return result.error_kind


@dataclass(frozen=True)
class ToolEnv:
    """One tool environment (see the module docstring for the two profiles): what differs between them is
    the objects it is made of (``reading``, ``execution``, ``framing``) and the facts below; its methods are
    how the rollout, SAAR and the trainers ask for it."""

    name: str
    tool: Tool  #: the tool's name and descriptions, as its schema shows them
    #: names a call may use (the tool's own name first)
    aliases: tuple[str, ...]
    reading: Reading  #: how a call is read from a turn, and the span a ``call`` similarity compares
    execution: Execution  #: how a call's program is wrapped and limited
    framing: Framing  #: how a result is shown to the model
    timeout: float  #: seconds per call
    #: whether the call of the last turn ``max_turns`` allows runs (its result is then the trajectory's end)
    call_on_last_turn: bool
    output_chars: int  #: characters of a result the model sees (cut in the middle)
    similarity: Similarity  #: SAAR's similarity input: the two programs, or the two calls as written
    #: whether a SAAR regeneration counts as an assistant turn against ``max_turns``: one that reaches
    #: the limit then ends the trajectory at the failed turn, before its error (no answer)
    regeneration_is_turn: bool
    #: "generated": the budget counts generated tokens kept; "response": every response token
    #: (tool output included), and each generation may take only what is left
    budget: Budget
    #: the programs' runtime (:mod:`sandboxes.runtimes`): the Python packages they can import (the docker image)
    #: and how much output a stream may hold; every sandbox backend of a rollout path is made with it
    runtime: Runtime

    @property
    def tool_name(self) -> str:
        """The function name in the schema, and the name calls are rendered with."""
        return self.tool.name

    @property
    def description(self) -> str:
        return self.tool.description

    def schema(self) -> dict[str, Any]:
        """The tool as chat templates and OpenAI-compatible servers take it."""
        return self.tool.schema()

    @property
    def counts_response(self) -> bool:
        """Whether a token budget counts every response token, tool output included (and caps each generation)."""
        return self.budget == "response"

    @property
    def spans_turn(self) -> bool:
        """Whether a call's span runs to the end of its turn, the model's end-of-turn token included."""
        return self.reading.spans_turn

    @property
    def turn_end(self) -> str | None:
        """The text of the token that ends a turn, which a call's span runs to ("": the span ends with the call;
        None: the span runs to the turn's end, and the model's token there is not known yet)."""
        return self.reading.turn_end

    def with_turn_end(self, turn_end: str) -> ToolEnv:
        """This profile for a model whose turns end with ``turn_end`` (itself, when its spans end with the call)."""
        reading = self.reading.with_turn_end(turn_end)
        return self if reading == self.reading else replace(self, reading=reading)

    def read_turn(self, text: str, *, accept_python_fence: bool = True, call_id: str = "call_0") -> ParsedTurn:
        """An assistant turn split into reasoning and (at most) one executable call."""
        return self.reading.read(text, self, accept_python_fence=accept_python_fence, call_id=call_id)

    def program(self, code: str, timeout: float) -> tuple[str, float]:
        """What the sandbox runs for a call of ``code`` limited to ``timeout`` seconds, and the sandbox's limit."""
        return self.execution.program(code, timeout)

    def error_kind(self, result: ExecResult) -> str | None:
        """The kind of a failed run (None when it succeeded)."""
        return self.execution.error_kind(result)

    def frame(
        self, *, ok: bool, stdout: str, stderr: str, error_kind: str | None, limit: int, duration: float, timeout: float
    ) -> str:
        """The text the model sees for a run limited to ``timeout`` seconds that took ``duration``, its output cut
        to ``limit`` characters."""
        return self.framing.result(
            ok=ok, stdout=stdout, stderr=stderr, error_kind=error_kind, limit=limit, duration=duration, timeout=timeout
        )

    def show_result(self, result: ExecResult, kind: str | None, *, limit: int, timeout: float) -> str:
        """The text the model sees for ``result`` (a run limited to ``timeout`` seconds whose kind is ``kind``)."""
        return self.frame(
            ok=result.ok,
            stdout=result.stdout,
            stderr=result.stderr,
            error_kind=kind,
            limit=limit,
            duration=result.duration,
            timeout=timeout,
        )

    def show_call_error(self, message: str) -> str:
        """The tool response to a call that could not be executed at all (``message`` says why)."""
        return self.framing.call_error(message, self.tool_name)

    def retry_note(self, attempts: int, retries: int) -> str:
        """Appended to the last error of a turn whose SAAR retries are exhausted."""
        return self.framing.retry_note(attempts, retries)

    def to_dict(self) -> dict[str, Any]:
        """The whole profile, as every log records it."""
        return {
            "name": self.name,
            "tool_name": self.tool.name,
            "description": self.tool.description,
            "code_description": self.tool.code_description,
            "aliases": self.aliases,
            "parse": self.reading.parse,
            "fenced_calls": self.reading.fenced,
            "execution": self.execution.name,
            "timeout": self.timeout,
            "call_on_last_turn": self.call_on_last_turn,
            "framing": self.framing.name,
            "output_chars": self.output_chars,
            "similarity": self.similarity,
            "turn_end": self.turn_end,
            "regeneration_is_turn": self.regeneration_is_turn,
            "budget": self.budget,
        }


PROJECT = ToolEnv(
    name="project",
    tool=PROJECT_TOOL,
    aliases=("python", "code_interpreter", "python_interpreter", "run_python"),
    reading=StrictCalls(fenced=True),
    execution=PlainExecution(),
    framing=ProjectFraming(),
    timeout=10.0,
    call_on_last_turn=True,
    output_chars=256,
    similarity="code",
    regeneration_is_turn=False,
    budget="generated",
    runtime="project",
)

REFERENCE = ToolEnv(
    name="reference",
    tool=Tool("code_interpreter", "A tool for executing code.", "The code to execute."),
    aliases=("code_interpreter",),
    reading=RepairedCalls(),  # spans end with the model's end-of-turn token, unknown until its tokenizer says
    execution=EchoExecution(),
    framing=ReferenceFraming(),
    timeout=4.0,
    call_on_last_turn=False,
    output_chars=256,
    similarity="call",
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
