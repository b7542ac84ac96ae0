"""Classify a finished program run into an error kind.

Every backend ends a run with the same facts: an exit status, the text on stderr
and what the sandbox itself had to do (kill on timeout, cut a flood, OOM kill).
:func:`classify` turns those facts into the one ``error_kind`` string that
:class:`~sandboxes.base.ExecResult` carries and SAAR records, so that the local and
the docker backend name the same failure the same way.

The order of the checks is the order of certainty: what the sandbox did is known
for sure; an exception named by a Python traceback is next; a bare signal or exit
status says least.
"""

from __future__ import annotations

import re
import signal

from sandboxes.base import KILLED, MEMORY, NONZERO_EXIT, OUTPUT_LIMIT, SEGFAULT, TIMEOUT

#: The header Python prints before every uncaught-exception traceback.
_TRACEBACK = "Traceback (most recent call last):"
#: A traceback frame line; a SyntaxError raised while compiling ``__main__`` has only this, no header.
_FRAME = re.compile(r'^\s+File "[^"\n]*", line \d+')
#: An exception line: an unindented (possibly dotted) class name, optionally ``: message``.
_EXC_LINE = re.compile(r"^(?P<name>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)(?::|$)")
#: Texts a run out of memory leaves behind when it dies without a Python MemoryError.
_MEMORY_HINTS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")


def exception_name(stderr: str) -> str | None:
    """The class name of the last uncaught Python exception reported in ``stderr``.

    Looks for the last traceback frame (``  File "...", line N``) and takes the
    first unindented line after it, which is where Python prints the exception;
    the caret lines of a SyntaxError are indented and skipped. A dotted name
    (``numpy.core._exceptions._ArrayMemoryError``) is reduced to its last part.
    Returns ``None`` when stderr holds no traceback.
    """
    lines = stderr.splitlines()
    last_frame = -1
    for i, line in enumerate(lines):
        if _FRAME.match(line):
            last_frame = i
    if last_frame < 0:
        return None
    for line in lines[last_frame + 1 :]:
        if not line or line[0].isspace():
            continue
        match = _EXC_LINE.match(line)
        if match:
            return match.group("name").rsplit(".", 1)[-1]
        return None
    return None


def classify(
    exit_code: int | None,
    stderr: str = "",
    *,
    timed_out: bool = False,
    output_exceeded: bool = False,
    oom_killed: bool = False,
    shell_signals: bool = False,
) -> str | None:
    """Name what went wrong in a finished run, or ``None`` when it succeeded.

    Args:
        exit_code: The exit status. A negative value ``-N`` means "killed by signal N"
            (the convention of :mod:`subprocess`). ``None`` means unknown (the sandbox
            killed the run before it ended; pass ``timed_out`` or ``output_exceeded``).
        stderr: The program's standard error, decoded.
        timed_out: The sandbox killed the run at its wall-clock timeout.
        output_exceeded: The sandbox stopped the run because its output passed the cap.
        oom_killed: The sandbox knows the run was killed for memory (a container's
            ``OOMKilled``); a bare SIGKILL is then a MemoryError, not ``Killed``.
        shell_signals: Read exit statuses 129..159 as ``128 + signal``, as shells,
            ``docker exec`` and bubblewrap report a child killed by a signal.

    Returns:
        ``None`` for success; else a Python exception class name (``SyntaxError``,
        ``NameError``, ``ZeroDivisionError``, ...), ``MemoryError`` for any exhaustion
        of memory, or one of the sandbox kinds ``Timeout``, ``OutputLimitExceeded``,
        ``Killed``, ``Segfault``, ``NonZeroExit``.
    """
    if timed_out:
        return TIMEOUT
    if output_exceeded:
        return OUTPUT_LIMIT
    if exit_code == 0:
        return None

    name = exception_name(stderr)
    if name is not None:
        return MEMORY if name.endswith("MemoryError") else name

    sig: int | None = None
    if exit_code is not None and exit_code < 0:
        sig = -exit_code
    elif exit_code is not None and shell_signals and 128 < exit_code < 160:
        sig = exit_code - 128

    if oom_killed:
        return MEMORY
    memory_hint = any(hint in stderr for hint in _MEMORY_HINTS)
    if sig is None:
        if exit_code is None:
            return KILLED
        return MEMORY if memory_hint else NONZERO_EXIT
    if sig == signal.SIGXCPU:  # the CPU-time rlimit's soft limit: the run used up its CPU budget
        return TIMEOUT
    if sig in (signal.SIGSEGV, signal.SIGBUS):
        return MEMORY if memory_hint else SEGFAULT
    if memory_hint:  # SIGKILL/SIGABRT after a failed allocation
        return MEMORY
    return KILLED
