"""The runtime a program meets: which Python packages it can import and how much output it may write.

A tool environment names one (``ToolEnv.runtime``); :func:`sandboxes.backends.get_backend` turns it into the
options of the backend that runs the programs (:func:`runtime_options`), so each profile gets its own:

``project``
    The project's: the ``project`` image (numpy and sympy), each stream capped at 4 MiB. The backends' defaults;
    nothing changes.
``reference``
    Open-CLEANER's (commit 91e40ad): the packages of its runtime that a program imports
    (``sandboxes/reference_runtime.txt``, derived by :mod:`sandboxes.reference_runtime`), and each stream capped at
    :data:`REFERENCE_OUTPUT_BYTES`. code-judge takes any amount of output: it reads both pipes whole
    (``code-judge/app/libs/executors/executor.py`` line 84, ``communicate`` with no bound) and only then cuts each
    to its first 1000 characters (``app/worker_manager.py`` lines 84-86; ``MAX_STDOUT_ERROR_LENGTH``,
    ``app/config.py`` line 9). A sandbox must bound what it holds, so the cap is finite: above the 6 MB the
    reference was seen to take, for what a program writes past ``sys.stdout`` (fd 1, a child process), which the
    echo wrapper does not cut (:mod:`harness.core.echo_runner`).

    - docker: the ``reference`` image (:mod:`sandboxes.image`), and the container's memory raised by the two
      larger streams the worker may hold, so a program keeps the same share of it as under ``project``;
    - local: the configured interpreter runs the programs, with the same cap. Its packages are its own: those of
      the list it cannot import are named in a warning when the backend is made and recorded in the backend's
      description (``missing_modules``, in every eval log); a program importing one fails as it would under
      ``project``. Only the docker image pins the versions.
"""

from __future__ import annotations

from typing import Any, Literal

from sandboxes.reference_runtime import KEPT

Runtime = Literal["project", "reference"]
RUNTIMES: tuple[Runtime, ...] = ("project", "reference")
#: Bytes per stream a ``reference`` program may write before it is stopped (``OutputLimitExceeded``).
REFERENCE_OUTPUT_BYTES = 16 * 1024 * 1024
#: The modules of ``sandboxes/reference_runtime.txt`` a program imports (its kept packages, imported by their names).
REFERENCE_MODULES: tuple[str, ...] = tuple(KEPT)


def check_runtime(runtime: str) -> Runtime:
    """``runtime`` when it names one; a ValueError listing them otherwise."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown sandbox runtime {runtime!r}; runtimes: {', '.join(RUNTIMES)}")
    return runtime  # type: ignore[return-value]


def runtime_image(runtime: str) -> str | None:
    """The docker image a runtime's programs run in (None: the backend's default, the ``project`` image)."""
    if check_runtime(runtime) == "project":
        return None
    from sandboxes.image import image_tag

    return image_tag("reference")


def runtime_options(runtime: str, backend: str) -> dict[str, Any]:
    """The options of the resolved ``backend`` ("local" or "docker") that make its programs meet ``runtime``."""
    if check_runtime(runtime) == "project":
        return {}
    if backend == "docker":
        from sandboxes.docker.policy import DockerConfig, size_bytes

        base = DockerConfig()
        memory = size_bytes(base.memory, "memory") + 2 * (REFERENCE_OUTPUT_BYTES - base.max_output)
        return {"image": runtime_image(runtime), "max_output": REFERENCE_OUTPUT_BYTES, "memory": f"{memory >> 20}m"}
    if backend == "local":
        return {"max_output_bytes": REFERENCE_OUTPUT_BYTES, "require_modules": REFERENCE_MODULES}
    raise ValueError(f"sandbox backend {backend!r}: expected 'local' or 'docker'")
