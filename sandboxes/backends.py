"""The backend registry: where sandboxes come from.

A :class:`Backend` hands out one :class:`~sandboxes.base.Sandbox` per concurrent
rollout and takes it back afterwards. The Inspect provider, the trainer and the
CLI ask :func:`get_backend` for one by name and never import a backend module
themselves:

- ``"local"``: :class:`LocalBackend`, child processes on this machine (:mod:`sandboxes.local.sandbox`);
- ``"docker"``: ``DockerBackend`` of :mod:`sandboxes.docker.pool`, one container per rollout;
- ``"auto"`` or ``None``: docker when a daemon answers and the sandbox image (of the
  runtime asked for) is present, else local. The choice is logged once, when the backend is made (the
  Inspect provider makes one per eval), and :meth:`Backend.describe` returns it
  (backend, isolation) for logs and reports.

``runtime`` (:mod:`sandboxes.runtimes`: ``"project"``, the default, or ``"reference"``) adds the options that
give the chosen backend's programs that runtime (image, output cap).

The docker module is imported lazily, so that the local backend works on a machine
without the ``docker`` SDK or daemon.
"""

from __future__ import annotations

import logging
from typing import Any

from sandboxes.base import Backend
from sandboxes.local.pool import LocalBackend
from sandboxes.runtimes import runtime_image, runtime_options

logger = logging.getLogger(__name__)

__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "LocalBackend",
    "describe_choice",
    "docker_ready",
    "get_backend",
    "resolve_backend_name",
]

BACKEND_NAMES = ("auto", "local", "docker")


def _docker_modules() -> tuple[Any, Any] | None:
    """The docker backend's engine and pool modules, or None when they (or the docker SDK) cannot be imported."""
    try:
        from sandboxes.docker import engine, pool
    except ImportError as exc:
        logger.debug("docker backend unavailable: %s", exc)
        return None
    return engine, pool


def docker_ready(image: str | None = None) -> bool:
    """Whether the docker backend can run here: module importable, daemon answering, ``image`` (default: the
    ``project`` image) present."""
    modules = _docker_modules()
    if modules is None:
        return False
    engine, _ = modules
    try:
        return bool(engine.docker_available() and engine.image_present(image))
    except Exception as exc:  # an engine that answers strangely counts as absent
        logger.debug("docker check failed: %s", exc)
        return False


def resolve_backend_name(name: str | None, runtime: str = "project") -> str:
    """``"local"`` or ``"docker"`` for a requested name (``None``/``"auto"`` decided here, quietly: docker when
    the ``runtime``'s image is present)."""
    if name is not None and name not in BACKEND_NAMES:
        raise ValueError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    image = runtime_image(runtime)
    if name in ("local", "docker"):
        return name
    return "docker" if docker_ready(image) else "local"


def _make(chosen: str, options: dict[str, Any]) -> Backend:
    """A backend by resolved name; makes no sandbox yet (both backends start lazily)."""
    if chosen == "local":
        try:
            return LocalBackend(**options)
        except TypeError as exc:
            raise ValueError(f"bad option for the local sandbox backend: {exc}") from None
    modules = _docker_modules()
    if modules is None:
        raise RuntimeError(
            "the docker sandbox backend cannot be imported (is the `docker` Python package installed?); "
            "use --backend local"
        )
    try:
        backend: Backend = modules[1].DockerBackend(**options)
    except TypeError as exc:
        raise ValueError(f"bad option for the docker sandbox backend: {exc}") from None
    return backend


def get_backend(name: str | None = None, *, runtime: str = "project", **options: Any) -> Backend:
    """A backend by name: ``"local"``, ``"docker"``, or ``"auto"``/``None`` (docker when ready, else local), whose
    programs meet ``runtime`` (:func:`sandboxes.runtimes.runtime_options`; an option given here wins).

    ``options`` go to the backend's constructor (for local: ``max_idle`` and the
    fields of :class:`~sandboxes.local.policy.LocalConfig`; for docker: those of
    ``DockerBackend``). An option the backend does not know is an error. For
    ``auto`` the choice is logged here, once per backend made.

    Raises:
        IsolationUnavailable: the local backend was chosen and cannot isolate programs here.
    """
    chosen = resolve_backend_name(name, runtime)
    backend = _make(chosen, {**runtime_options(runtime, chosen), **options})
    if name in (None, "auto"):
        if chosen == "local":
            logger.warning(
                "sandbox 'auto': no Docker engine with the sandbox image here, so the local backend runs the "
                "programs (%s). For docker: start an engine and build the image (docs/docker.md).",
                _isolation_text(backend.describe()),
            )
        else:
            logger.info(
                "sandbox 'auto': the docker backend runs the programs (%s)", _isolation_text(backend.describe())
            )
    return backend


def describe_choice(name: str | None = None, *, runtime: str = "project", **options: Any) -> dict[str, Any]:
    """What :func:`get_backend` would choose, without a log line: ``requested``, ``backend``, ``isolation``, ...
    (and ``runtime`` when it is not ``project``)."""
    chosen = resolve_backend_name(name, runtime)
    described = _make(chosen, {**runtime_options(runtime, chosen), **options}).describe()
    return {"requested": name or "auto", **described, **({"runtime": runtime} if runtime != "project" else {})}


def _isolation_text(described: dict[str, Any]) -> str:
    """One phrase for a log line: ``isolation bwrap, /path/to/bwrap``."""
    where = described.get("bwrap") or described.get("image")
    return f"isolation {described['isolation']}" + (f", {where}" if where else "")
