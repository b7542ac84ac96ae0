"""The model and sandbox providers, registered with Inspect by the entry point (:mod:`cleaner.tasks` imports this).

Providers are registered with factories that import lazily, as Inspect's own
providers are, so that listing tasks does not load torch.
"""

from __future__ import annotations

from inspect_ai.model import ModelAPI, modelapi


@modelapi(name="replay")
def replay() -> type[ModelAPI]:
    from harness.evals.replay_provider import ReplayAPI

    return ReplayAPI


@modelapi(name="embedded")
def embedded() -> type[ModelAPI]:
    from harness.evals.embedded import EmbeddedAPI

    return EmbeddedAPI


try:  # the sandbox provider registers itself on import (@sandboxenv)
    import sandboxes.inspect_provider  # noqa: F401
except ImportError as exc:  # pragma: no cover - only while the provider is missing
    raise ImportError(f"the cleaner sandbox provider could not be imported: {exc}") from exc
