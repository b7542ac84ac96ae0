"""Soak and chaos: ``python -m bench.sandbox_soak --backend docker --clients 64 --minutes 10 --kill-every 5``.

``--mix memory`` runs memory-hungry programs only (``--kill-every 0``: no chaos) and counts the containers that
died with them, which must be none.

Many rollout-like clients at once, for minutes, while a chaos loop kills what the sandboxes run on.
Each client acquires a sandbox, makes a rollout of calls (with a pause between them, the model's
turn), releases it and starts the next rollout. The calls are a mix: ok programs, tracebacks,
timeouts, output floods and a few hostile programs (copied from ``tests/test_hostile.py``), each
with the result it must give. Every ``--kill-every`` seconds the chaos loop SIGKILLs one random
container of this process (docker) or one random bwrap process of a running call (local: the
process the sandbox spawned, which holds the program's namespaces).

Asserted (exit status 1 and the reasons when one fails):

- every call ends within its timeout plus ``--margin`` seconds, with a result;
- every result is either what its program must give, or ``sandbox_failed=True`` with
  ``error_kind="SandboxError"``: a kill is never scored as the model's failure (a wrong
  error kind, a missing output);
- every sandbox failure was caused by a kill of the chaos loop (docker: it names a container the loop
  killed; local: a kill landed while the call ran), and no container died without one: what a program
  does is its own failed call, never its sandbox's;
- afterwards no container of this process and no process of the sandboxes is left.

Bounded: no new call starts after ``--minutes``, at most ``--max-calls`` calls, and the whole run
is cancelled past its deadline plus two minutes (the sandboxes are still shut down). Loopback only:
the containers have no network, bwrap unshares it, and the command talks to nothing but the local
Docker socket. Prints one JSON object (``--json``) or a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from bench.soak_programs import MARKER, MIXES, TRIVIAL_OK, judge


@dataclass
class Call:
    program: str
    timeout: float
    start: float
    elapsed: float
    kind: str | None
    sandbox_failed: bool
    verdict: str  #: "ok" (as expected), "sandbox_failed" (a clear sandbox error) or what was wrong
    container: str | None = None  #: the container a sandbox failure concerns (docker)
    detail: str = ""  #: the start of a sandbox failure's message
    after: str | None = None  #: the program of the call before it in the same sandbox (None: the first)


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.calls: list[Call] = []
        self.kills: list[dict[str, Any]] = []
        self.killed: set[str] = set()  #: short ids of the containers the chaos loop killed
        self.replaced: list[str] = []  #: short ids of the containers the sandboxes replaced (dead or not answering)
        self.errors: list[str] = []  #: exceptions outside the calls (acquire, release)
        self.uids: set[int] = set()  #: the local sandboxes' uids (checked for leftovers afterwards)
        #: children this process had before the soak (a host's own helpers): not the soak's to leave or remove
        self.children_before = set(_children(os.getpid()))
        self.t0 = time.monotonic()
        self.stop_at = self.t0 + args.minutes * 60
        self.backend: Any = None

    def _make_backend(self) -> Any:
        from sandboxes.backends import get_backend

        if self.args.backend == "docker":
            return get_backend("docker", max_containers=self.args.clients, acquire_timeout=120.0)
        return get_backend("local", max_idle=self.args.clients)

    def _more(self) -> bool:
        return time.monotonic() < self.stop_at and len(self.calls) < self.args.max_calls

    async def client(self, n: int) -> None:
        rng = random.Random(self.args.seed * 1000 + n)
        programs = MIXES[self.args.mix]
        weights = [p.weight for p in programs]
        while self._more():
            try:
                sandbox = await self.backend.acquire()
            except Exception as exc:  # noqa: BLE001 - recorded: an acquire must not fail in a soak
                self.errors.append(f"acquire: {type(exc).__name__}: {exc}")
                await asyncio.sleep(1)
                continue
            if getattr(sandbox, "uid", None) is not None:
                self.uids.add(sandbox.uid)
            dropped = len(getattr(sandbox, "dropped", ()))
            before: str | None = None
            try:
                for _ in range(rng.randint(4, 16)):
                    if not self._more():
                        break
                    program = rng.choices(programs, weights)[0]
                    start = time.monotonic()
                    result = await sandbox.run_python(program.code, timeout=program.timeout)
                    elapsed = time.monotonic() - start
                    self.calls.append(
                        Call(
                            program.name,
                            program.timeout,
                            start - self.t0,
                            elapsed,
                            result.error_kind,
                            result.sandbox_failed,
                            judge(program, result),
                            result.extra.get("container") if result.sandbox_failed else None,
                            result.stderr[:200] if result.sandbox_failed else "",
                            before,
                        )
                    )
                    before = program.name
                    await asyncio.sleep(rng.uniform(0, self.args.think_ms / 1000))  # the model's turn
            finally:
                try:
                    await self.backend.release(sandbox)
                except Exception as exc:  # noqa: BLE001
                    self.errors.append(f"release: {type(exc).__name__}: {exc}")
                self.replaced += getattr(sandbox, "dropped", [])[dropped:]

    async def chaos(self) -> None:
        if self.args.kill_every <= 0:
            return
        while True:
            await asyncio.sleep(self.args.kill_every * self.rng.uniform(0.5, 1.5))
            if not self._more():
                return
            try:
                victim = await asyncio.to_thread(self._kill_one)
            except Exception as exc:  # noqa: BLE001 - the chaos loop never stops the soak
                victim = f"kill failed: {type(exc).__name__}: {exc}"
            if victim:
                self.kills.append({"at": round(time.monotonic() - self.t0, 2), "victim": victim})

    def _kill_one(self) -> str | None:
        if self.args.backend == "docker":
            from sandboxes.docker import engine

            client = engine.client()
            try:
                mine = {"label": f"{engine.OWNER_PID}={os.getpid()}", "status": "running"}
                for _ in range(5):  # one list call, no inspect per container (they come and go meanwhile)
                    running = [c["Id"] for c in client.api.containers(filters=mine)]
                    if not running:
                        return None
                    victim = self.rng.choice(running)
                    self.killed.add(victim[:12])  # before the kill: a call may fail of it at once
                    try:
                        client.api.kill(victim)
                    except Exception:  # noqa: BLE001 - removed or stopped since the list: pick again
                        continue
                    return f"container {victim[:12]}"
                return None
            finally:
                client.close()
        for _ in range(40):  # a running call's bwrap: a direct child of this process
            pids = [pid for pid in _children(os.getpid()) if _comm(pid) == "bwrap"]
            if pids:
                pid = self.rng.choice(pids)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                return f"bwrap pid {pid}"
            time.sleep(0.05)
        return None

    async def run(self) -> dict[str, Any]:
        self.backend = self._make_backend()
        try:
            if self.args.backend == "docker":  # the pool's containers start before the clock runs, 8 at a time
                for n in range(8, self.args.clients + 8, 8):
                    try:
                        await self.backend.prewarm(min(n, self.args.clients))
                    except Exception as exc:  # noqa: BLE001 - the clients start the missing ones on demand
                        self.errors.append(f"prewarm: {type(exc).__name__}: {exc}")
            self.t0 = time.monotonic()
            self.stop_at = self.t0 + self.args.minutes * 60
            chaos = asyncio.ensure_future(self.chaos())
            await asyncio.gather(*(self.client(n) for n in range(self.args.clients)))
            chaos.cancel()
            duration = time.monotonic() - self.t0
        finally:
            await self.backend.shutdown()
        leftovers = await asyncio.to_thread(self._leftovers)
        return self.report(duration, leftovers)

    def _leftovers(self) -> list[str]:
        """What is left of the sandboxes after shutdown (waiting up to 60 s for removals to land)."""
        deadline = time.monotonic() + 60
        while True:
            left = [f"process {pid}" for pid in _marked_processes()]
            new = (pid for pid in _children(os.getpid()) if pid not in self.children_before)
            left += [f"child process {pid} ({_comm(pid)})" for pid in new]
            if self.args.backend == "docker":
                from sandboxes.docker import engine

                client = engine.client()
                try:
                    mine = {"label": f"{engine.OWNER_PID}={os.getpid()}"}
                    left += [
                        f"container {c['Id'][:12]} ({c['State']})"
                        for c in client.api.containers(all=True, filters=mine)
                    ]
                finally:
                    client.close()
            else:
                from sandboxes.local.uids import pids_of_uid

                for uid in sorted(self.uids):
                    left += [f"uid {uid} process {pid}" for pid in (pids_of_uid(uid) if _free(uid) else [])]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(1)

    def report(self, duration: float, leftovers: list[str]) -> dict[str, Any]:
        calls = self.calls
        lat = sorted(c.elapsed * 1000 for c in calls)
        trivial = sorted(c.elapsed * 1000 for c in calls if c.program in TRIVIAL_OK and c.verdict == "ok")
        late = [c for c in calls if c.elapsed > c.timeout + self.args.margin]
        wrong = [c for c in calls if c.verdict not in ("ok", "sandbox_failed")]
        failed = [c for c in calls if c.sandbox_failed]
        not_by_kill = [c for c in failed if not self._caused_by_kill(c)]
        # a container the chaos loop did not kill and that was replaced all the same: it died of its program
        died = [cid for cid in self.replaced if cid not in self.killed]
        window = 10.0
        per_window = Counter(int((c.start + c.elapsed) // window) for c in calls)
        full = [per_window.get(i, 0) / window for i in range(int(duration // window))]
        out: dict[str, Any] = {
            "backend": self.args.backend,
            "clients": self.args.clients,
            "minutes": round(duration / 60, 2),
            "kill_every_s": self.args.kill_every,
            "calls": len(calls),
            "calls_per_s": round(len(calls) / duration, 1) if duration else 0.0,
            "calls_per_s_10s_windows": {"min": min(full, default=0.0), "median": _pct(full, 0.5)} if full else {},
            "latency_ms_all": {"p50": _pct(lat, 0.5), "p99": _pct(lat, 0.99), "max": lat[-1] if lat else None},
            "latency_ms_ok_calls": {"p50": _pct(trivial, 0.5), "p99": _pct(trivial, 0.99)},
            "by_program": dict(Counter(c.program for c in calls)),
            "sandbox_failed": len(failed),
            "sandbox_failed_by_kill": len(failed) - len(not_by_kill),
            "sandbox_failed_not_by_kill": len(not_by_kill),
            "sandbox_failed_not_by_kill_programs": dict(Counter(c.program for c in not_by_kill).most_common(20)),
            "sandbox_failed_not_by_kill_examples": [c.detail for c in not_by_kill[:5]],
            # what ran just before in the same sandbox: a program whose cleanup delays the next call shows here
            "sandbox_failed_not_by_kill_after": dict(Counter(str(c.after) for c in not_by_kill).most_common(20)),
            "kills": len(self.kills),
            "containers_replaced": len(self.replaced),
            "containers_died_without_a_kill": len(died),
            "late": [f"{c.program} took {c.elapsed:.2f} s (timeout {c.timeout:g} s)" for c in late[:20]],
            "late_max_over_s": round(max((c.elapsed - c.timeout for c in late), default=0.0), 2),
            "misscored": dict(Counter(c.verdict for c in wrong).most_common(20)),
            "errors": self.errors[:20],
            "leftovers": leftovers[:20],
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        }
        out["failures"] = [
            f"{name}: {len(items)}"
            for name, items in (
                ("late calls", late),
                ("misscored calls", wrong),
                ("sandbox failures no kill caused", not_by_kill),
                ("containers that died without a kill", died),
                ("errors", self.errors),
                ("leftovers", leftovers),
            )
            if items
        ]
        if not calls:
            out["failures"].append("no call was made")
        return out

    def _caused_by_kill(self, call: Call) -> bool:
        """Whether a sandbox failure is the chaos loop's doing: docker names the container, which the loop killed;
        a local call was running when a kill landed (the loop kills only running calls)."""
        if self.args.backend == "docker":
            return call.container is not None and call.container in self.killed
        return any(call.start <= kill["at"] <= call.start + call.elapsed + 0.5 for kill in self.kills)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(sorted(values)[min(len(values) - 1, round(q * (len(values) - 1)))], 2)


def _children(parent: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rpartition(b")")[2].split()
            except OSError:
                continue
            if len(fields) > 1 and int(fields[1]) == parent and fields[0] not in (b"Z", b"X"):
                found.append(int(name))
    return found


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _marked_processes() -> list[int]:
    """Processes on this host whose command line carries this run's marker (what hostile programs leave)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if MARKER.encode() in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def _free(uid: int) -> bool:
    """Whether no sandbox holds ``uid`` now (its processes, if any, are leftovers; else they are another's)."""
    import fcntl

    from sandboxes.local.uids import UID_LOCK_DIR

    try:
        fd = os.open(UID_LOCK_DIR / f"{uid}.lock", os.O_RDWR)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the lock


