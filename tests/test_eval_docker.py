"""An evaluation on the Docker backend whose containers are killed in the middle of tool calls.

Every sample must end scored or explicitly errored (and retryable with Inspect's retry);
none may be scored as a success because its sandbox silently failed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from inspect_ai import eval as inspect_eval

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.docker

#: A call that is easy to see from outside (a `sleep 4` process in the container) and slow enough to be caught.
SLOW_CALL = json.dumps(
    {"name": "python", "arguments": {"code": "import subprocess\nsubprocess.run(['sleep', '4'])\nprint(25)"}}
)


def kill_containers_once_busy(stop: threading.Event, killed: list[str]) -> None:
    """Kill every sandbox container 1.5 s after the first tool call started (once)."""
    import docker

    from sandboxes.docker.policy import LABEL

    client = docker.from_env()
    deadline = time.monotonic() + 60
    while not stop.is_set() and time.monotonic() < deadline:
        busy = [c for c in client.containers.list(filters={"label": LABEL}) if _sleeping(c)]
        if busy:
            time.sleep(1.5)
            for c in busy:
                c.kill()
                killed.append(c.id)
            return
        time.sleep(0.1)


def _sleeping(container) -> bool:
    import docker

    try:
        top = container.top(ps_args="-eo pid,args")
    except docker.errors.APIError:  # removed or stopped between the listing and now (a pool trims, a test ends)
        return False
    return any(p[-1] == "sleep 4" for p in top.get("Processes") or [])


def run_eval(tmp_path: Path, retry_on_error: int):
    script = tmp_path / "slow.yaml"
    script.write_text(json.dumps({"default": [f"Check.\n<tool_call>\n{SLOW_CALL}\n</tool_call>", "\\boxed{25}"]}))
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=kill_containers_once_busy, args=(stop, killed), daemon=True)
    killer.start()
    cwd = os.getcwd()
    os.chdir(ROOT)  # this Inspect version resolves task files relative to the working directory
    try:
        [log] = inspect_eval(
            "tasks/aime24.py",
            model=f"replay/{script}",
            task_args={"saar": True, "data": "fixture", "sandbox": "docker", "timeout": 10},
            limit=2,
            retry_on_error=retry_on_error,
            fail_on_error=False,
            log_dir=str(tmp_path / "logs"),
            display="none",
        )
    finally:
        os.chdir(cwd)
        stop.set()
        killer.join()
    assert killed, "the test never caught a container in a tool call"
    return log


def test_killed_containers_error_the_samples_never_pass_them(tmp_path):
    log = run_eval(tmp_path, retry_on_error=0)
    errored = [s for s in log.samples or [] if s.error is not None]
    assert errored, "a sample whose container was killed must error"
    for s in errored:
        assert "sandbox failed" in s.error.message and not s.scores
    for s in log.samples or []:
        if s.error is None:  # only samples whose tool call really ran may be scored
            assert any(m.role == "tool" and m.text.strip() == "25" for m in s.messages)


def test_killed_containers_are_replaced_and_retried_samples_succeed(tmp_path):
    log = run_eval(tmp_path, retry_on_error=2)
    assert log.status == "success"
    samples = log.samples or []
    assert all(s.error is None and s.scores for s in samples)
    assert any(s.error_retries for s in samples), "the killed samples were retried"
    assert all(any(m.role == "tool" and m.text.strip() == "25" for m in s.messages) for s in samples)
