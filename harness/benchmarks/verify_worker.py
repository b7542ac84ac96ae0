"""A math-verify worker process: ``python -m harness.benchmarks.verify_worker`` (started by :mod:`.scoring`).

math-verify bounds its work with SIGALRM, which only works in a process's main thread.
Comparisons requested from other threads (a Ray actor, a thread pool) are sent here,
where they run in the main thread with those timeouts on; the caller also kills this
process if it does not answer in time. A plain child interpreter (not multiprocessing)
so that no caller's ``__main__`` is re-imported in it.

Protocol: one JSON object per line on stdin, ``{"answer": str, "target": str, "timeout": int}``;
one per line on stdout, ``{"equivalent": bool, "timed_out": bool}`` (``timed_out``: math-verify
gave up before it found the answer equivalent, see :class:`harness.benchmarks.scoring.Verdict`)
or ``{"error": str}``. The first line written is ``{"ready": true}``, once math-verify is imported.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    import math_verify  # noqa: F401, PLC0415 - load sympy and the parser before saying ready

    from harness.benchmarks.scoring import _equivalent  # noqa: PLC0415 - imports math-verify on first use

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            verdict = _equivalent(request["answer"], request["target"], request["timeout"])
            reply = {"equivalent": verdict.equivalent, "timed_out": verdict.timed_out}
        except Exception as exc:  # noqa: BLE001 - any failure is reported to the caller, which logs it and counts it as wrong
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
