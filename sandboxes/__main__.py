"""Command line of the sandboxes: ``python -m sandboxes run [--backend B] [--timeout S] FILE...``.

``run`` executes the files one after the other in ONE sandbox (so a file may
read what an earlier one wrote) and prints one JSON line per file: the
structured :class:`~sandboxes.base.ExecResult` plus ``"file"``. Exit status 0
when every file ran (whatever the programs did), 2 for bad arguments such as a
missing file. The sandbox benchmark and soak are tools: ``python -m bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

from sandboxes import COMMANDS
from sandboxes.backends import BACKEND_NAMES, get_backend


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sandboxes", description="Run programs in a CLEANER sandbox.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help=COMMANDS["run"])
    run.add_argument("files", nargs="+", metavar="FILE", help="Python source files")
    run.add_argument("--backend", choices=BACKEND_NAMES, default="auto", help="sandbox backend (default: auto)")
    run.add_argument("--timeout", type=float, default=10.0, help="seconds per file (default: 10)")
    run.add_argument("--stdin", metavar="FILE", help="file whose bytes every program gets on stdin")
    return parser


async def _run(files: list[Path], backend_name: str, timeout: float, stdin: bytes) -> None:
    backend = get_backend(backend_name)
    try:
        sandbox = await backend.acquire()
        try:
            for path in files:
                code = path.read_text(encoding="utf-8", errors="replace")
                result = await sandbox.run_python(code, timeout=timeout, stdin=stdin)
                print(json.dumps({"file": str(path), "backend": sandbox.backend, **result.to_dict()}), flush=True)
        finally:
            await backend.release(sandbox)
    finally:
        await backend.shutdown()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    files = [Path(f) for f in args.files]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        print(f"error: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.timeout <= 0:
        print(f"error: --timeout must be positive, not {args.timeout}", file=sys.stderr)
        return 2
    stdin = b""
    if args.stdin:
        if not Path(args.stdin).is_file():
            print(f"error: no such --stdin file: {args.stdin}", file=sys.stderr)
            return 2
        stdin = Path(args.stdin).read_bytes()
    asyncio.run(_run(files, args.backend, args.timeout, stdin))
    return 0


if __name__ == "__main__":
    sys.exit(main())
