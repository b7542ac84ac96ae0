"""The one interface every code-execution backend implements.

The rollout core (``harness``) and the trainer only ever see :class:`Sandbox` and
:class:`ExecResult`; whether the code ran in a Docker container or a local child
process is a backend detail. A :class:`Backend` is a pool of sandboxes; the registry
that makes one by name is :mod:`sandboxes.backends`. Nothing here imports the harness
or any backend.
"""

from __future__ import annotations

import abc
from dataclasses import asdict, dataclass, field
from typing import Any

#: Error kinds produced by the sandbox itself (as opposed to Python exception names
#: such as ``SyntaxError`` or ``NameError``, which are taken from the traceback).
TIMEOUT = "Timeout"
MEMORY = "MemoryError"
OUTPUT_LIMIT = "OutputLimitExceeded"
KILLED = "Killed"
SEGFAULT = "Segfault"
NONZERO_EXIT = "NonZeroExit"
SANDBOX_ERROR = "SandboxError"


@dataclass(frozen=True)
class ExecResult:
    """Structured outcome of one program run in a sandbox.

    ``ok`` is the single flag SAAR keys on: the program exited 0 within its limits.
    ``error_kind`` names what went wrong when it did not (the exception class from
    the traceback, or one of the sandbox kinds above). ``sandbox_failed`` marks a
    failure of the sandbox rather than of the program (dead container, broken
    worker): such a result must never be scored as the program's success.
    """

    ok: bool
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = 0
    error_kind: str | None = None
    duration: float = 0.0
    sandbox_failed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SandboxError(RuntimeError):
    """The sandbox could not run the program at all (not the program's fault)."""


class Sandbox(abc.ABC):
    """One isolated Python execution environment, used by one rollout at a time."""

    #: Human-readable backend name (``"local"``, ``"docker"``).
    backend: str = "abstract"

    @abc.abstractmethod
    async def run_python(
        self,
        code: str,
        *,
        timeout: float = 10.0,
        stdin: str | bytes = b"",
        files: dict[str, str | bytes] | None = None,
    ) -> ExecResult:
        """Run ``code`` as a Python program and return its structured result.

        Never raises for anything the program does (crash, timeout, flood); a
        failure of the sandbox itself is returned with ``sandbox_failed=True``.
        ``files`` are written to the working directory first.
        """

    async def reset(self) -> None:  # noqa: B027 - optional hook
        """Return the sandbox to a clean state between rollouts (default: nothing)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release every resource held (processes, containers, directories)."""

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Backend(abc.ABC):
    """A factory and pool of sandboxes: one per concurrent rollout."""

    #: Name the registry knows this backend by.
    name: str = "abstract"

    @abc.abstractmethod
    async def acquire(self) -> Sandbox:
        """A clean sandbox for one rollout (a pooled one when available)."""

    @abc.abstractmethod
    async def release(self, sandbox: Sandbox) -> None:
        """Take back a sandbox from :meth:`acquire`: reset it for reuse, or close it."""

    @abc.abstractmethod
    async def shutdown(self) -> None:
        """Close every sandbox this backend made; the backend is unusable afterwards."""

    async def prewarm(self, n: int | None = None) -> None:  # noqa: B027 - optional hook, default nothing
        """Make sandboxes ahead of the first :meth:`acquire` (default: nothing)."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Where programs run: at least ``backend`` and ``isolation`` (for logs, eval metadata, reports)."""

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()
