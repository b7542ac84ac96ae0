"""Two ceilings measured before the evaluation speed's configurations (:mod:`bench.eval_speed`).

The stand-in's: requests/s from a trivial client (a fixed request on keep-alive connections) and the server's CPU
per request. Each sandbox's: calls/s of the policy's program with no Inspect around it, one and several sandboxes
at once.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from collections.abc import Sequence
from typing import Any

from bench.scripted_policy import program
from bench.standin import StandinProcess


def cpu_of(usage: resource.struct_rusage) -> float:
    """User plus system CPU seconds of a ``getrusage`` result."""
    return usage.ru_utime + usage.ru_stime


# -- the stand-in's own ceiling ---------------------------------------------------------------------------------


def _sample_request(name: str) -> dict[str, Any]:
    """A request like the harness's third turn: system, user, a call and its result, the python tool."""
    call = {"id": "c1", "type": "function", "function": {"name": "python", "arguments": '{"code": "print(1)"}'}}
    tool = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    return {
        "model": name,
        "seed": 7,
        "tools": [{"type": "function", "function": {"name": "python", "description": "Run.", "parameters": tool}}],
        "messages": [
            {"role": "system", "content": "s" * 300},
            {"role": "user", "content": "u" * 500},
            {"role": "assistant", "content": "a" * 400, "tool_calls": [call]},
            {"role": "tool", "content": "1", "tool_call_id": "c1"},
        ],
    }


async def _hammer(url: str, body: dict[str, Any], connections: int, seconds: float) -> int:
    import aiohttp

    done = 0
    payload = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections)) as session:
        end = time.monotonic() + seconds

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < end:
                async with session.post(f"{url}/chat/completions", data=payload, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"the stand-in answered {response.status}")
                    done += 1

        await asyncio.gather(*(worker() for _ in range(connections)))
    return done


def server_ceiling(server: StandinProcess, connections: Sequence[int], seconds: float) -> list[dict[str, float]]:
    """Requests/s of the stand-in under a trivial client, and its CPU per request, at each connection count."""
    rows = []
    for n in connections:
        cpu, start = server.cpu_seconds(), time.monotonic()
        done = asyncio.run(_hammer(server.base_url, _sample_request(server.name), n, seconds))
        wall, cpu = time.monotonic() - start, server.cpu_seconds() - cpu
        rows.append(
            {
                "connections": n,
                "requests": done,
                "requests_per_s": done / wall,
                "server_cpu_ms_per_request": 1000 * cpu / done if done else 0.0,
                "server_util": cpu / wall,
            }
        )
    return rows


# -- a sandbox's own ceiling -----------------------------------------------------------------------------------


async def _run_programs(name: str, concurrency: int, seconds: float) -> tuple[int, int]:
    from sandboxes.backends import get_backend

    code, done, failed = program(57), 0, 0
    backend = get_backend(name)
    try:
        boxes = [await backend.acquire() for _ in range(concurrency)]
        await asyncio.gather(*(box.run_python("pass") for box in boxes))  # first use is not measured
        end = time.monotonic() + seconds

        async def worker(box: Any) -> None:
            nonlocal done, failed
            while time.monotonic() < end:
                result = await box.run_python(code, timeout=10.0)
                done, failed = done + 1, failed + (not result.ok)

        await asyncio.gather(*(worker(box) for box in boxes))
        for box in boxes:
            await backend.release(box)
    finally:
        await backend.shutdown()
    return done, failed


def sandbox_ceiling(name: str, concurrency: Sequence[int], seconds: float) -> list[dict[str, Any]]:
    """Calls/s of the policy's program in sandbox ``name`` with no Inspect around it, ``c`` sandboxes at once."""
    rows = []
    for c in concurrency:
        self0, start = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        done, failed = asyncio.run(_run_programs(name, c, seconds))
        wall, cpu = time.monotonic() - start, cpu_of(resource.getrusage(resource.RUSAGE_SELF)) - cpu_of(self0)
        rows.append(
            {
                "sandbox": name,
                "concurrency": c,
                "calls": done,
                "failed": failed,
                "calls_per_s": done / wall,
                "caller_cpu_ms_per_call": 1000 * cpu / done if done else 0.0,
            }
        )
    return rows
