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

from sandboxes import soak


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    status = soak.main([*argv, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["failures"] == [], out
    assert out["calls"] > 20 and out["kills"] >= 1, out
    return out


def test_judge_tells_a_kill_from_the_programs_failure() -> None:
    from sandboxes.base import ExecResult

    program = next(p for p in soak.PROGRAMS if p.name == "ok")
    killed = ExecResult(ok=False, exit_code=-9, error_kind="Killed")
    assert soak.judge(program, killed).startswith("ok: error kind 'Killed'")  # a kill scored as the model's: caught
    failed = ExecResult(ok=False, error_kind="SandboxError", sandbox_failed=True)
    assert soak.judge(program, failed) == "sandbox_failed"
    assert soak.judge(program, ExecResult(ok=True, stdout="499500\n")) == "ok"


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
    assert out["sandbox_failed"] >= 1, out  # a bwrap killed mid-call is the sandbox's failure


@pytest.mark.docker
def test_soak_docker_with_its_containers_killed(capsys: pytest.CaptureFixture[str]) -> None:
    _run(capsys, "--backend", "docker", "--clients", "4", "--minutes", "0.2", "--kill-every", "1.5")
