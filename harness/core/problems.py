"""The one builder of a rollout's configuration per problem kind (:mod:`harness.core.kinds`).

Evaluation (:mod:`harness.evals.tasks`) and both trainers (``trainers/openrlhf_plugin/executor.py``,
``trainers/cpu/rollouts.py``) build their :class:`~harness.core.rollout.RolloutConfig` with
:func:`rollout_config`, so the rule lives here only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from harness.core.kinds import Kind, python_fence_is_call
from harness.core.rollout import RolloutConfig


def rollout_config(kind: Kind, base: RolloutConfig | None = None, **fields: Any) -> RolloutConfig:
    """The rollout configuration for a problem of ``kind``.

    ``base`` and ``fields`` give the limits, the SAAR settings and the tool environment (without ``base``,
    ``fields`` must name ``tool_env``: there is no default profile); the parse mode always comes from the
    kind and cannot be overridden.
    """
    if "accept_python_fence" in fields:
        raise ValueError("accept_python_fence follows the problem kind; it is not set by hand")
    config = replace(base, **fields) if base is not None else RolloutConfig(**fields)
    return replace(config, accept_python_fence=python_fence_is_call(kind))
