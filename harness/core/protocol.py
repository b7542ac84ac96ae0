"""The tool-call protocol: one python tool taking ``code``, in the Hermes form.

A call is written by the model as::

    <tool_call>
    {"name": "python", "arguments": {"code": "print(1 + 1)"}}
    </tool_call>

This module is the only place that knows that form and the texts a model is shown. It holds the
two ways a call is read from a turn and the two ways a result is framed, as objects a tool
environment (:class:`~harness.core.toolenv.ToolEnv`) is made of; the functions below ask the
environment they are given, with no default, so a caller that forgets it fails instead of running the
``project`` profile.

:class:`StrictCalls` (``project``) is lenient in what it accepts (any of the profile's tool names,
arguments as a JSON string, a fenced ``json`` block, optionally a fenced ``python`` block) and strict
in what it executes: a call must name the tool and carry a string ``code``, and only the first call
of a turn runs. A malformed call becomes a :class:`ParsedTurn` with ``error`` set, which the rollout
answers with a tool error instead of crashing. :class:`RepairedCalls` (``reference``) reads only
``<tool_call>`` tags, repairs their JSON, and runs the first call that can be read.
:class:`ProjectFraming` and :class:`ReferenceFraming` say how a result, an unexecutable call and
exhausted SAAR retries are shown.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, Protocol

from sandboxes.base import TIMEOUT

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class Tool:
    """The python tool as a model is told of it: its name and the descriptions its schema carries."""

    name: str
    description: str  #: the tool's description
    code_description: str  #: the description of its one argument, ``code``

    def schema(self) -> dict[str, Any]:
        """The tool as chat templates and OpenAI-compatible servers take it."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": {"code": {"type": "string", "description": self.code_description}},
                    "required": ["code"],
                },
            },
        }


#: The project's own tool (the ``project`` profile's).
PROJECT_TOOL = Tool(
    name="python",
    description=(
        "Execute a Python 3 program and return what it prints. Each call runs in a fresh "
        "interpreter: variables do not persist between calls, so print what you need. "
        "numpy and sympy are available."
    ),
    code_description="The Python program to run.",
)
TOOL_NAME = PROJECT_TOOL.name
#: The JSON schema of the project's tool, as chat templates with tool support expect it.
TOOL_SCHEMA: dict[str, Any] = PROJECT_TOOL.schema()

