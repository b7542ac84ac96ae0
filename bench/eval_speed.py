"""The harness at a GPU engine's speed: Inspect, the solver, the SAAR loop and the sandbox against the stand-in.

python -m bench.eval_speed                                   # 16 64 256 in flight, local (+docker), SAAR on/off
python -m bench.eval_speed --in-flight 64 --saar on --sandboxes local --profile /tmp/speed-prof

The engine is :mod:`bench.standin` (a scripted policy that answers at once, not a model) in a
child process, reached through Inspect's own ``vllm/`` provider (``--provider sglang`` for ``sglang/``) with
``model_base_url``, so no engine is started. Every configuration is one ``inspect_ai.eval`` of
``tasks/aime24.py`` on the fixture (4 problems, ``--epochs`` = samples / 4) with ``max_connections`` and
``max_samples`` = the samples in flight, in a fresh child process of its own (its CPU and peak memory are
its own; the stand-in's CPU is measured apart). Figures per configuration:

* samples/s, generations/s (the samples' model events), tool calls/s (the trajectories' executed calls);
* harness CPU ms per generation and per call: the eval process's own CPU (``getrusage(RUSAGE_SELF)``, all its
  threads) over the eval, divided by generations or calls; ``util``: that CPU over the wall time (1.0 is one
  core busy). The stand-in's CPU is apart (``server_cpu_s``), and so are the programs: the JSON's
  ``children_cpu_s`` is the eval process's reaped children (``RUSAGE_CHILDREN``), which under bwrap counts
  bwrap but not the program in its pid namespace, so the sandbox's own cost is measured alone (below);
* peak memory (``ru_maxrss`` of the eval process), log bytes and transcript events per sample.

Each eval process first runs a small warm-up eval (``--warmup-samples``), so imports and first-use costs are
not in the figures. Before the configurations, two ceilings: the stand-in's (requests/s from a trivial client,
a fixed request on keep-alive connections, and the server's CPU per request) and each sandbox's (calls/s of
the policy's program with no Inspect around it, one and several sandboxes at once).

The sandboxes: ``auto`` runs local, and docker when an engine answers with the sandbox image; naming one
that cannot start (``--sandboxes docker`` without an engine, local without isolation) is an error, and so is a
stand-in that does not start. A docker sample holds a container from its start to its end, so at most
``--max-containers`` docker samples run at once (the pool's bound, ``CLEANER_SANDBOX_MAX_CONTAINERS``).

Profiles: ``--profile DIR`` runs each timed eval under cProfile, writes its stats there and prints the top
entries; ``--py-spy DIR`` samples each eval process with py-spy (``pip install py-spy``), writes its raw stacks
there and prints where the timed eval's CPU went (:data:`BUCKETS`: Inspect's generate and provider, its
transcript and realtime buffer, the log writer, the solver and SAAR, the sandbox pool), per generation and per
call. The figures of a profiled run are not the harness's speed.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import platform
import pstats
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.standin import Policy, StandinConfig, StandinError, StandinProcess, cpu_seconds, program

ROOT = Path(__file__).resolve().parents[1]
TASK = "tasks/aime24.py"
PROBLEMS = 4  #: problems in the aime24 fixture
RESULT = "SPEED_RESULT"  #: the marker of a child's result line
PROFILE_TOP = 45  #: entries of a profile printed


@dataclass(frozen=True)
class Config:
    """One configuration: where programs run, SAAR, samples in flight and how many samples."""

    sandbox: str
    saar: bool
    in_flight: int
    samples: int

    @property
    def label(self) -> str:
        return f"{self.sandbox}-saar-{'on' if self.saar else 'off'}-{self.in_flight}"


@dataclass
class Figures:
    """What one configuration measured (counts and seconds; rates are derived)."""

    sandbox: str
    saar: bool
    in_flight: int
    samples: int
    status: str
    wall_s: float
    generations: int
    tool_calls: int
    harness_cpu_s: float  #: the eval process's CPU (user + system, all threads) during the eval
    #: CPU of the eval process's reaped children during it (under bwrap: bwrap, not the program in its namespace)
    children_cpu_s: float
    server_cpu_s: float  #: the stand-in's CPU during the eval
    peak_rss_mb: float
    log_bytes: int
    events: int  #: transcript events over every sample
    load_1m: float
    error: str | None = None
    profiled: bool = False

    def rates(self) -> dict[str, float]:
        per = lambda n, d: n / d if d else 0.0  # noqa: E731 - a local shorthand
        return {
            "samples_per_s": per(self.samples, self.wall_s),
            "generations_per_s": per(self.generations, self.wall_s),
            "tool_calls_per_s": per(self.tool_calls, self.wall_s),
            "harness_cpu_ms_per_generation": 1000 * per(self.harness_cpu_s, self.generations),
            "harness_cpu_ms_per_call": 1000 * per(self.harness_cpu_s, self.tool_calls),
            "harness_util": per(self.harness_cpu_s, self.wall_s),
            "server_cpu_ms_per_generation": 1000 * per(self.server_cpu_s, self.generations),
            "log_bytes_per_sample": per(self.log_bytes, self.samples),
            "events_per_sample": per(self.events, self.samples),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), **self.rates()}

    def row(self) -> str:
        r = self.rates()
        return (
            f"{self.sandbox:7s} {'on' if self.saar else 'off':4s} {self.in_flight:9d} {self.samples:7d} "
            f"{self.wall_s:7.1f} {r['samples_per_s']:9.2f} {r['generations_per_s']:7.1f} "
            f"{r['tool_calls_per_s']:7.1f} {r['harness_cpu_ms_per_generation']:8.2f} "
            f"{r['harness_cpu_ms_per_call']:9.2f} {r['harness_util']:5.2f} {self.peak_rss_mb:7.0f} "
            f"{r['log_bytes_per_sample']:9.0f} {r['events_per_sample']:8.1f} "
            f"{self.load_1m:5.1f}  {self.status}{' (profiled)' if self.profiled else ''}"
        )


HEADER = (
    "sandbox saar in_flight samples  wall_s samples/s  gens/s calls/s cpu_ms/gen cpu_ms/call  util "
    "peak_MB log_B/smpl ev/smpl  load  status"
)


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
        wall, cpu = time.monotonic() - start, _cpu(resource.getrusage(resource.RUSAGE_SELF)) - _cpu(self0)
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


# -- one configuration, in a child process ----------------------------------------------------------------------


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def _eval(spec: dict[str, Any], config: Config, samples: int, log_dir: str) -> Any:
    from inspect_ai import eval

    return eval(
        TASK,
        model=f"{spec['provider']}/{spec['model']}",
        model_base_url=spec["base_url"],
        task_args={"data": "fixture", "sandbox": config.sandbox, "saar": config.saar, "seed": spec["seed"]},
        epochs=max(1, samples // PROBLEMS),
        max_samples=config.in_flight,
        max_connections=config.in_flight,
        display="none",
        log_dir=log_dir,
        log_level="warning",
        log_realtime=spec["log_realtime"],
    )[0]


def _timed_eval(spec: dict[str, Any], config: Config) -> Any:
    """The measured eval (its own frame, so a sampled stack tells it from the warm-up)."""
    return _eval(spec, config, config.samples, spec["log_dir"])


def run_config(spec: dict[str, Any]) -> Figures:
    """Run one configuration in this process (the child): a warm-up eval, then the timed ``inspect_ai.eval``."""
    from inspect_ai.event import ModelEvent

    config = Config(**spec["config"])
    if spec["warmup_samples"] > 0:
        warm = _eval(spec, config, spec["warmup_samples"], str(Path(spec["log_dir"]) / "warmup"))
        if warm.status != "success":
            raise RuntimeError(f"the warm-up eval ended {warm.status}: {warm.error.message if warm.error else ''}")
    profiler = cProfile.Profile() if spec.get("profile") else None
    self0, children0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    server0, start = cpu_seconds(spec["server_pid"]), time.monotonic()
    if profiler is not None:
        profiler.enable()
    log = _timed_eval(spec, config)
    if profiler is not None:
        profiler.disable()
    wall, server = time.monotonic() - start, cpu_seconds(spec["server_pid"]) - server0
    self1, children1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    if profiler is not None:
        profiler.dump_stats(spec["profile"])
    samples = log.samples or []
    location = log.location.removeprefix("file://") if log.location else ""
    return Figures(
        sandbox=config.sandbox,
        saar=config.saar,
        in_flight=config.in_flight,
        samples=len(samples),
        status=log.status,
        wall_s=wall,
        generations=sum(1 for s in samples for e in s.events if isinstance(e, ModelEvent)),
        tool_calls=sum(int((s.metadata or {}).get("trajectory", {}).get("tool_calls", 0)) for s in samples),
        harness_cpu_s=_cpu(self1) - _cpu(self0),
        children_cpu_s=_cpu(children1) - _cpu(children0),
        server_cpu_s=server,
        peak_rss_mb=self1.ru_maxrss / 1024,
        log_bytes=os.path.getsize(location) if location and os.path.exists(location) else 0,
        events=sum(len(s.events) for s in samples),
        load_1m=os.getloadavg()[0],
        error=log.error.message if log.error else None,
        profiled=profiler is not None,
    )


def child_main(spec_json: str) -> int:
    figures = run_config(json.loads(spec_json))
    print(f"{RESULT} {json.dumps(asdict(figures))}", flush=True)
    return 0


def run_child(
    config: Config, server: StandinProcess, args: argparse.Namespace, profile: str | None, stacks: str | None
) -> Figures:
    """One configuration in a fresh child process (under ``py-spy record`` when ``stacks`` names its output)."""
    spec = {
        "config": asdict(config),
        "provider": args.provider,
        "model": server.name,
        "base_url": server.base_url,
        "seed": args.seed,
        "server_pid": server.pid,
        "log_dir": str(Path(args.out) / "logs" / config.label),
        "log_realtime": args.log_realtime == "on",
        "warmup_samples": args.warmup_samples,
        "profile": profile,
    }
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    argv = [sys.executable, "-m", "bench.eval_speed", "--child", json.dumps(spec)]
    if stacks is not None:
        argv = ["py-spy", "record", "--rate", str(SPY_RATE), "--format", "raw", "--output", stacks, "--", *argv]
    done = subprocess.run(
        argv,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=args.timeout,
    )
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith(RESULT)), None)
    if line is None:
        tail = (done.stderr or done.stdout)[-3000:]
        return Figures(
            config.sandbox, config.saar, config.in_flight, 0, "error", 0.0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0, 0,
            os.getloadavg()[0], error=f"the eval process exited {done.returncode}:\n{tail}",
        )  # fmt: skip
    return Figures(**json.loads(line.split(" ", 1)[1]))


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


def stack_report(path: str, figures: Figures) -> list[str]:
    """Where the eval's CPU went: each bucket's share of the busy samples, as CPU ms per generation and per call
    (the eval's measured CPU spread over its busy samples; a waiting-but-runnable thread counts as busy)."""
    stacks = read_stacks(path)
    busy = sum(n for _, n in stacks)
    if not busy or not figures.generations or not figures.tool_calls:
        return [f"# {path}: no busy samples"]
    ms = 1000 * figures.harness_cpu_s / busy
    lines = [f"# {path}: {busy} busy samples over {figures.harness_cpu_s:.1f} CPU s", "share  ms/gen ms/call  what"]
    for name, pattern in BUCKETS:
        rx = re.compile(pattern)
        n = sum(count for frames, count in stacks if any(rx.search(f) for f in frames))
        lines.append(
            f"{100 * n / busy:4.1f}% {n * ms / figures.generations:7.2f} {n * ms / figures.tool_calls:7.2f}  {name}"
        )
    leaves: dict[str, int] = {}
    for frames, count in stacks:
        where = re.search(r"\(([^:)]+)", frames[-1])
        parts = (where.group(1) if where else frames[-1]).split("/")
        key = "/".join(parts[:2]) if parts[0] == "inspect_ai" else parts[0]
        leaves[key] = leaves.get(key, 0) + count
    top = sorted(leaves.items(), key=lambda kv: -kv[1])[:12]
    lines.append("self time by module: " + ", ".join(f"{k} {100 * v / busy:.0f}%" for k, v in top))
    return lines


# -- the whole benchmark ----------------------------------------------------------------------------------------


class Unavailable(RuntimeError):
    """A sandbox or the stand-in cannot start here."""


def choose_sandboxes(requested: Sequence[str]) -> tuple[list[str], list[str]]:
    """The sandboxes to run and notes on those skipped; raises :class:`Unavailable` for one named that cannot run."""
    from sandboxes.backends import describe_choice, docker_ready

    chosen, notes = [], []
    names = ["local", "docker"] if "auto" in requested else list(dict.fromkeys(requested))
    for name in names:
        if name == "docker" and not docker_ready():
            message = "docker sandbox: no Docker engine answers here, or the sandbox image is not built"
            if "auto" in requested:
                notes.append(message + " (skipped)")
                continue
            raise Unavailable(message)
        try:
            describe_choice(name)
        except Exception as exc:
            raise Unavailable(f"{name} sandbox cannot start here: {exc}") from exc
        chosen.append(name)
    return chosen, notes


def configs(args: argparse.Namespace, sandboxes: Sequence[str]) -> list[Config]:
    out = []
    for sandbox in sandboxes:
        for saar in args.saar:
            for n in args.in_flight:
                samples = max(args.samples, args.min_rounds * n)
                out.append(Config(sandbox, saar == "on", n, -(-samples // PROBLEMS) * PROBLEMS))
    return out


def machine() -> dict[str, Any]:
    model = ""
    try:
        model = next(x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import inspect_ai

    return {
        "cpus": os.cpu_count(),
        "cpu_model": model.split(":", 1)[-1].strip(),
        "python": platform.python_version(),
        "inspect_ai": inspect_ai.__version__,
        "load_1m_before": os.getloadavg()[0],
    }


def bench(args: argparse.Namespace) -> int:
    try:
        sandboxes, notes = choose_sandboxes(args.sandboxes)
    except Unavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.py_spy and shutil.which("py-spy") is None:
        print("error: --py-spy needs py-spy on PATH (pip install py-spy)", file=sys.stderr)
        return 2
    for note in notes:
        print(f"# {note}", flush=True)
    if "docker" in sandboxes:  # the pool's bound, for the ceiling here and the eval processes (they inherit it)
        from sandboxes.docker.policy import MAX_CONTAINERS_ENV

        os.environ[MAX_CONTAINERS_ENV] = str(max(args.max_containers, *args.sandbox_concurrency))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    policy = Policy(calls=args.calls, fail_rate=args.fail_rate)
    report: dict[str, Any] = {
        "command": " ".join(["python -m bench.eval_speed", *sys.argv[1:]]),
        "machine": machine(),
        "provider": args.provider,
        "policy": asdict(policy),
        "sandboxes": sandboxes,
        "notes": notes,
    }
    try:
        server = StandinProcess(StandinConfig(policy=policy), log_path=out / "standin.log").start()
    except StandinError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results: list[Figures] = []
    try:
        print(f"# stand-in engine (scripted policy, not a model) at {server.base_url}, pid {server.pid}", flush=True)
        if args.server_seconds > 0:
            report["standin"] = server_ceiling(server, args.server_connections, args.server_seconds)
            for row in report["standin"]:
                print(
                    f"# stand-in alone: {row['connections']:3d} connections {row['requests_per_s']:7.0f} req/s, "
                    f"server {row['server_cpu_ms_per_request']:.3f} CPU ms/request (util {row['server_util']:.2f})",
                    flush=True,
                )
        if args.sandbox_seconds > 0:
            report["sandbox_alone"] = []
            for name in sandboxes:
                for row in sandbox_ceiling(name, args.sandbox_concurrency, args.sandbox_seconds):
                    report["sandbox_alone"].append(row)
                    print(
                        f"# {name} sandbox alone: {row['concurrency']:3d} at once {row['calls_per_s']:6.1f} calls/s "
                        f"({row['failed']} failed), caller {row['caller_cpu_ms_per_call']:.2f} CPU ms/call",
                        flush=True,
                    )
        print(HEADER, flush=True)
        for config in configs(args, sandboxes):
            profile = str(Path(args.profile) / f"{config.label}.prof") if args.profile else None
            stacks = str(Path(args.py_spy) / f"{config.label}.txt") if args.py_spy else None
            for folder in (args.profile, args.py_spy):
                if folder:
                    Path(folder).mkdir(parents=True, exist_ok=True)
            figures = run_child(config, server, args, profile, stacks)
            results.append(figures)
            print(figures.row(), flush=True)
            if figures.error:
                print(f"#   {config.label}: {figures.error.strip()}", flush=True)
            if profile and os.path.exists(profile):
                print_profile(profile)
            if stacks and os.path.exists(stacks):
                report.setdefault("stacks", {})[config.label] = stack_report(stacks, figures)
                print("\n".join(report["stacks"][config.label]), flush=True)
    finally:
        server.stop()
    report["results"] = [f.to_dict() for f in results]
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    print(f"\njson: {args.json}\nlogs: {out / 'logs'}")
    return 0 if results and all(f.status == "success" for f in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.eval_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--in-flight", nargs="+", type=int, default=[16, 64, 256], help="samples in flight")
    parser.add_argument("--samples", type=int, default=128, help="samples per configuration, at least")
    parser.add_argument("--min-rounds", type=int, default=1, help="samples per configuration >= rounds x in flight")
    parser.add_argument("--sandboxes", nargs="+", default=["auto"], choices=["auto", "local", "docker"])
    parser.add_argument("--saar", nargs="+", default=["on", "off"], choices=["on", "off"])
    parser.add_argument("--provider", default="vllm", choices=["vllm", "sglang"], help="Inspect's provider")
    parser.add_argument("--calls", type=int, default=Policy.calls, help="the policy's successful runs per sample")
    parser.add_argument("--fail-rate", type=float, default=Policy.fail_rate, help="the policy's failing programs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--server-seconds", type=float, default=3.0, help="the stand-in's own ceiling (0: skip)")
    parser.add_argument("--server-connections", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--warmup-samples", type=int, default=4, help="an untimed eval first, in each eval process")
    parser.add_argument(
        "--log-realtime", default="on", choices=["on", "off"], help="Inspect's realtime sample buffer (default on)"
    )
    parser.add_argument("--sandbox-seconds", type=float, default=3.0, help="each sandbox's own ceiling (0: skip)")
    parser.add_argument("--sandbox-concurrency", nargs="+", type=int, default=[1, 8])
    parser.add_argument(
        "--max-containers",
        type=int,
        default=16,
        help="the docker pool's bound (a sample holds a container while it runs, so at most this many run at once)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per configuration")
    parser.add_argument("--out", default=None, help="logs, stand-in log, profiles (default: a temporary directory)")
    parser.add_argument("--json", default=None, help="the figures as JSON (default: OUT/speed.json)")
    parser.add_argument("--profile", default=None, help="a directory: run each configuration under cProfile")
    parser.add_argument("--py-spy", default=None, help="a directory: sample each eval process with py-spy")
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child)
    args.out = args.out or tempfile.mkdtemp(prefix="speed-")
    args.json = args.json or str(Path(args.out) / "speed.json")
    os.chdir(ROOT)
    return bench(args)


if __name__ == "__main__":
    sys.exit(main())
