"""Engine processes a test module left running: vLLM servers and engine cores, Ray's daemons.

Every process the test session starts inherits ``CLEANER_TEST_SESSION`` (set by conftest), so a
leftover is found even when it was orphaned (an engine core whose server was killed is re-parented
to init), and processes of other jobs on the machine are never counted.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

MARK = "CLEANER_TEST_SESSION"
ENGINE_WORDS = ("vllm", "VLLM::", "raylet", "gcs_server", "ray::", "EngineCore")


def _session_processes(session: str) -> dict[int, str]:
    found: dict[int, str] = {}
    needle = f"{MARK}={session}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if state != "Z" and any(word in command for word in ENGINE_WORDS):
            found[int(proc.name)] = command[:160]
    return found


def leftover_engines(session: str, grace_s: float = 30.0) -> dict[int, str]:
    """The session's engine processes still alive after ``grace_s`` (a stopping server may take a while)."""
    deadline = time.monotonic() + grace_s
    while (alive := _session_processes(session)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive


def kill(pids: dict[int, str]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