async def bounded(args: argparse.Namespace) -> dict[str, Any]:
    soak = Soak(args)
    limit = args.minutes * 60 + 120 + (300 if args.backend == "docker" else 60)  # + start-up of the pool
    task = asyncio.ensure_future(soak.run())
    done, _ = await asyncio.wait({task}, timeout=limit)
    if done and task.exception() is None:
        return task.result()
    why = f"the soak did not finish within {limit:g} s" if not done else f"the soak failed: {task.exception()!r}"
    if not done:
        task.cancel()  # the backend is shut down in run()'s finally
        await asyncio.wait({task}, timeout=120)
    out = soak.report(time.monotonic() - soak.t0, await asyncio.to_thread(soak._leftovers))
    out["failures"].append(why)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox_soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("docker", "local"), default="docker")
    parser.add_argument("--clients", type=int, default=64, help="concurrent rollout-like clients")
    parser.add_argument("--minutes", type=float, default=10.0, help="no call starts after this")
    parser.add_argument("--max-calls", type=int, default=1_000_000, help="no call starts after this many")
    parser.add_argument("--kill-every", type=float, default=5.0, help="mean seconds between kills (0: no chaos)")
    parser.add_argument(
        "--margin",
        type=float,
        default=None,
        help="seconds past its timeout a call may take (default: 15 docker, 5 local)",
    )
    parser.add_argument("--think-ms", type=float, default=20.0, help="most milliseconds between a client's calls")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--mix",
        choices=sorted(MIXES),
        default="default",
        help="the programs: 'default' (a rollout-like mix with hostile ones) or 'memory' (memory-hungry programs "
        "and the calls after them; use with --kill-every 0 to count the containers that died with them)",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON report")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.minutes <= 0 or args.max_calls < 1:
        parser.error("--clients and --max-calls must be >= 1 and --minutes positive")
    if args.margin is None:
        args.margin = 15.0 if args.backend == "docker" else 5.0
    out = asyncio.run(bounded(args))
    print(json.dumps(out, indent=None if args.json else 2))
    if not args.json:
        verdict = "FAILED: " + "; ".join(out["failures"]) if out["failures"] else "passed"
        print(
            f"soak {args.backend}: {out['calls']} calls, {out['calls_per_s']} calls/s, "
            f"{out['sandbox_failed']} sandbox_failed ({out['sandbox_failed_not_by_kill']} not by a kill) after "
            f"{out['kills']} kills, {out['containers_died_without_a_kill']} containers died without a kill: {verdict}",
            file=sys.stderr,
        )
    return 1 if out["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
