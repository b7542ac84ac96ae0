"""The docker backend: one long-lived, locked-down container per concurrent rollout.

- :mod:`~sandboxes.docker.policy`: :class:`~sandboxes.docker.policy.DockerConfig` (limits, isolation of a
  container), the container spec, the pool bound, and the command that starts the worker;
- :mod:`~sandboxes.docker.engine`: the engine, starting, describing and removing containers (and those a
  run left behind);
- :mod:`~sandboxes.docker.channel`: request/response frames over the container's attach socket (or one
  long-lived ``docker exec``), answered inside the container by the worker (:mod:`sandboxes.docker.worker`);
- :mod:`~sandboxes.docker.sandbox`: one container, one call at a time, replaced when it fails;
- :mod:`~sandboxes.docker.pool`: :class:`~sandboxes.docker.pool.DockerBackend`, the bounded warm pool, one
  sandbox per rollout (made by name through :func:`sandboxes.backends.get_backend`).

The image the containers run is :mod:`sandboxes.image`. Nothing is imported here, so that the worker's
package (standard library only) loads without the rest of the backend.
"""
