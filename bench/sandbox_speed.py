"""Benchmark of the sandbox backends: ``python -m bench.sandbox_speed`` prints one JSON object.

Measured in the same run, so that the figures compare:

- ``docker``: the Docker backend (warm container, fork per call over the attach socket);
- ``docker_exec_transport``: the same, talking over one long-lived ``docker exec`` instead;
- ``local``: the local backend (a fresh interpreter per call, rlimits, bubblewrap when usable);
- ``baseline_docker_exec``: ``docker exec <container> python3 -c CODE`` per call;
- ``baseline_fresh_python``: a fresh local ``python3 -c CODE`` per call.

For each: p50/p99 latency of a trivial call and of a numpy call, throughput at
concurrency 1, 4 and 8 (where it applies), and for docker the container cold start,
the pool checkout time and the memory per idle container. The load average before
and after is included: figures from a busy machine are not comparable.

Docker's trivial call is timed twice: back to back, which keeps the container busy (its
cpu quota then throttles it), and ``paced``, with a pause before each call as a rollout
makes while the model generates. At 8 callers the cpu of a call is split between the
containers, the Docker daemons and the caller, which bounds the calls/s a machine can give.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

TRIVIAL = "print(1)"
NUMPY = "import numpy as np\nprint(float(np.linalg.det(np.eye(50) * 2)))"
#: What the docker backend's trivial calls should reach on a 2-core machine (the output says which are met).
TARGETS = {
    "docker_trivial_p50_ms<=2.5": ("trivial_p50_ms", "<=", 2.5),
    "docker_paced_p50_ms<=3": ("paced_p50_ms", "<=", 3.0),
    "docker_trivial_p99_ms<=15": ("trivial_p99_ms", "<=", 15.0),
    "docker_calls_per_s_c8>=400": ("calls_per_s_c8", ">=", 400.0),
    "speedup_vs_docker_exec_p50>=20": ("speedup", ">=", 20.0),
}
#: Concurrency levels of the throughput figures; the benchmark's own pool is bounded at the largest.
CONCURRENCY = (1, 4, 8)

Call = Callable[[str], Awaitable[Any]]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def latency(call: Call, code: str, n: int, pause: float = 0.0) -> dict[str, float]:
    """p50/p99 in milliseconds of ``n`` sequential calls (after two warm-up calls), ``pause`` s before each."""
    for _ in range(2):
        await call(code)
    times, inside = [], []
    for _ in range(n):
        if pause:
            await asyncio.sleep(pause)
        start = time.perf_counter()
        result = await call(code)
        times.append((time.perf_counter() - start) * 1000)
        if getattr(result, "ok", True) is False:
            raise RuntimeError(f"benchmark call failed: {result}")
        worker = getattr(result, "extra", {}).get("worker_duration")
        if worker is not None:
            inside.append(worker * 1000)
    figures = {
        "p50_ms": round(_pct(times, 0.5), 2),
        "p99_ms": round(_pct(times, 0.99), 2),
        "mean_ms": round(statistics.fmean(times), 2),
        "n": n,
    }
    if inside:  # the part spent inside the container (fork, run, collect), the rest is transport
        figures["in_container_p50_ms"] = round(_pct(inside, 0.5), 2)
    if pause:
        figures["pause_ms"] = round(pause * 1000, 1)
    return figures


async def throughput(calls: list[Call], total: int) -> float:
    """Calls per second with one worker loop per entry of ``calls``, ``total`` calls in all."""
    remaining = total

    async def loop(call: Call) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call(TRIVIAL)

    start = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in calls))
    return round(total / (time.perf_counter() - start), 1)


async def bench_docker(args: argparse.Namespace, out: dict[str, Any]) -> None:
    from sandboxes.docker.pool import DockerBackend
    from sandboxes.docker.sandbox import DockerSandbox

    # A pool of its own, bounded at what the benchmark holds at once (whatever the cpu count), and an
    # acquire that fails instead of waiting forever.
    backend = DockerBackend(max_containers=max(CONCURRENCY), acquire_timeout=args.acquire_timeout)
    try:
        cold = []
        for _ in range(args.cold):
            start = time.perf_counter()
            sb = await DockerSandbox().start()
            cold.append((time.perf_counter() - start) * 1000)
            await sb.close()
        await backend.prewarm(max(CONCURRENCY))
        checkout = []
        for _ in range(args.n // 4):
            start = time.perf_counter()
            sb = await backend.acquire()
            checkout.append((time.perf_counter() - start) * 1000)
            await backend.release(sb)
        sandboxes = [await backend.acquire() for _ in range(max(CONCURRENCY))]
        first = sandboxes[0]
        before = await asyncio.to_thread(_throttling, first._current.container)
        trivial = await latency(lambda c: first.run_python(c), TRIVIAL, args.n)
        after = await asyncio.to_thread(_throttling, first._current.container)
        # how often the container's cpu quota stopped it during the trivial calls (the cause of a long p99)
        trivial["cpu_quota_throttled"] = {k: after[k] - before[k] for k in after}
        paced = await latency(lambda c: first.run_python(c), TRIVIAL, args.n, pause=args.pause / 1000)
        rates = {str(c): await throughput([s.run_python for s in sandboxes[:c]], args.total) for c in CONCURRENCY[:-1]}
        containers = [s._current.container for s in sandboxes]
        before_cpu = await _cpu_ms(containers)
        rates[str(CONCURRENCY[-1])] = await throughput([s.run_python for s in sandboxes], args.total)
        after_cpu = await _cpu_ms(containers)
        result: dict[str, Any] = {
            "max_containers": backend.max_containers,
            "trivial": trivial,
            "paced": paced,
            "numpy": await latency(lambda c: first.run_python(c), NUMPY, args.n // 2),
            "throughput_calls_per_s": rates,
            "cpu_ms_per_call_c8": _per_call(before_cpu, after_cpu, args.total),
            "cold_start_ms": {"p50": round(_pct(cold, 0.5), 1), "max": round(max(cold), 1), "n": len(cold)},
            "checkout_ms": {
                "p50": round(_pct(checkout, 0.5), 3),
                "p99": round(_pct(checkout, 0.99), 3),
                "includes": "acquire from a warm pool",
            },
            "memory_mb_per_container": await asyncio.to_thread(_memory_mb, first._current.container),
        }
        out["docker"] = result
        # The baseline: a new interpreter per call through `docker exec`, in a container of the same image.
        cid = first.container_id
        out["baseline_docker_exec"] = {
            "trivial": await latency(
                lambda c: _subprocess(["docker", "exec", cid, "python3", "-c", c]), TRIVIAL, args.baseline_n
            ),
            "numpy": await latency(
                lambda c: _subprocess(["docker", "exec", cid, "python3", "-c", c]), NUMPY, args.baseline_n
            ),
        }
        for sb in sandboxes:
            await backend.release(sb)
    finally:
        await backend.shutdown()
    sb = await DockerSandbox(transport="exec").start()
    try:
        out["docker_exec_transport"] = {"trivial": await latency(lambda c: sb.run_python(c), TRIVIAL, args.n)}
    finally:
        await sb.close()


def _throttling(container: Any) -> dict[str, float]:
    data = container.stats(stream=False).get("cpu_stats", {}).get("throttling_data", {})
    return {
        "periods": data.get("periods", 0),
        "throttled_periods": data.get("throttled_periods", 0),
        "throttled_ms": round(data.get("throttled_time", 0) / 1e6, 1),
    }


#: process names (as /proc/PID/comm truncates them) of the Docker engine's daemons on this host
DAEMONS = ("dockerd", "containerd", "containerd-shim")


async def _cpu_ms(containers: list[Any]) -> dict[str, float | None]:
    """Cpu milliseconds used so far by the containers, the Docker daemons on this host and this process."""

    def container_ms(container: Any) -> float:
        stats = container.stats(stream=False, one_shot=True)
        return stats["cpu_stats"]["cpu_usage"]["total_usage"] / 1e6

    usage = await asyncio.gather(*(asyncio.to_thread(container_ms, c) for c in containers))
    return {
        "containers": sum(usage),
        "docker_daemons": await asyncio.to_thread(_daemons_ms),
        "caller": time.process_time() * 1000,
    }


def _daemons_ms() -> float | None:
    """Cpu ms (in clock ticks) of the Docker daemons on this host; None when none is visible (a remote or VM engine)."""
    tick, total, seen = os.sysconf("SC_CLK_TCK"), 0.0, False
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() not in DAEMONS:
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while it was read
            continue
        seen = True
        total += (int(fields[11]) + int(fields[12])) * 1000 / tick  # utime + stime
    return total if seen else None


def _per_call(before: dict[str, float | None], after: dict[str, float | None], calls: int) -> dict[str, Any]:
    """Cpu ms per call by where it was spent, their sum, and the calls/s this machine's cpus allow at that cost."""
    split = {}
    for key, start in before.items():
        end = after[key]
        if start is not None and end is not None:
            split[key] = round((end - start) / calls, 3)
    total = sum(split.values())
    return {
        **split,
        "total": round(total, 3),
        "cpu_bound_calls_per_s": round((os.cpu_count() or 1) * 1000 / total, 1) if total else None,
    }


