"""The ``cleaner`` Inspect sandbox provider: our backends behind ``inspect_ai.util.sandbox()``.

A task declares ``sandbox=("cleaner", CleanerSandboxConfig(backend="local"))`` (or
just ``("cleaner", "local")`` / ``"cleaner"`` for auto). Lifecycle:

- ``task_init`` creates the backend (:func:`sandboxes.backends.get_backend`, which
  decides ``auto`` and logs that choice: once per eval) and warms it. Inspect calls it
  with the task name ``"startup"`` and ``task_cleanup`` with ``"shutdown"``, so one
  backend serves every task of an eval that has the same config;
- ``sample_init`` acquires one :class:`~sandboxes.base.Sandbox` per sample and writes
  where its programs run (``backend``, ``isolation``, ...) to the sample's store under
  :data:`STORE_KEY`, so the eval log records it for every sample;
- ``sample_cleanup`` releases it (reset and pooled, or closed);
- ``task_cleanup`` shuts the backend down.

For the eval log's header, :func:`sandbox_metadata` gives the same description when
a task is built (``Task(metadata={"sandbox": sandbox_metadata(...)})``).

How many sandboxes Inspect holds at once is the provider's ``default_concurrency``
(:func:`sandbox_limit`), which Inspect reads before any ``task_init``: the largest bound
of the docker pools that tasks built in this process will use (a task says so when it is
built: :func:`expect_sandboxes`). Samples beyond it wait in Inspect's own limiter, which
has no deadline, rather than in the pool's ``acquire``, which fails after its acquire
timeout. ``inspect eval --max-sandboxes N`` replaces it.

Inspect's ``exec``/``write_file``/``read_file`` work against the sandbox's work
dir. Our own solver wants the structured :class:`~sandboxes.base.ExecResult`
(ok flag, error kind) rather than Inspect's text result; :func:`structured`
returns the underlying sandbox for that::

    from inspect_ai.util import sandbox
    result = await structured(sandbox()).run_python(code, timeout=10)

A sandbox that offers ``exec_command``/``write_file``/``read_file`` (the local one)
runs any command; one that offers only ``run_python`` (the interface minimum)
supports ``python3 -c CODE`` and ``python3 FILE [ARGS]``, and reports other
commands as failed with exit status 127 and a message saying why.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, Literal, Union, overload

from inspect_ai.util import ExecResult as InspectExecResult
from inspect_ai.util import (
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxUnavailableError,
    SandboxUserUnsupportedError,
    sandboxenv,
    store,
)
from pydantic import BaseModel, Field

from sandboxes.backends import Backend, describe_choice, get_backend
from sandboxes.base import TIMEOUT, ExecResult, Sandbox
from sandboxes.docker.policy import default_max_containers

PYTHON_NAMES = ("python", "python3")
#: Key of the sample store entry that says where the sample's programs ran.
STORE_KEY = "cleaner_sandbox"


class CleanerSandboxConfig(BaseModel, frozen=True):
    """Configuration of the ``cleaner`` sandbox provider."""

    backend: Literal["auto", "local", "docker"] = "auto"
    timeout: float = Field(default=30.0, gt=0)  #: seconds for an ``exec`` called without a timeout
    prewarm: int = Field(default=1, ge=0)  #: sandboxes made at task start
    #: the programs' runtime (:mod:`sandboxes.runtimes`), the tool environment's
    runtime: Literal["project", "reference"] = "project"
    options: dict[str, Any] = Field(default_factory=dict)  #: backend options (LocalConfig / DockerBackend)

    def __hash__(self) -> int:  # Inspect keeps sandbox specs in sets; the options dict is not hashable
        return hash(self.model_dump_json())


def _config(config: SandboxEnvironmentConfigType | None) -> CleanerSandboxConfig:
    if config is None:
        return CleanerSandboxConfig()
    if isinstance(config, CleanerSandboxConfig):
        return config
    if isinstance(config, str):
        if config not in ("auto", "local", "docker"):
            raise ValueError(
                f"sandbox ('cleaner', {config!r}): the string config names the backend and must be "
                "'auto', 'local' or 'docker'; use CleanerSandboxConfig(...) for options"
            )
        return CleanerSandboxConfig(backend=config)  # type: ignore[arg-type]
    if isinstance(config, BaseModel):
        return CleanerSandboxConfig(**config.model_dump())
    raise TypeError(f"sandbox 'cleaner': config must be a CleanerSandboxConfig or a backend name, not {config!r}")


def _key(config: CleanerSandboxConfig) -> str:
    return config.model_dump_json()


def sandbox_metadata(config: SandboxEnvironmentConfigType | None) -> dict[str, Any]:
    """Where a task's programs will run (``requested``, ``backend``, ``isolation``, ...), for eval metadata.

    Decides ``auto`` as the provider will; raises the same clear error when the local
    backend could not isolate programs here.
    """
    cfg = _config(config)
    return describe_choice(cfg.backend, runtime=cfg.runtime, **cfg.options)


#: The bounds of the docker pools that tasks built in this process will use (see :func:`expect_sandboxes`).
_docker_bounds: set[int] = set()


def expect_sandboxes(described: Mapping[str, Any]) -> None:
    """Record, while a task is built, where its sandboxes will come from: ``described`` is
    :func:`sandbox_metadata`'s answer for the task's config. A docker pool's bound (``max_containers``)
    then counts in :func:`sandbox_limit`; a local pool, which has no bound, does not.

    Inspect reads the limit before any task of an eval starts, so a task says it when it is built.
    """
    if described.get("backend") == "docker":
        _docker_bounds.add(int(described["max_containers"]))


def sandbox_limit() -> int | None:
    """How many ``cleaner`` sandboxes Inspect holds at once (``inspect eval --max-sandboxes`` replaces it).

    None (no limit) when no task built in this process uses docker: the local pool gives as many sandboxes as
    are asked for. Otherwise the largest docker pool bound those tasks recorded (:func:`expect_sandboxes`),
    never below :func:`~sandboxes.docker.policy.default_max_containers`: a sample beyond it then waits in
    Inspect's limiter, which has no deadline, instead of in the pool's ``acquire``, which fails after the
    acquire timeout. The limit covers every ``cleaner`` sandbox of the eval, local ones included.
    """
    if not _docker_bounds:
        return None
    return max(default_max_containers(), *_docker_bounds)


@sandboxenv(name="cleaner")
class CleanerSandboxEnvironment(SandboxEnvironment):
    """One sample's sandbox, backed by a :class:`~sandboxes.base.Sandbox` of our backends."""

    _backends: dict[str, Backend] = {}
    _users: dict[str, int] = {}  #: task_init calls not yet matched by task_cleanup, per backend

    def __init__(self, sandbox: Sandbox, backend: Backend, config: CleanerSandboxConfig) -> None:
        super().__init__()
        self.sandbox = sandbox
        self.backend = backend
        self.config = config

    # ------------------------------------------------------------- lifecycle

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return CleanerSandboxConfig(**config)

    @classmethod
    def default_concurrency(cls) -> int | None:
        """Inspect's limit on sandboxes at once when ``--max-sandboxes`` is not given: :func:`sandbox_limit`."""
        return sandbox_limit()

    @classmethod
    def _backend(cls, config: CleanerSandboxConfig) -> Backend:
        key = _key(config)
        if key not in cls._backends:
            cls._backends[key] = get_backend(config.backend, runtime=config.runtime, **config.options)
        return cls._backends[key]

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        cfg = _config(config)
        backend = cls._backend(cfg)
        cls._users[_key(cfg)] = cls._users.get(_key(cfg), 0) + 1
        if cfg.prewarm:
            await backend.prewarm(cfg.prewarm)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        cfg = _config(config)
        backend = cls._backend(cfg)
        env = cls(await backend.acquire(), backend, cfg)
        store().set(STORE_KEY, {"requested": cfg.backend, **backend.describe()})
        return {"default": env}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for env in environments.values():
            own = env.as_type(CleanerSandboxEnvironment)
            await own.backend.release(own.sandbox)

    @classmethod
    async def task_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool) -> None:
        key = _key(_config(config))
        cls._users[key] = cls._users.get(key, 1) - 1
        if cls._users[key] > 0:
            return  # another task_init of this eval still uses it
        cls._users.pop(key, None)
        backend = cls._backends.pop(key, None)
        if backend is not None:  # our sandboxes hold processes and temp dirs: always shut down
            await backend.shutdown()

    # ------------------------------------------------------------- exec

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
        if user is not None:
            raise SandboxUserUnsupportedError(f"the 'cleaner' sandbox runs commands as its own user, not {user!r}")
        if not cmd:
            raise ValueError("exec needs a non-empty command")
        limit = float(timeout) if timeout is not None else self.config.timeout
        stdin = input if input is not None else b""
        exec_command = getattr(self.sandbox, "exec_command", None)
        if exec_command is not None:
            result: ExecResult = await exec_command(cmd, stdin=stdin, timeout=limit, cwd=cwd, env=env)
        else:
            result = await self._exec_python_only(cmd, stdin, limit, cwd, env)
        if result.sandbox_failed:
            raise SandboxUnavailableError(f"the {self.sandbox.backend} sandbox failed: {result.stderr.strip()}")
        if result.error_kind == TIMEOUT:
            raise TimeoutError(f"command timed out after {limit:g} s: {cmd[0]}")
        code = result.exit_code if result.exit_code is not None else 1
        return InspectExecResult(success=result.ok, returncode=code, stdout=result.stdout, stderr=result.stderr)

    async def _exec_python_only(
        self, cmd: list[str], stdin: str | bytes, timeout: float, cwd: str | None, env: dict[str, str] | None
    ) -> ExecResult:
        """``python3 -c CODE`` and ``python3 FILE [ARGS]`` on a sandbox that only has ``run_python``."""
        if cwd is not None or env:
            raise ValueError(f"the {self.sandbox.backend} sandbox runs commands without cwd/env overrides")
        args = cmd[1:]
        if cmd[0].rsplit("/", 1)[-1] in PYTHON_NAMES and args:
            if args[0] == "-c" and len(args) >= 2:
                prelude = f"import sys; sys.argv = {json.dumps(['-c', *args[2:]])}\n"
                return await self.sandbox.run_python(prelude + args[1], timeout=timeout, stdin=stdin)
            if not args[0].startswith("-"):
                code = (
                    f"import runpy, sys; sys.argv = {json.dumps(args)}; "
                    f"runpy.run_path({args[0]!r}, run_name='__main__')"
                )
                return await self.sandbox.run_python(code, timeout=timeout, stdin=stdin)
        return ExecResult(
            ok=False,
            exit_code=127,
            stderr=f"the {self.sandbox.backend} sandbox runs only `python3 -c CODE` and `python3 FILE`, not {cmd!r}",
            error_kind="NonZeroExit",
        )

    # ------------------------------------------------------------- files

    async def write_file(self, file: str, contents: str | bytes) -> None:
        writer = getattr(self.sandbox, "write_file", None)
        if writer is not None:
            await writer(file, contents)
            return
        result = await self.sandbox.run_python("pass", files={file: contents}, timeout=self.config.timeout)
        if not result.ok:
            raise PermissionError(f"could not write {file!r} in the sandbox: {result.stderr.strip()}")

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str | bytes]:  # noqa: UP007 - Inspect's signature
        reader = getattr(self.sandbox, "read_file", None)
        if reader is not None:
            data: bytes = await reader(file)
        else:
            code = f"import base64, sys; sys.stdout.write(base64.b64encode(open({file!r}, 'rb').read()).decode())"
            result = await self.sandbox.run_python(code, timeout=self.config.timeout)
            if not result.ok:
                if result.error_kind in ("FileNotFoundError", "IsADirectoryError", "PermissionError"):
                    raise FileNotFoundError(f"no readable file {file!r} in the sandbox")
                raise RuntimeError(f"could not read {file!r} from the sandbox: {result.stderr.strip()}")
            data = base64.b64decode(result.stdout)
        return data.decode("utf-8") if text else data


def structured(env: SandboxEnvironment) -> Sandbox:
    """The :class:`~sandboxes.base.Sandbox` behind a ``cleaner`` sandbox environment.

    ``env`` is what ``inspect_ai.util.sandbox()`` returns (Inspect's event-recording
    proxy is seen through). Raises ``TypeError`` when the task's sandbox is not ``cleaner``.
    """
    try:
        return env.as_type(CleanerSandboxEnvironment).sandbox
    except TypeError:
        raise TypeError(
            f"the sample's sandbox is {type(env).__name__}, not the 'cleaner' sandbox; "
            "declare the task with sandbox=('cleaner', ...) to get structured results"
        ) from None
