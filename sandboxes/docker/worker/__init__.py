"""The worker that runs inside each sandbox container (standard library only).

Not installed in the image: :func:`sandboxes.docker.policy.worker_command` carries the source of these
modules to ``python3 -c`` at container start, and runs :mod:`sandboxes.docker.worker.main`.
"""