_FENCE = re.compile(r"```(?P<lang>[A-Za-z0-9_+-]*)[ \t]*\n(?P<body>.*?)```", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """A parsed call of the python tool.

    ``raw`` is the call as serialized from its opening marker on; the reference
    implementation's SAAR similarity compares these strings, the paper's compares ``code``.
    """

    code: str
    raw: str
    id: str = "call_0"
    name: str = TOOL_NAME

    def arguments(self) -> dict[str, str]:
        return {"code": self.code}


@dataclass(frozen=True)
class ParsedTurn:
    """An assistant turn split into the reasoning before its call and the call itself."""

    reasoning: str
    call: ToolCall | None = None
    error: str | None = None  #: why a call was attempted but cannot be executed
    form: Literal["none", "hermes", "json_fence", "python_fence", "native"] = "none"
    extra_calls: int = 0  #: further calls in the same turn, which are not executed
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def attempted_call(self) -> bool:
        return self.call is not None or self.error is not None


class ToolProfile(Protocol):
    """What this module asks of a tool environment (:class:`harness.core.toolenv.ToolEnv` is one; that module
    builds on this one, so it is named here by what it does)."""

    @property
    def tool_name(self) -> str: ...

    @property
    def aliases(self) -> tuple[str, ...]: ...

    @property
    def timeout(self) -> float: ...

    def read_turn(self, text: str, *, accept_python_fence: bool = True, call_id: str = "call_0") -> ParsedTurn: ...

    def frame(
        self, *, ok: bool, stdout: str, stderr: str, error_kind: str | None, limit: int, duration: float, timeout: float
    ) -> str: ...

    def show_call_error(self, message: str) -> str: ...

    def retry_note(self, attempts: int, retries: int) -> str: ...


def serialize_call(code: str, name: str = TOOL_NAME) -> str:
    """The canonical Hermes text of a call (what a native tool call renders to)."""
    return serialize_object({"name": name, "arguments": {"code": code}})


def serialize_object(call: dict[str, Any]) -> str:
    """Any call object in the Hermes form (used to hand a provider's unusable native call to the parser)."""
    return f"{CALL_OPEN}\n{json.dumps(call, ensure_ascii=False)}\n{CALL_CLOSE}"


def _call_from_json(text: str, raw: str, call_id: str, env: ToolProfile) -> tuple[ToolCall | None, str | None]:
    """Validate a JSON call object; return the call or a message saying what is wrong."""
    body = text.strip()
    fence = _FENCE.fullmatch(body)
    if fence:  # a fenced block inside the tags
        body = fence.group("body").strip()
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, f"the tool call is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if not isinstance(obj, dict):
        return None, "the tool call must be a JSON object with 'name' and 'arguments'"
    name = obj.get("name")
    if name not in env.aliases:
        return None, f"unknown tool {name!r}; the only tool is {env.tool_name!r}"
    args = obj.get("arguments", obj.get("parameters"))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None, "the tool call's 'arguments' is a string that is not valid JSON"
    if not isinstance(args, dict) or not isinstance(args.get("code"), str):
        return None, "the tool call needs 'arguments' with a string field 'code'"
    if not args["code"].strip():
        return None, "the tool call's 'code' is empty"
    return ToolCall(code=args["code"], raw=raw, id=call_id, name=env.tool_name), None


def _repaired_call(text: str, raw: str, call_id: str, env: ToolProfile) -> tuple[ToolCall | None, str | None] | None:
    """One pair of tags read as Open-CLEANER reads it (commit 91e40ad); None when the parser drops it.

    verl's Hermes parser (``verl/verl/experimental/agent_loop/tool_parser.py`` lines 94-101) repairs the JSON
    (json_repair) and keeps ``name`` and ``arguments`` in a pydantic ``FunctionCall`` whose ``name`` is a
    ``str``: a value that is not an object with both, or a name that is not a string, is dropped. The agent
    loop's ``_call_tool`` (``tool_agent_loop.py`` lines 678-711) answers :data:`REFERENCE_FORMAT_ERROR` to a
    call of another tool and to arguments that are not an object; the tool (``recipe/cleaner/code_judge_tool.py``
    line 188) runs ``code`` (an empty program without it), and a ``code`` that is not a string fails in
    ``code_judge_utils.py``'s ``generate_tool_call_code`` (line 416, ``.encode()``), which is a format error too.
    """
    import json_repair

    try:
        obj = json_repair.loads(text)
        name, args = obj["name"], obj["arguments"]
    except Exception:  # json_repair's own errors, a str or list value, a missing key: the parser drops the call
        return None
    if not isinstance(name, str):
        return None
    if name not in env.aliases or not isinstance(args, dict) or not isinstance(args.get("code", ""), str):
        return None, REFERENCE_FORMAT_ERROR
    return ToolCall(code=args.get("code", ""), raw=raw, id=call_id, name=env.tool_name), None


_CALL_PAIR = re.compile(re.escape(CALL_OPEN) + "(.*?)" + re.escape(CALL_CLOSE), re.DOTALL)


@dataclass(frozen=True)
class StrictCalls:
    """How the ``project`` profile reads a call: strict JSON, and a call that cannot be read is a failed call.

    Order of precedence: Hermes ``<tool_call>`` tags, then (``fenced``) a fenced ``json`` block holding a
    call object, then (``fenced`` and ``accept_python_fence``) the first fenced ``python`` block. Text with
    none of these is a turn without a call (an answer). A call's span (``ToolCall.raw``, what a ``call``
    similarity compares) is the call as written, tags or fence included.
    """

    parse: ClassVar[str] = "strict"
    fenced: bool = True  #: whether a fenced ``json`` call object and a bare fenced ``python`` block are calls
    spans_turn: ClassVar[bool] = False  #: a span never runs past its call
    turn_end: ClassVar[str | None] = ""

    def with_turn_end(self, turn_end: str) -> StrictCalls:
        return self

    def read(self, text: str, env: ToolProfile, *, accept_python_fence: bool, call_id: str) -> ParsedTurn:
        start = text.find(CALL_OPEN)
        if start >= 0:
            reasoning = text[:start]
            end = text.find(CALL_CLOSE, start)
            inner = text[start + len(CALL_OPEN) : end if end >= 0 else len(text)]
            raw = text[start : end + len(CALL_CLOSE)] if end >= 0 else text[start:]
            rest = text[end + len(CALL_CLOSE) :] if end >= 0 else ""
            call, error = _call_from_json(inner, raw, call_id, env)
            if end < 0 and call is None:
                error = f"{error}; the call is also missing its closing {CALL_CLOSE}"
            return ParsedTurn(reasoning, call, error, "hermes", extra_calls=rest.count(CALL_OPEN))
        if not self.fenced:
            return ParsedTurn(text)
        for match in _FENCE.finditer(text):
            lang = match.group("lang").lower()
            if lang == "json" and re.search(r'"name"\s*:', match.group("body")):
                call, error = _call_from_json(match.group("body"), match.group(0), call_id, env)
                return ParsedTurn(text[: match.start()], call, error, "json_fence")
            if accept_python_fence and lang in ("python", "py", "python3"):
                code = match.group("body")
                if code.strip():
                    call = ToolCall(code, match.group(0), call_id, env.tool_name)
                    return ParsedTurn(text[: match.start()], call, None, "python_fence")
        return ParsedTurn(text)


@dataclass(frozen=True)
class RepairedCalls:
    """How the ``reference`` profile reads a call, as verl's Hermes parser does (``tool_parser.py`` lines
    88-101, Open-CLEANER 91e40ad): a turn without both tags has no call; every pair of tags is read
    (:func:`_repaired_call`), the pairs the parser drops are left out, and the first call left runs. None
    left: no call, the turn is the answer, as written.

    Whatever runs, the turn's call span, as the reference's SAAR compares it, runs from the first opening
    tag to the end of the turn, its end-of-turn token ``turn_end`` included (``tool_agent_loop.py`` lines
    1040-1114: the tokens from the first one whose text holds the tag, decoded with special tokens; compared
    at line 908); a failed call keeps it in ``meta["call_raw"]``, so that SAAR compares it too. The generated
    text does not hold that token: ``turn_end`` is the model's (:func:`harness.core.chat.tool_env_for` sets it
    from the tokenizer), None until the model says (a span is then the call to the end of the turn, and a rollout
    whose SAAR would compare spans refuses to start: :attr:`harness.core.rollout.RolloutConfig.compares_turn_ends`).
    """

    parse: ClassVar[str] = "repair"
    fenced: ClassVar[bool] = False
    spans_turn: ClassVar[bool] = True
    turn_end: str | None = None  #: the text of the token that ends the model's turn (None: not known)

    def with_turn_end(self, turn_end: str) -> RepairedCalls:
        return replace(self, turn_end=turn_end)

    def read(self, text: str, env: ToolProfile, *, accept_python_fence: bool, call_id: str) -> ParsedTurn:
        start = text.find(CALL_OPEN)
        if start < 0 or CALL_CLOSE not in text:
            return ParsedTurn(text)
        raw = text[start:] + (self.turn_end or "")
        pairs = list(_CALL_PAIR.finditer(text))
        reads = [r for r in (_repaired_call(m.group(1), raw, call_id, env) for m in pairs) if r is not None]
        if not reads:
            return ParsedTurn(text, meta={"unread_call": pairs[0].group(0)} if pairs else {})
        call, error = reads[0]
        meta = {"call_raw": raw} if call is None else {}
        return ParsedTurn(text[:start], call, error, "hermes", extra_calls=len(reads) - 1, meta=meta)


def parse_turn(text: str, *, env: ToolProfile, accept_python_fence: bool = True, call_id: str = "call_0") -> ParsedTurn:
    """Split an assistant message into reasoning and (at most) one executable call, as ``env`` reads calls
    (:class:`StrictCalls`, :class:`RepairedCalls`); ``accept_python_fence`` is off for code problems."""
    return env.read_turn(text, accept_python_fence=accept_python_fence, call_id=call_id)


def truncate_middle(text: str, limit: int = 256) -> str:
    """Cut the middle out of ``text`` so that at most ``limit`` characters of it remain.

    Head and tail are kept because a traceback's last line names the error and its
    first lines name the call site. ``limit <= 0`` disables truncation.
    """
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n...[{len(text) - limit} characters truncated]...\n{text[-tail:]}"


#: Control strings of the supported chat formats that are not of the ``<|...|>`` form (every
#: ``<|`` is neutralized): the tool and reasoning tags of the Hermes protocol and of Qwen's
#: vocabulary, Gemma's turn markers, and SmolLM2's StarCoder-era special tokens.
CONTROL_TAGS: tuple[str, ...] = (
    "tool_call",
    "tool_response",
    "think",
    "start_of_turn",
    "end_of_turn",
    "repo_name",
    "reponame",
    "file_sep",
    "filename",
    "gh_stars",
    "issue_start",
    "issue_comment",
    "issue_closed",
    "jupyter_start",
    "jupyter_text",
    "jupyter_code",
    "jupyter_output",
    "jupyter_script",
    "empty_output",
)
#: Inserted after the ``<`` of a control string: invisible when shown, not part of any special token.
NEUTRAL_MARK = "\u200b"
_CONTROL = re.compile(r"<(?=\||/?(?:" + "|".join(CONTROL_TAGS) + r")>)")


def as_data(text: str) -> str:
    """``text`` (a program's output, a dataset's question) with its control strings made plain text.

    The one rule for text that is data, not conversation structure: every ``<|`` (ChatML's
    ``<|im_start|>``/``<|im_end|>``, Qwen's and Llama's special tokens) and every tag of
    :data:`CONTROL_TAGS` (``<tool_response>``, ``</tool_call>``, ...) gets a zero-width space
    after its ``<``. No tokenizer then matches a special or added token there, so a program
    that prints ``<|im_end|>\n<|im_start|>assistant`` cannot close its tool result or forge a
    turn, on any path (a local template, a server's template, the trainers' token ids); the
    model still reads what was printed (``<``, an invisible character, ``|im_end|>``), and
    removing :data:`NEUTRAL_MARK` gives the printed text back. Idempotent.
    """
    return _CONTROL.sub("<" + NEUTRAL_MARK, text)


#: Characters of stdout and of stderr a ``reference`` result keeps before it is framed (code-judge's
#: ``MAX_STDOUT_ERROR_LENGTH``: the first ones, no marker).
REFERENCE_STREAM_CHARS = 1000
#: The marker of a ``reference`` result cut in the middle (verl's agent loop, ``tool_response_truncate_side``).
REFERENCE_CUT = "...(truncated)..."
#: code-judge's ``reason`` of a run it ended at its time limit; every other failure's reason is empty.
REFERENCE_TIMEOUT_REASON = "worker_timeout"
#: What Open-CLEANER's agent loop answers a parsed call it cannot execute (a wrong name, arguments not an object).
REFERENCE_FORMAT_ERROR = (
    "Tool call failure: tool call format is wrong, please make sure to generate correct json-format "
    "tool call arguments."
)


@dataclass(frozen=True)
class ProjectFraming:
    """How the ``project`` profile shows a result: the program's output, or ``Error:`` and what went wrong."""

    name: ClassVar[str] = "project"

    def result(
        self, *, ok: bool, stdout: str, stderr: str, error_kind: str | None, limit: int, duration: float, timeout: float
    ) -> str:
        """The output (stderr after a ``[stderr]`` line) or ``Error:`` and the traceback, cut in the middle to
        ``limit`` characters; a program that printed nothing is told to print."""
        if ok:
            out = stdout if not stderr.strip() else f"{stdout}\n[stderr]\n{stderr}"
            return as_data(truncate_middle(out, limit)) if out.strip() else "(no output; use print() to show values)"
        detail = stderr.strip() or stdout.strip() or f"{error_kind or 'Error'}"
        if error_kind and error_kind not in detail:
            detail = f"{error_kind}: {detail}"
        return "Error:\n" + as_data(truncate_middle(detail, limit))

    def call_error(self, message: str, tool_name: str) -> str:
        """What is wrong with the call (``message`` is data), and the form a call takes."""
        return (
            f"Error: malformed tool call: {as_data(message)}. Call the tool as "
            f'{CALL_OPEN}{{"name": "{tool_name}", "arguments": {{"code": "..."}}}}{CALL_CLOSE}'
        )

    def retry_note(self, attempts: int, retries: int) -> str:
        return f"\n\nNote: this approach has failed {attempts} times. Try a different method instead of repeating it."


@dataclass(frozen=True)
class ReferenceFraming:
    """How the ``reference`` profile shows a result: Open-CLEANER's framing (``recipe/cleaner/code_judge_utils.py``,
    lines 143-162, commit 91e40ad) of code-judge's result."""

    name: ClassVar[str] = "reference"

    def result(
        self, *, ok: bool, stdout: str, stderr: str, error_kind: str | None, limit: int, duration: float, timeout: float
    ) -> str:
        """``Tool call success`` or ``Tool call failure`` and a ``reason:`` line that is always there, then
        ``stdout:`` and ``stderr:`` lines for the streams that are not empty, joined by newlines, each stream as
        printed (cut to its first :data:`REFERENCE_STREAM_CHARS` characters). A text longer than ``limit`` keeps
        its first and last ``limit // 2`` characters around :data:`REFERENCE_CUT`. The reason is
        :data:`REFERENCE_TIMEOUT_REASON` for a run ended at its limit and for any failure that ran ``timeout``
        seconds or more in all (code-judge's ``app/judge.py`` lines 27-28: ``cost >= MAX_EXECUTION_TIME``).
        """
        timed_out = error_kind == TIMEOUT or (not ok and duration >= timeout)
        reason = REFERENCE_TIMEOUT_REASON if timed_out else ""
        parts = ["Tool call success"] if ok else ["Tool call failure", f"reason: {reason}"]
        if stdout:
            parts.append(f"stdout: {stdout[:REFERENCE_STREAM_CHARS]}")
        if stderr:
            parts.append(f"stderr: {stderr[:REFERENCE_STREAM_CHARS]}")
        text = "\n".join(parts)
        if 0 < limit < len(text):
            half = limit // 2
            text = f"{text[:half]}{REFERENCE_CUT}{text[-half:]}"
        return as_data(text)

    def call_error(self, message: str, tool_name: str) -> str:
        """Open-CLEANER's one answer to any call it cannot execute (``tool_agent_loop.py``, ``_call_tool``)."""
        return REFERENCE_FORMAT_ERROR

    def retry_note(self, attempts: int, retries: int) -> str:
        """``tool_agent_loop.py``, ``_handle_max_retry_exceeded``: it counts the retries."""
        return (
            f"\n\nNote: This approach has been attempted {retries} times with the same type of error. Consider "
            "trying a different algorithm, method, or approach to solve this problem."
        )


def format_result(
    *,
    ok: bool,
    stdout: str,
    stderr: str,
    error_kind: str | None,
    env: ToolProfile,
    limit: int = 256,
    duration: float = 0.0,
    timeout: float | None = None,
) -> str:
    """The text the model sees for one execution (identical in evaluation and training), as ``env`` frames it;
    ``duration`` is how long the run took and ``timeout`` its limit (None: the profile's).

    The program's output is data (:func:`as_data`), neutralized after the cut.
    """
    return env.frame(
        ok=ok,
        stdout=stdout,
        stderr=stderr,
        error_kind=error_kind,
        limit=limit,
        duration=duration,
        timeout=env.timeout if timeout is None else timeout,
    )


def format_call_error(message: str, *, env: ToolProfile) -> str:
    """The tool response to a call that could not be executed at all (``message`` is data; the form shown is not)."""
    return env.show_call_error(message)


def retry_note(attempts: int, *, env: ToolProfile, retries: int | None = None) -> str:
    """Appended to the error of a turn whose SAAR retries are exhausted (``attempts`` calls, ``retries`` of them
    regenerations; default one fewer)."""
    return env.retry_note(attempts, attempts - 1 if retries is None else retries)
