"""The docker backend: one long-lived, locked-down container per concurrent rollout.

This module is the backend's public face; the parts live beside it:

- policy, :mod:`sandboxes.docker_policy`: :class:`DockerConfig` (limits, isolation of a
  container), the container spec, the pool bound;
- process control, :mod:`sandboxes.docker_engine`: the engine, starting, describing and
  removing containers (and those a run left behind);
- transport, :mod:`sandboxes.docker_channel`: request/response frames over the
  container's attach socket (or one long-lived ``docker exec``), answered inside the
  container by the worker (:mod:`sandboxes.worker`);
- :class:`DockerSandbox` (:mod:`sandboxes.docker_sandbox`): one container, one call at a
  time, replaced when it fails; :class:`DockerBackend` (:mod:`sandboxes.docker_pool`):
  the bounded warm pool, one sandbox per rollout.

Isolation by default: no network (``network_mode=none``), a non-root user, a
read-only root file system with size-capped tmpfs work and temp dirs, memory
(no swap), pids and cpu limits, ``no-new-privileges``, every capability dropped,
no host mounts, and an environment of our own (nothing of the host's).
"""

from __future__ import annotations

from sandboxes.docker_engine import docker_available, image_present, owner_labels, reap_orphans, remove_leftovers
from sandboxes.docker_policy import (
    ACQUIRE_TIMEOUT_ENV,
    LABEL,
    MAX_CONTAINERS_ENV,
    WORKDIR,
    DockerConfig,
    default_acquire_timeout,
    default_max_containers,
)
from sandboxes.docker_pool import DockerBackend, PoolExhausted
from sandboxes.docker_sandbox import DockerSandbox

__all__ = [
    "ACQUIRE_TIMEOUT_ENV",
    "LABEL",
    "MAX_CONTAINERS_ENV",
    "WORKDIR",
    "DockerBackend",
    "DockerConfig",
    "DockerSandbox",
    "PoolExhausted",
    "default_acquire_timeout",
    "default_max_containers",
    "docker_available",
    "image_present",
    "owner_labels",
    "reap_orphans",
    "remove_leftovers",
]