def _memory_mb(container: Any) -> dict[str, float]:
    stats = container.stats(stream=False).get("memory_stats", {})
    detail = stats.get("stats", {})
    usage = stats.get("usage", 0)
    cache = detail.get("total_inactive_file", detail.get("inactive_file", 0))
    return {
        "usage": round(usage / 1e6, 1),
        "usage_minus_inactive_cache": round((usage - cache) / 1e6, 1),
        "rss": round(detail.get("total_rss", detail.get("anon", 0)) / 1e6, 1),
    }


async def _subprocess(argv: list[str]) -> Any:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed: {err.decode(errors='replace')[-300:]}")
    return out


async def bench_local(args: argparse.Namespace, out: dict[str, Any]) -> None:
    from sandboxes.backends import get_backend

    backend = get_backend("local")
    try:
        sandboxes = [await backend.acquire() for _ in range(8)]
        first = sandboxes[0]
        out["local"] = {
            "trivial": await latency(lambda c: first.run_python(c), TRIVIAL, args.baseline_n),
            "numpy": await latency(lambda c: first.run_python(c), NUMPY, args.baseline_n),
            "throughput_calls_per_s": {
                str(c): await throughput([s.run_python for s in sandboxes[:c]], args.baseline_n) for c in (1, 4, 8)
            },
            "isolation": getattr(first, "isolation", None),
        }
        for sb in sandboxes:
            await backend.release(sb)
    finally:
        await backend.shutdown()
    python = [sys.executable, "-c"]
    out["baseline_fresh_python"] = {
        "trivial": await latency(lambda c: _subprocess([*python, c]), TRIVIAL, args.baseline_n),
        "numpy": await latency(lambda c: _subprocess([*python, c]), NUMPY, args.baseline_n),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_before": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
    }
    if not args.skip_docker:
        from sandboxes.docker.engine import docker_available, image_present

        if docker_available() and image_present():
            await bench_docker(args, out)
        else:
            out["docker"] = "skipped: no Docker engine or no sandbox image (sandboxes/ci_docker.sh)"
    if not args.skip_local:
        await bench_local(args, out)
    out["machine"]["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    if isinstance(out.get("docker"), dict) and "baseline_docker_exec" in out:
        d, base = out["docker"], out["baseline_docker_exec"]
        speedup = base["trivial"]["p50_ms"] / d["trivial"]["p50_ms"]
        out["speedup_vs_docker_exec_p50"] = round(speedup, 1)
        figures = {
            "trivial_p50_ms": d["trivial"]["p50_ms"],
            "trivial_p99_ms": d["trivial"]["p99_ms"],
            "paced_p50_ms": d["paced"]["p50_ms"],
            "calls_per_s_c8": d["throughput_calls_per_s"]["8"],
            "speedup": speedup,
        }
        out["targets"] = {
            name: (figures[key] <= bound if op == "<=" else figures[key] >= bound)
            for name, (key, op, bound) in TARGETS.items()
        }
    return out


async def bounded(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark within ``--max-seconds`` (cancelled past it: every container is removed)."""
    try:
        return await asyncio.wait_for(main_async(args), args.max_seconds)
    except TimeoutError:
        raise SystemExit(f"error: the benchmark did not finish within --max-seconds {args.max_seconds:g}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox_speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300, help="calls per latency figure of the docker backend")
    parser.add_argument("--baseline-n", type=int, default=30, help="calls per figure of the slow baselines")
    parser.add_argument("--total", type=int, default=1000, help="calls per throughput figure")
    parser.add_argument(
        "--pause", type=float, default=10.0, help="ms before each of the paced calls (a generation between two calls)"
    )
    parser.add_argument("--cold", type=int, default=5, help="containers started to time the cold start")
    parser.add_argument("--skip-docker", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--acquire-timeout", type=float, default=60.0, help="seconds an acquire may wait")
    parser.add_argument("--max-seconds", type=float, default=1800.0, help="bound on the whole run")
    args = parser.parse_args(argv)
    if min(args.n, args.baseline_n, args.total, args.cold) < 4:
        parser.error("--n, --baseline-n, --total and --cold must be at least 4")
    out = asyncio.run(bounded(args))
    print(json.dumps(out, indent=2))
    for name, met in out.get("targets", {}).items():
        print(f"target {name}: {'met' if met else 'NOT met'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
