"""``vllm serve``, started before its model directory exists: vLLM's imports first, then the directory.

On a fresh machine vLLM's API server spends a while importing before it reads its model, while the
project writes the served directory (the GGUF parsed, the LoRA merged). The two can run at once:
:class:`harness.engines.serve.Server` starts this launcher, writes the directory, and the launcher hands
over to ``vllm serve`` as soon as the directory's ``config.json`` is there
(:func:`harness.engines.models.save_to_cache` renames a complete directory into place, so the file means
the directory is whole)::

    python -m harness.engines.vllm_launch --when <dir>/config.json -- serve <dir> --host 127.0.0.1 ...

The launcher gives up (exit 3) if the file does not come within ``--timeout`` seconds, or when the
process that started it is gone, so it never waits behind a parent that failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

#: exit status when the model directory never came
GAVE_UP = 3


def wait_for(path: Path, *, timeout_s: float, parent: int, poll_s: float = 0.1) -> bool:
    """Whether ``path`` exists before ``timeout_s`` passes and while process ``parent`` lives."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline or os.getppid() != parent:
            return False
        time.sleep(poll_s)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.engines.vllm_launch", description=__doc__)
    parser.add_argument("--when", type=Path, required=True, help="start vllm once this file exists")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for it (default 600)")
    parser.add_argument("vllm_args", nargs=argparse.REMAINDER, help="-- then vllm's arguments (serve ...)")
    args = parser.parse_args(argv)
    vllm_args = args.vllm_args[1:] if args.vllm_args[:1] == ["--"] else args.vllm_args
    parent = os.getppid()
    from vllm.entrypoints.cli.main import main as vllm_main  # the slow part, while the directory is written
    from vllm.entrypoints.openai import api_server  # noqa: F401 - what `serve` imports when it runs

    if not wait_for(args.when, timeout_s=args.timeout, parent=parent):
        print(f"vllm_launch: {args.when} did not appear within {args.timeout:.0f} s; not starting", file=sys.stderr)
        return GAVE_UP
    sys.argv = ["vllm", *vllm_args]
    vllm_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
