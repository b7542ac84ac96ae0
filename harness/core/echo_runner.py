"""The program a ``reference`` tool call runs: the model's code, with a final bare expression echoed.

Open-CLEANER runs each call through a wrapper of its own (``recipe/cleaner/code_judge_utils.py``,
``code_template_setup``, lines 169-333) inside code-judge's python executor
(``code-judge/app/libs/executors/python_executor.py``), at commit 91e40ad. This module builds a
program with the same observable behaviour, written for this project, that any sandbox runs:

* a fresh interpreter; the code runs in a copy of the wrapper's namespace as it stood after its imports
  (``os``, ``sys``, ``ast``, ``base64``, ``traceback``, ``linecache``, everything of ``typing``,
  ``CodeType``, ``redirect_stdout``, ``redirect_stderr``, ``StringIO``, ``annotations``; not the modules the
  wrapper itself uses, such as ``io``), compiled with ``from __future__ import annotations`` in effect;
* the address space capped at :data:`ADDRESS_SPACE` (the sandbox's own limit applies where it is lower)
  and ``OPENBLAS_NUM_THREADS=1``, as code-judge sets them before the code runs;
* every byte the code writes to ``sys.stdout`` and ``sys.stderr`` taken, the first :data:`STREAM_BYTES` of each
  written on (the reference shows a stream's first 1000 characters, and more output is no failure there);
* when the last top-level statement is an expression, the lines before it run as one block and the
  lines of that expression are evaluated; a value that is not None is printed as its ``repr``. When
  the evaluation fails, those lines run again as statements;
* an error is printed to stderr as ``<Kind> at line <N>: <message>`` and, on the next line, two
  spaces and source line N of the block that failed, or as ``<Kind>: <message>`` when N is not a
  line of that block; N is the exception's own ``lineno`` when it has one, else the line of the
  innermost traceback frame, plus the lines before the block for the final expression. The program
  then exits with status 1 at once, so what it printed to stdout and did not flush is lost (stdout is
  block-buffered, as in a worker started without ``PYTHONUNBUFFERED``). Lines are the source's lines
  as Python splits them (at ``\n``, ``\r\n`` and ``\r`` only). What the code leaves to the wrapper's
  end (a final value whose ``repr`` raises, a ``KeyboardInterrupt``) is reported the same way, never
  as a traceback of the wrapper;
* at its time limit (wall clock, as ``alarm``) the program prints ``Suicide from timeout.`` to stdout
  (flushing what it had printed) and ends, a busy one too; a second later in CPU time, code stuck where
  Python cannot handle a signal (in C) is killed outright. Both end as a ``Timeout`` (``SIGXCPU``), which
  the ``reference`` framing reports as ``reason: worker_timeout``.

The wrapper's own imports never come from the work dir (files an earlier call left there); the code's
imports do, as in a fresh interpreter.

Not reproduced: the ``input`` argument a call may carry as stdin (the schema has no such argument), the
wrapper's own names ``CodeExecutionError`` and ``PersistentExecutor`` in the namespace, and output written
around ``sys.stdout`` (to ``sys.__stdout__``, file descriptor 1, or by a child process), which the sandbox's
output cap still bounds (16 MiB per stream under the ``reference`` runtime, :mod:`sandboxes.runtimes`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar

from harness.core.protocol import REFERENCE_STREAM_CHARS
from sandboxes.base import NONZERO_EXIT, ExecResult

#: code-judge's address-space cap: ``MAX_MEMORY`` (256 MiB by default, ``app/config.py`` line 32) plus the
#: 256 MiB it adds for Python (``app/libs/executors/python_executor.py`` lines 104-106, 138-139).
ADDRESS_SPACE = 512 * 1024 * 1024
#: Bytes of each stream a call writes on: every character the result shows, at four bytes at most each.
STREAM_BYTES = 4 * REFERENCE_STREAM_CHARS

#: The wrapper; ``__cleaner_run(code, limit, stream_bytes, address_space)`` runs one call.
_PRELUDE = r"""from __future__ import annotations
import os, sys
__cleaner_path = sys.path[:]
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != os.path.realpath(".")]
import ast, base64, linecache, traceback
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from types import CodeType
from typing import *
from typing import Any, Optional
__cleaner_namespace = {k: v for k, v in globals().items() if not k.startswith("__cleaner")}
import io, resource, signal
sys.path[:] = __cleaner_path


class __cleaner_Capped(io.RawIOBase):  # a stream's first cap bytes are written on; the rest is taken and dropped

    def __init__(self, fd, cap):
        self.fd, self.left = fd, cap

    def writable(self):
        return True

    def write(self, data):
        view = memoryview(data)
        size = len(view)
        view = view[: max(self.left, 0)]
        while len(view):
            written = os.write(self.fd, view)
            view, self.left = view[written:], self.left - written
        return size


