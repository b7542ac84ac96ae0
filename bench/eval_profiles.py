"""Where an evaluation-speed run's CPU went: cProfile's top entries, and py-spy's raw stacks sorted into buckets.

:mod:`bench.eval_speed` writes them with ``--profile DIR`` and ``--py-spy DIR``; the figures of a profiled run are
not the harness's speed.
"""

from __future__ import annotations

import pstats
import re
from pathlib import Path

#: entries of a profile printed
PROFILE_TOP = 45


def print_profile(path: str, top: int = PROFILE_TOP) -> None:
    stats = pstats.Stats(path)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


#: Sampled stacks per second of ``--py-spy``.
SPY_RATE = 100
#: Where an eval process's time goes: a name and a frame a sampled stack passes through (inclusive, so the rows
#: overlap; an indented row is part of the row above it).
BUCKETS: tuple[tuple[str, str], ...] = (
    ("the solver's sample loop (harness.evals.solver)", r"^saar_agent\.<locals>\.solve \(harness/evals/solver"),
    ("  rollout: a model call (Inspect's generate in it)", r"^RolloutState\.generate_turn \("),
    ("    Inspect Model.generate", r"^Model\.generate \(inspect_ai/model/_model"),
    ("      the provider: openai SDK, httpx", r"^OpenAICompatibleAPI\.generate \("),
    ("        openai SDK request transform", r"^async_transform \(openai/"),
    ("        httpx send and receive", r"^AsyncClient\.send \(httpx"),
    ("      ModelEvent updates", r"^Transcript\._event_updated \("),
    ("  rollout: a tool call (the span, the proxy, the sandbox)", r"^RolloutState\.execute \("),
    ("    the local sandbox's run_python", r"^LocalSandbox\.run_python \("),
    ("  SAAR rollbacks (their regenerations and runs)", r"^rollback \(harness/core/saar"),
    ("Inspect span() enter and exit", r"^span \(inspect_ai/util/_span"),
    ("Inspect transcript: every event", r"^Transcript\._process_event \("),
    ("  realtime sample buffer (SQLite): log_events", r"^SampleBufferDatabase\.log_events \("),
    ("    condensing events for it", r"^SampleBufferDatabase\._condense_event \("),
    ("log writer: samples into the .eval log", r"^(log_sample \(inspect_ai|TaskLogger\._flush_pending_samples \()"),
    ("pydantic, anywhere", r"pydantic"),
    ("copy.deepcopy, anywhere", r"^deepcopy \(copy\.py"),
    ("a sample's sandbox: init and cleanup (Inspect side)", r"^(init|cleanup)_sandbox_environments_sample \("),
    ("local pool: a new LocalSandbox (in a thread)", r"^LocalSandbox\.__init__ \("),
    ("  its uid lease", r"^UidLease\.__init__ \("),
    ("kill_uid: /proc scans for a uid's processes (threads)", r"^kill_uid \("),
    ("scoring", r"score"),
)
#: A stack whose innermost frame is one of these is a thread waiting, not working.
IDLE_LEAVES = (
    r"^(_worker \(concurrent/futures/thread|ThreadedChildWatcher\._do_waitpid|Condition\.wait|Queue\.get"
    r"|EpollSelector\.select|select \(selectors)"
)


def read_stacks(path: str) -> list[tuple[list[str], int]]:
    """py-spy's raw output: the timed eval's stacks and every thread's, waiting threads left out."""
    idle, stacks = re.compile(IDLE_LEAVES), []
    for line in Path(path).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not frames or idle.search(frames[-1]):
            continue
        if frames[0].startswith("Thread._bootstrap") or any(f.startswith("_timed_eval (") for f in frames):
            stacks.append((frames, int(count)))
    return stacks


def stack_report(path: str, cpu_s: float, generations: int, tool_calls: int) -> list[str]:
    """Where the eval's CPU went: each bucket's share of the busy samples, as CPU ms per generation and per call
    (the eval's measured CPU spread over its busy samples; a waiting-but-runnable thread counts as busy)."""
    stacks = read_stacks(path)
    busy = sum(n for _, n in stacks)
    if not busy or not generations or not tool_calls:
        return [f"# {path}: no busy samples"]
    ms = 1000 * cpu_s / busy
    lines = [f"# {path}: {busy} busy samples over {cpu_s:.1f} CPU s", "share  ms/gen ms/call  what"]
    for name, pattern in BUCKETS:
        rx = re.compile(pattern)
        n = sum(count for frames, count in stacks if any(rx.search(f) for f in frames))
        lines.append(f"{100 * n / busy:4.1f}% {n * ms / generations:7.2f} {n * ms / tool_calls:7.2f}  {name}")
    leaves: dict[str, int] = {}
    for frames, count in stacks:
        where = re.search(r"\(([^:)]+)", frames[-1])
        parts = (where.group(1) if where else frames[-1]).split("/")
        key = "/".join(parts[:2]) if parts[0] == "inspect_ai" else parts[0]
        leaves[key] = leaves.get(key, 0) + count
    top = sorted(leaves.items(), key=lambda kv: -kv[1])[:12]
    lines.append("self time by module: " + ", ".join(f"{k} {100 * v / busy:.0f}%" for k, v in top))
    return lines
