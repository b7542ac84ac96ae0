"""What a warm-up build writes, and the host it ran on.

:func:`write_adapter` writes the adapter in bfloat16 (about 10 MB) with its manifest; :func:`save_adapter` is the
SFT's: ``warmup.json`` (the command, settings, data and loss figures, the :func:`host`) in
``harness/data/models/smollm2-tools-sft/``, which :func:`harness.engines.models.load_model` merges into the embedded
base model, and where the expert-iteration rounds (:mod:`trainers.warmup.iterate`) that build ``smollm2-tools``
start. :func:`host` records what a build's bytes depend on besides its command and data.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.benchmarks.generators import generator_of
from harness.engines.models import ADAPTERS_DIR, TOOLS_SFT_NAME
from trainers.warmup.config import WarmupConfig, non_default_args
from trainers.warmup.demonstrations import Demonstration


def save_adapter(
    model: Any,
    cfg: WarmupConfig,
    demos: Sequence[Demonstration],
    losses: list[float],
    *,
    data_s: float,
    train_s: float,
    train_cpu_s: float,
) -> Path:
    """Write the LoRA weights in bfloat16 and ``warmup.json`` (what was built, how, and how to rebuild it)."""
    kinds = Counter(generator_of(d.problem) for d in demos)
    data_digest = hashlib.sha256(
        json.dumps([[m.role, m.text] for d in demos for m in d.messages]).encode()
    ).hexdigest()[:16]
    config = asdict(cfg)
    if Path(cfg.out).resolve() == (ADAPTERS_DIR / TOOLS_SFT_NAME).resolve():
        config["out"] = f"harness/data/models/{TOOLS_SFT_NAME}"
    manifest = {
        "rebuild": "python -m trainers warmup" + non_default_args(cfg),
        "config": config,
        "demonstrations": len(demos),
        "kinds": dict(sorted(kinds.items())),
        "failed_call_demonstrations": dict(sorted(Counter(d.bug for d in demos if d.bug).items())),
        "data_sha256_16": data_digest,
        "loss_first5": round(sum(losses[:5]) / max(1, len(losses[:5])), 4),
        "loss_last5": round(sum(losses[-5:]) / max(1, len(losses[-5:])), 4),
        "data_seconds": round(data_s, 1),
        "train_seconds": round(train_s, 1),
        "train_cpu_seconds": round(train_cpu_s, 1),  #: below train_seconds x threads when the cores were shared
        "losses": [round(x, 4) for x in losses],
        "threads": cfg.threads,
        "load_average_1min_at_end": round(os.getloadavg()[0], 2),
        "host": host(),
    }
    return write_adapter(model, Path(cfg.out), "warmup.json", manifest)


def write_adapter(model: Any, out: Path, manifest_name: str, manifest: dict[str, Any]) -> Path:
    """Write ``model``'s LoRA weights in bfloat16, its adapter config and ``manifest`` as JSON into ``out``.

    The directory is an adapter directory: it works as a model spec (:func:`harness.engines.models.resolve_spec`).
    """
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in get_peft_model_state_dict(model).items()}
    save_file(state, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    peft_config = model.peft_config["default"]
    peft_config.base_model_name_or_path = "embedded/smollm2"
    peft_config.save_pretrained(str(out))
    (out / manifest_name).write_text(json.dumps(manifest, indent=2) + "\n")
    for written in out.iterdir():
        written.chmod(0o644)  # safetensors writes 0600; the artifact is committed and read by every user
    return out


def package_versions(names: Sequence[str]) -> dict[str, str | None]:
    """The installed version of each package (None where it is not installed): what a build's arithmetic ran on."""
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


#: the CPU features that decide which kernels torch and vLLM run, and so the last bits of their floats
KERNEL_FEATURES = ("avx2", "avx512", "amx", "fma")
#: the libraries whose arithmetic a build's data and adapter come from
COMPUTING_PACKAGES = ("torch", "vllm", "transformers", "peft")


def host(cpuinfo: str | None = None) -> dict[str, Any]:
    """What a build's bytes (the SFT's, a round's) depend on besides the command and the data: the CPU (its model
    and the vector features its kernels are chosen by), a cap on the features oneDNN may use (``ONEDNN_MAX_CPU_ISA``,
    None when unset) and the computing libraries' versions. Two builds of the same command whose data agree and
    whose adapters do not tell here whether they ran on different arithmetic.

    ``cpuinfo`` is ``/proc/cpuinfo``'s text (read when None; where there is none, the CPU is ``unknown``).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}  # the last processor's, which are all alike
    for line in cpuinfo.splitlines():
        key, colon, value = line.partition(":")
        if colon:
            fields[key.strip()] = value.strip()
    flags = fields.get("flags", "").split()
    return {
        "machine": platform.machine(),
        "cpu": fields.get("model name", "unknown"),
        "cpu_features": sorted(f for f in flags if f.startswith(KERNEL_FEATURES)),
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
        "packages": package_versions(COMPUTING_PACKAGES),
    }
