"""How many samples a benchmark task runs at once, and a warning when that leaves a local engine idle.

A GPU engine (vLLM, SGLang) batches hundreds of requests; Inspect's own default sends a ``vllm/`` or
``sglang/`` model at most ``adaptive_connections``' ceiling (100) at once, and 10 with a fixed
``max_connections``. A paper preset therefore runs its whole protocol at once, up to :data:`MAX_IN_FLIGHT`
samples (:func:`preset_concurrency`): the task's ``GenerateConfig`` asks for that many requests at once
(Inspect's adaptive concurrency, starting at its ceiling, so it only comes down if a provider rate-limits), the
sample limit follows it, and the sandbox pool is sized to it (on docker, Inspect's limit on sandboxes at once follows
the pool's bound: :func:`sandboxes.inspect_provider.sandbox_limit`). ``inspect eval --max-connections N`` (a fixed
limit) and ``--max-samples N`` override it, as for any task. What it costs and how the figures are derived:
docs/evaluation.md ("How many samples at once") and docs/scaling.md.

:class:`IdleEngineWarning` (an Inspect hook, registered when this module is imported, as every task file does)
logs one warning at the start of a task whose model is a local engine (``vllm/``, ``sglang/``, or any provider
pointed at a server on loopback) and whose samples in flight are well below what the run needs: below half of
the preset's concurrency, or, without a preset or explicit settings, below half of the run's samples (at most
:data:`MAX_IN_FLIGHT`). The embedded and replay models and remote APIs never get it; nor does a run without a
preset whose limits were set on purpose (``--max-connections``, ``--max-samples``).
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from inspect_ai.hooks import Hooks, TaskStart, hooks
from inspect_ai.log import EvalSpec
from inspect_ai.model import GenerateConfig
from inspect_ai.util import AdaptiveConcurrency

logger = logging.getLogger(__name__)

#: The most samples a preset runs at once: twice a GPU engine's usual batch (vLLM's ``max_num_seqs`` is 256
#: below H100-class cards), so the batch stays full while some samples wait on their programs.
MAX_IN_FLIGHT = 512
#: Inspect's requests at once for a provider with a fixed ``max_connections`` (``vllm/`` and ``sglang/``'s).
INSPECT_FIXED_CONNECTIONS = 10
#: Adaptive concurrency's lower bound (Inspect's): the least a rate-limited provider is brought down to.
ADAPTIVE_MIN = 10
#: The model providers that are a local engine whatever their address.
ENGINE_PROVIDERS = ("vllm", "sglang")
#: The task metadata key that records a task's concurrency.
METADATA_KEY = "concurrency"


@dataclass(frozen=True)
class Concurrency:
    """How many samples run at once: requests to the engine, samples in flight, sandboxes in the pool."""

    in_flight: int

    def __post_init__(self) -> None:
        if self.in_flight < 1:
            raise ValueError(f"samples in flight must be >= 1, got {self.in_flight}")

    def generate_config(self) -> GenerateConfig:
        """Requests at once: adaptive, starting at (and capped by) ``in_flight``; ``--max-connections`` replaces it."""
        n = self.in_flight
        return GenerateConfig(adaptive_connections=AdaptiveConcurrency(min=min(ADAPTIVE_MIN, n), start=n, max=n))

    def sandbox_options(self, backend: str) -> dict[str, Any]:
        """The sandbox pool's options for the resolved ``backend`` ("local" or "docker"), so that every sample in
        flight gets a sandbox without waiting: docker's bound on containers raised to ``in_flight`` (never below its
        own, ``CLEANER_SANDBOX_MAX_CONTAINERS``); the local pool already keeps as many as were in use at once."""
        if backend == "local":
            return {}
        if backend == "docker":
            from sandboxes.docker.policy import default_max_containers

            return {"max_containers": max(self.in_flight, default_max_containers())}
        raise ValueError(f"sandbox backend {backend!r}: expected 'local' or 'docker'")

    def to_dict(self) -> dict[str, Any]:
        return {"in_flight": self.in_flight}


def preset_concurrency(preset: str | None, samples: int) -> Concurrency | None:
    """A preset's concurrency for a run of ``samples`` (problems x epochs): all of them, at most
    :data:`MAX_IN_FLIGHT`. None without a preset: Inspect's defaults and the pool's own."""
    if preset is None:
        return None
    return Concurrency(min(max(samples, 1), MAX_IN_FLIGHT))


# ------------------------------------------------------------------ the idle-engine warning


def is_local_engine(model: str, base_url: str | None = None, model_args: dict[str, Any] | None = None) -> bool:
    """Whether ``model`` is served by a local engine: ``vllm/`` or ``sglang/``, or a server on loopback."""
    provider = model.split("/", 1)[0]
    if provider in ENGINE_PROVIDERS:
        return True
    urls = [base_url, *((model_args or {}).get(k) for k in ("base_url", "host"))]
    return any(_loopback(str(url)) for url in urls if url)


def _loopback(url: str) -> bool:
    host = urlparse(url if "//" in url else f"//{url}").hostname
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class InFlight:
    """The samples a task runs at once, as Inspect will resolve them, and which setting decides it."""

    samples: int
    setting: str  #: what limits it ("--max-samples 16", "Inspect's adaptive default", ...)
    explicit: bool  #: set on the command line (or in eval()), not left to the task or Inspect


def resolve_in_flight(spec: EvalSpec) -> InFlight:
    """The samples in flight of a task as Inspect resolves them: ``max_samples``, else the connections
    (``--max-connections``, else the task's adaptive concurrency, else Inspect's)."""
    given = spec.model_generate_config  # what the command line (eval()) gave, not the task's
    task = (spec.metadata or {}).get(METADATA_KEY) or {}
    if given.max_connections is not None:
        connections, setting = given.max_connections, f"--max-connections {given.max_connections}"
    elif given.adaptive_connections is False:
        connections, setting = INSPECT_FIXED_CONNECTIONS, "Inspect's fixed default max_connections"
    elif given.adaptive_connections is not None:
        connections, setting = _adaptive_max(given.adaptive_connections), "--adaptive-connections"
    elif task.get("in_flight"):
        connections, setting = int(task["in_flight"]), "the preset's concurrency"
    else:
        connections, setting = _adaptive_max(None), "Inspect's default (adaptive concurrency)"
    explicit = given.max_connections is not None or given.adaptive_connections is not None
    max_samples = spec.config.max_samples
    if max_samples is not None and max_samples < connections:
        return InFlight(max_samples, f"--max-samples {max_samples}", True)
    return InFlight(connections, setting, explicit or max_samples is not None)


def _adaptive_max(value: Any) -> int:
    """The ceiling of an ``adaptive_connections`` value (True/None: Inspect's defaults; an int: the ceiling)."""
    if isinstance(value, AdaptiveConcurrency):
        return value.max
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return AdaptiveConcurrency.model_validate(value).max
    return AdaptiveConcurrency().max


def run_samples(spec: EvalSpec) -> int:
    """The samples a task's run holds: its dataset (after ``--limit`` / ``--sample-id``) times its epochs."""
    count = spec.dataset.samples or 0
    limit = spec.config.limit
    if isinstance(limit, int):
        count = min(count, limit)
    elif limit is not None:
        count = min(count, max(0, limit[1] - limit[0]))
    if spec.config.sample_id is not None:
        ids = spec.config.sample_id
        count = min(count, len(ids) if isinstance(ids, list) else 1)
    return count * (spec.config.epochs or 1)


def idle_engine_message(spec: EvalSpec) -> str | None:
    """The warning for a benchmark task that leaves a local engine mostly idle, or None (see the module's
    docstring). Other tasks (no :data:`METADATA_KEY` in their metadata) are not this project's to judge."""
    if METADATA_KEY not in (spec.metadata or {}):
        return None
    if not is_local_engine(spec.model, spec.model_base_url, spec.model_args):
        return None
    in_flight = resolve_in_flight(spec)
    preset_in_flight = ((spec.metadata or {}).get(METADATA_KEY) or {}).get("in_flight")
    if preset_in_flight is None and in_flight.explicit:
        return None  # no preset, and the user set the limits on purpose
    wanted = min(run_samples(spec), int(preset_in_flight or MAX_IN_FLIGHT))
    if 2 * in_flight.samples >= wanted:
        return None
    asks = f"the preset asks for {preset_in_flight}" if preset_in_flight else f"the run has {run_samples(spec)}"
    return (
        f"{spec.task}: at most {in_flight.samples} samples in flight ({in_flight.setting}) for the local engine "
        f"{spec.model}, which batches hundreds of requests: it will be idle most of the time ({asks} samples). "
        f"Raise it with --max-connections {wanted} --max-samples {wanted} "
        "(cost: docs/evaluation.md, 'How many samples at once')."
    )


@hooks(name="cleaner_idle_engine", description="Warns once when a run leaves a local GPU engine mostly idle.")
class IdleEngineWarning(Hooks):
    """Logs :func:`idle_engine_message` once per task start (never per sample)."""

    async def on_task_start(self, data: TaskStart) -> None:
        message = idle_engine_message(data.spec)
        if message is not None:
            logger.warning(message)
