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
there and prints where the timed eval's CPU went (:data:`bench.eval_profiles.BUCKETS`: Inspect's generate and
provider, its transcript and realtime buffer, the log writer, the solver and SAAR, the sandbox pool), per generation
and per call. The figures of a profiled run are not the harness's speed.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
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

from bench.ceilings import cpu_of, sandbox_ceiling, server_ceiling
from bench.eval_profiles import SPY_RATE, print_profile, stack_report
from bench.scripted_policy import Policy
from bench.standin import StandinConfig, StandinError, StandinProcess, cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
TASK = "tasks/aime24.py"
PROBLEMS = 4  #: problems in the aime24 fixture
RESULT = "SPEED_RESULT"  #: the marker of a child's result line


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


# -- one configuration, in a child process ----------------------------------------------------------------------


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
        harness_cpu_s=cpu_of(self1) - cpu_of(self0),
        children_cpu_s=cpu_of(children1) - cpu_of(children0),
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
                report.setdefault("stacks", {})[config.label] = stack_report(
                    stacks, figures.harness_cpu_s, figures.generations, figures.tool_calls
                )
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
