"""The GPU environments, one per role whose pins conflict, and the check that one is built as its lock says.

SGLang pins ``openai`` 2.x while Inspect's ``sglang/`` and ``vllm/`` providers refuse ``openai`` < 3.4.0;
OpenRLHF 0.11.2 pins ``transformers`` and ``vllm`` (hence ``torch``) to other releases than SGLang does. So
each engine server has its own virtualenv, and the harness talks to it over loopback: from the harness's
(evaluation only, no torch) or from the trainer's, which holds the harness's client too (OpenRLHF's vLLM
allows Inspect's openai). Each is installed from its lock in ``packaging/gpu/`` (``bash packaging/gpu/lock.sh``
writes them) by a tox environment.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from trainers.core.recipes import PROJECT_ROOT

LOCKS = PROJECT_ROOT / "packaging" / "gpu"
#: the package OpenRLHF imports unconditionally (models/actor.py -> ring_attn_utils.py) and that no lock holds:
#: a source distribution that builds against the environment's torch
FLASH_ATTN = "flash-attn"


@dataclass(frozen=True)
class GpuEnv:
    """One role's environment: its lock, the tox environment that builds it, what must import there."""

    role: str
    tox_env: str
    modules: tuple[str, ...]
    project: bool  #: the project itself is installed there (editable, no dependencies)

    @property
    def lock(self) -> Path:
        return LOCKS / f"{self.role}.txt"

    def python(self, root: Path = PROJECT_ROOT) -> Path:
        return root / ".tox" / self.tox_env / "bin" / "python"

    def install_hint(self) -> str:
        """The command that builds this environment, and what tox runs for it."""
        steps = [f"python3.11 -m venv DIR && DIR/bin/pip install --no-deps -r packaging/gpu/{self.lock.name}"]
        if self.project:
            steps.append("DIR/bin/pip install --no-deps -e .")
        return f"tox -e {self.tox_env}  (by hand: {' && '.join(steps)})"


HARNESS = GpuEnv("harness", "gpu-harness", ("inspect_ai", "openai", "transformers", "harness"), project=True)
ENGINE_SGLANG = GpuEnv("engine-sglang", "gpu-sglang", ("sglang", "torch"), project=False)
ENGINE_VLLM = GpuEnv("engine-vllm", "gpu-vllm", ("vllm", "torch"), project=False)
TRAINER = GpuEnv(
    "trainer", "gpu-trainer", ("openrlhf", "vllm", "deepspeed", "ray", "torch", "flash_attn", "harness"), project=True
)
ROLES = (HARNESS, ENGINE_SGLANG, ENGINE_VLLM, TRAINER)


def read_lock(path: Path) -> dict[str, str]:
    """``{normalized name: version}`` of a lock written by ``uv pip compile`` (``name==version`` lines)."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)(\[[^\]]*\])?==([^\s;]+)(\s*;.*)?", line)
        if match is None:
            raise ValueError(f"{path}: not a pinned requirement: {line!r}")
        pins[normalize(match.group(1))] = match.group(3)
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def flash_attn_requirement(requires: list[str] | None = None) -> str:
    """OpenRLHF's own requirement on flash-attn (``flash-attn==2.8.3``), from its ``Requires-Dist`` lines
    (default: the openrlhf installed here)."""
    for requirement in importlib.metadata.requires("openrlhf") if requires is None else requires:
        if normalize(re.split(r"[ ;=<>!~\[]", requirement, maxsplit=1)[0]) == FLASH_ATTN:
            return requirement.split(";", 1)[0].replace(" ", "")
    raise LookupError("the installed openrlhf does not require flash-attn")


def flash_attn_hint(env: GpuEnv, requirement: str) -> str:
    python = env.python().relative_to(PROJECT_ROOT)
    return (
        f"{python} -m pip install --no-deps --no-build-isolation '{requirement}' (a source build against the "
        "environment's torch: needs nvcc of the CUDA major version torch.version.cuda names, and ninja; "
        "MAX_JOBS and FLASH_ATTN_CUDA_ARCHS=90 keep it shorter on an H100)"
    )


_PROBE = """
import importlib.metadata, importlib.util, json, sys
modules = sys.argv[1].split(",")
print(json.dumps({
    "dists": {d.metadata["Name"]: d.version for d in importlib.metadata.distributions() if d.metadata["Name"]},
    "missing": [m for m in modules if importlib.util.find_spec(m) is None],
    "python": "%d.%d" % sys.version_info[:2],
    "openrlhf_requires": importlib.metadata.requires("openrlhf") if importlib.util.find_spec("openrlhf") else [],
}))
"""


def check_env(env: GpuEnv, python: Path | None = None) -> list[str]:
    """What is wrong with ``env`` as built at ``python`` (default: its tox environment); empty when it matches.

    The interpreter is run once to list its distributions and find each module (nothing is imported); every
    pin of the lock must be installed at that version. Each problem is one line that says how to fix it.
    """
    python = python or env.python()
    if not python.exists():
        return [f"{env.role}: no environment at {python}; build it: {env.install_hint()}"]
    proc = subprocess.run(
        [str(python), "-c", _PROBE, ",".join(env.modules)], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        return [f"{env.role}: {python} does not run ({proc.stderr.strip()[-300:]}); rebuild it: {env.install_hint()}"]
    found = json.loads(proc.stdout)
    problems = []
    installed = {normalize(name): version for name, version in found["dists"].items()}
    wrong = [
        f"{name} {installed.get(name, 'missing')} (locked {version})"
        for name, version in read_lock(env.lock).items()
        if installed.get(name) != version
    ]
    if wrong:
        shown = ", ".join(wrong[:8]) + (f" and {len(wrong) - 8} more" if len(wrong) > 8 else "")
        problems.append(f"{env.role}: {len(wrong)} packages differ from {env.lock.name}: {shown}; {env.install_hint()}")
    missing = [m for m in found["missing"] if m != "flash_attn"]
    if missing:
        problems.append(f"{env.role}: cannot import {', '.join(missing)} at {python}; {env.install_hint()}")
    if "flash_attn" in found["missing"]:
        requirement = flash_attn_requirement(found["openrlhf_requires"]) if found["openrlhf_requires"] else FLASH_ATTN
        problems.append(f"{env.role}: no flash_attn (OpenRLHF imports it); {flash_attn_hint(env, requirement)}")
    return problems