def __cleaner_stream(stream, cap, line_buffering):
    raw = io.BufferedWriter(__cleaner_Capped(stream.fileno(), cap), 8192)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", line_buffering=line_buffering)


def __cleaner_lines(code):
    return code.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def __cleaner_error(exc, code, offset=0):
    lineno = exc.lineno if hasattr(exc, "lineno") else None
    if lineno is None:
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        lineno = tb.tb_lineno if tb is not None else -1
    if isinstance(lineno, int) and lineno != -1:
        lineno += offset
    kind = type(exc).__name__
    try:
        message = str(exc)
    except BaseException:
        message = "<exception str() failed>"
    lines = __cleaner_lines(code)
    if isinstance(lineno, int) and lineno != -1 and 0 <= lineno - 1 < len(lines):
        return f"{kind} at line {lineno}: {message}\n  {lines[lineno - 1]}"
    return f"{kind}: {message}"


def __cleaner_fail(exc, code, offset=0):
    print(__cleaner_error(exc, code, offset), file=sys.stderr)
    sys.stderr.flush()
    os._exit(1)


def __cleaner_timeout(signum, frame):
    print("Suicide from timeout.", flush=True)
    os.kill(os.getpid(), signal.SIGXCPU)


def __cleaner_limit(which, soft, hard):
    try:
        resource.setrlimit(which, (soft, hard))
    except (ValueError, OSError):  # the sandbox's own limit is lower
        pass


def __cleaner_echo(code, limit, stream_bytes, address_space):
    sys.stdout = __cleaner_stream(sys.stdout, stream_bytes, False)
    sys.stderr = __cleaner_stream(sys.stderr, stream_bytes, True)
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    __cleaner_limit(resource.RLIMIT_AS, address_space, resource.getrlimit(resource.RLIMIT_AS)[1])
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    signal.signal(signal.SIGALRM, __cleaner_timeout)
    signal.setitimer(signal.ITIMER_REAL, limit)
    __cleaner_limit(resource.RLIMIT_CPU, limit + 1, limit + 2)  # after the alarm: code stuck in C, which it cannot end
    namespace = dict(__cleaner_namespace)
    namespace.update({"__name__": "__main__", "__file__": "<string>"})
    try:
        tree = ast.parse(code)
    except Exception as exc:
        __cleaner_fail(exc, code)
    body, last = code, None
    offset = 0
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        node, lines, offset = tree.body[-1], __cleaner_lines(code), tree.body[-1].lineno - 1
        body = "\n".join(lines[:offset])
        last = "\n".join(lines[offset : node.end_lineno or node.lineno])
    if body:
        try:
            exec(compile(body, "<string>", "exec"), namespace)
        except Exception as exc:
            __cleaner_fail(exc, body)
    if last:
        try:
            value = eval(compile(last, "<string>", "eval"), namespace)
        except Exception:
            try:
                exec(compile(last, "<string>", "exec"), namespace)
            except Exception as exc:
                __cleaner_fail(exc, last, offset)
        else:
            if value is not None:
                print(repr(value))
    sys.stdout.flush()


def __cleaner_run(code, limit, stream_bytes, address_space):
    try:
        __cleaner_echo(code, limit, stream_bytes, address_space)
    except SystemExit:
        raise
    except BaseException as exc:  # what the program left to the end (a repr that raises, a KeyboardInterrupt)
        __cleaner_fail(exc, code)
"""


def echo_program(code: str, limit: float) -> str:
    """The program that runs ``code`` as a ``reference`` call does, ended after ``limit`` seconds."""
    return f"{_PRELUDE}\n__cleaner_run({code!r}, {max(1, math.ceil(limit))}, {STREAM_BYTES}, {ADDRESS_SPACE})\n"


_ERROR_LINE = re.compile(r"(?P<kind>[A-Za-z_]\w*)(?: at line \d+)?: ")


def error_kind(stderr: str) -> str | None:
    """The exception class an echo program reported on its stderr (it prints no traceback), or None.

    The report is the last thing the program writes (it exits right after), so the last line of that form is
    read: what the program wrote to stderr before it is the program's own text.
    """
    for line in reversed(stderr.split("\n")):
        match = _ERROR_LINE.match(line)
        if match:
            return match.group("kind")
    return None


@dataclass(frozen=True)
class EchoExecution:
    """How the ``reference`` profile runs a call: the program of :func:`echo_program`, which ends itself at the
    call's limit, under a sandbox limit one second later (the backstop); a failure's kind is the exception it
    reported (it prints no traceback)."""

    name: ClassVar[str] = "echo"

    def program(self, code: str, timeout: float) -> tuple[str, float]:
        """What the sandbox runs for ``code``, and the sandbox's limit."""
        return echo_program(code, timeout), timeout + 1.0

    def error_kind(self, result: ExecResult) -> str | None:
        if result.error_kind == NONZERO_EXIT:
            return error_kind(result.stderr) or result.error_kind
        return result.error_kind
