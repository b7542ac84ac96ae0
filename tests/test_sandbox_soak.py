"""The soak-and-chaos command, run small: a few clients for ~12 s while sandboxes are killed.

The real runs (64 clients, 10 minutes on docker) are in docs/sandboxes.md; here the command's
own assertions must hold (every call within its timeout plus the margin, every result either
what its program gives or a clear ``sandbox_failed``, nothing left afterwards) and the chaos
loop must have killed something.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from bench import sandbox_soak as soak
from bench import soak_programs


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    status = soak.main([*argv, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["failures"] == [], out
    assert out["calls"] > 20, out
    assert out["sandbox_failed_not_by_kill"] == 0 and out["containers_died_without_a_kill"] == 0, out
    return out


def test_judge_tells_a_kill_from_the_programs_failure() -> None:
    from sandboxes.base import ExecResult

    program = next(p for p in soak_programs.PROGRAMS if p.name == "ok")
    killed = ExecResult(ok=False, exit_code=-9, error_kind="Killed")
    assert soak_programs.judge(program, killed).startswith(
        "ok: error kind 'Killed'"
    )  # a kill scored as the model's: caught
    failed = ExecResult(ok=False, error_kind="SandboxError", sandbox_failed=True)
    assert soak_programs.judge(program, failed) == "sandbox_failed"
    assert soak_programs.judge(program, ExecResult(ok=True, stdout="499500\n")) == "ok"


def test_soak_local_with_its_bwrap_processes_killed(capsys: pytest.CaptureFixture[str]) -> None:
    from sandboxes.local.sandbox import LocalSandbox

    sandbox = LocalSandbox()
    try:
        if sandbox.isolation != "bwrap":
            pytest.skip("the local chaos kills bwrap processes; bwrap does not run here")
    finally:
        sandbox._discard()
    # a child the host had before the soak (in the full suite: multiprocessing's resource tracker) is not a leftover
    helper = subprocess.Popen(["sleep", "300"])
    try:
        out = _run(capsys, "--backend", "local", "--clients", "4", "--minutes", "0.2", "--kill-every", "1")
        assert helper.poll() is None  # and the soak left it alone
    finally:
        helper.kill()
        helper.wait()
    assert out["kills"] >= 1 and out["sandbox_failed"] >= 1, out  # a bwrap killed mid-call is the sandbox's failure


@pytest.mark.docker
def test_soak_docker_with_its_containers_killed(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(capsys, "--backend", "docker", "--clients", "4", "--minutes", "0.2", "--kill-every", "1.5")
    assert out["kills"] >= 1 and out["sandbox_failed"] == out["sandbox_failed_by_kill"], out


def test_a_sandbox_failure_is_laid_to_a_kill_only_when_one_caused_it() -> None:
    import argparse

    args = argparse.Namespace(backend="docker", seed=0, minutes=1, clients=1, kill_every=1, margin=5, max_calls=9)
    run = soak.Soak(args)
    run.killed = {"aaaaaaaaaaaa"}
    run.kills = [{"at": 5.0, "victim": "container aaaaaaaaaaaa"}]
    run.replaced = ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    failed = dict(kind="SandboxError", sandbox_failed=True, verdict="sandbox_failed")
    run.calls = [
        soak.Call("ok", 10, 4.9, 0.2, container="aaaaaaaaaaaa", **failed),
        soak.Call("memory_bomb", 10, 6.0, 0.2, container="bbbbbbbbbbbb", **failed),  # died of its program
        soak.Call("ok", 10, 7.0, 0.2, container=None, **failed),
    ]
    out = run.report(10.0, [])
    assert out["sandbox_failed_by_kill"] == 1 and out["sandbox_failed_not_by_kill"] == 2, out
    assert out["containers_died_without_a_kill"] == 1 and any("no kill caused: 2" in f for f in out["failures"]), out
    run.args.backend = "local"  # local: a kill while the call ran
    assert [run._caused_by_kill(call) for call in run.calls] == [True, False, False]


@pytest.mark.docker
def test_soak_memory_mix_leaves_every_container_alive(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(
        capsys, "--backend", "docker", "--mix", "memory", "--clients", "3", "--max-calls", "30", "--kill-every", "0"
    )
    assert out["containers_replaced"] == 0 and out["sandbox_failed"] == 0, out
