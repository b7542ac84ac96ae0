"""Builders of small, real Inspect eval logs for the report and regression tests (not a test module).

The logs are made with inspect_ai's own classes and written with ``write_eval_log``,
so the code under test reads them exactly as it reads logs of real runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSample, EvalSpec, EvalStats, write_eval_log
from inspect_ai.scorer import Score

_counter = iter(range(10**6))


def trajectory(
    *,
    calls: int = 0,
    failures: int = 0,
    kept: int = 0,
    tokens: int = 100,
    saar_on: bool = False,
    error_kinds: dict[str, int] | None = None,
    events: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A trajectory summary shaped like :meth:`harness.core.rollout.Trajectory.summary`."""
    events = events or []
    return {
        "saar_on": saar_on,
        "stop_reason": "answer",
        "assistant_turns": 1 + calls,
        "tool_calls": calls,
        "tool_failures": failures,
        "failures_kept": kept,
        "error_kinds": error_kinds or {},
        "saar_shallow": sum(e["action"] == "shallow" for e in events),
        "saar_deep": sum(e["action"] == "deep" for e in events),
        "saar_purified": sum(bool(e.get("ok")) for e in events),
        "saar_exhausted": sum(e["action"] == "exhausted" for e in events),
        "tokens_generated": tokens,
        "tokens_kept": tokens,
        "saar_events": events,
    }


def event(
    action: str,
    kind: str = "NameError",
    ok: bool = False,
    turn: int = 0,
    retry: int = 1,
    similarity: float | None = None,
) -> dict[str, Any]:
    return {
        "turn": turn,
        "retry": retry,
        "action": action,
        "error_kind": kind,
        "similarity": similarity if similarity is not None else 0.7 if action == "shallow" else 0.2,
        "ok": ok,
        "tokens": 10,
    }


def make_log(
    directory: Path,
    task: str,
    saar: bool,
    samples: list[tuple[str, int, float, dict[str, Any]]],
    *,
    status: str = "success",
    model: str = "replay/test.yaml",
    epochs: int = 1,
    errored: list[tuple[str, int]] = (),  # type: ignore[assignment]
    seconds: float = 12.0,
) -> Path:
    """Write one eval log of ``task`` with SAAR ``saar``; ``samples`` are (id, epoch, accuracy, trajectory)."""
    spec = EvalSpec(
        created="2025-06-01T12:00:00+00:00",
        task=task,
        task_args={"saar": saar, "data": "fixture", "epochs": epochs},
        dataset=EvalDataset(name=task, samples=len({s[0] for s in samples})),
        model=model,
        config=EvalConfig(epochs=epochs),
    )
    out = []
    for sid, epoch, acc, traj in samples:
        value = {"accuracy": acc, "tool_calls": float(traj["tool_calls"]), "tokens": float(traj["tokens_generated"])}
        out.append(
            EvalSample(
                id=sid,
                epoch=epoch,
                input="q",
                target="1",
                total_time=2.0,
                scores={"math_scorer": Score(value=value, metadata={"trajectory": traj})},
            )
        )
    for sid, epoch in errored:
        from inspect_ai._util.error import EvalError

        out.append(
            EvalSample(
                id=sid,
                epoch=epoch,
                input="q",
                target="1",
                error=EvalError(message="boom", traceback="", traceback_ansi=""),
            )
        )
    stats = EvalStats(started_at="2025-06-01T12:00:00+00:00", completed_at=f"2025-06-01T12:00:{int(seconds):02d}+00:00")
    log = EvalLog(status=status, eval=spec, samples=out, stats=stats)  # type: ignore[arg-type]
    path = directory / f"2025-06-01T12-00-00+00-00_{task}-{'on' if saar else 'off'}_{next(_counter)}.eval"
    write_eval_log(log, str(path))
    return path
