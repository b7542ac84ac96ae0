"""The training and sandbox tools behind ``python -m harness``: ``python -m harness trainers CMD ...`` is
``python -m trainers CMD ...`` and ``python -m harness sandboxes CMD ...`` is ``python -m sandboxes CMD ...``, with
the same arguments and exit status.

The harness never imports the trainers (they sit above it: ``[tool.importlinter]`` in pyproject.toml), and the
front door's parser imports neither package's command line. :data:`TRAINERS` is the one list of
``python -m trainers``'s commands: its parser takes each command's help from it and refuses a command not named in
it. The sandboxes sit below the harness and never import it, so their list is theirs (``sandboxes.COMMANDS``, from
which their parser takes its help too) and :data:`SANDBOXES` is that list. ``tests/test_cli.py`` checks both against
the packages' own parsers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from sandboxes import COMMANDS

#: ``python -m trainers``'s commands and what each does
TRAINERS = {
    "launch": "turn a recipe into the OpenRLHF command and run it (or print it)",
    "train-cleaner": "GPU recipe where CUDA + OpenRLHF are present, else the CPU trainer",
    "prepare-data": "write Open-AgentRL-30K as OpenRLHF prompt JSONL",
    "plot": "draw metrics.jsonl as a PNG next to it",
    "warmup": "cold-start tool-use SFT of the embedded model (builds embedded/smollm2-tools-sft)",
    "warmup-measure": "the warm model on held-out problems and fixtures",
    "warmup-iterate": "expert-iteration rounds from the warm model on vLLM",
    "ablation": "train with SAAR on and off from the same warm start; write a report",
    "parity": "one replay script through the eval, the OpenRLHF executor and the CPU trainer: where they differ",
}
#: ``python -m sandboxes``'s commands and what each does, as the sandboxes package lists them
SANDBOXES = COMMANDS
#: the packages the front door forwards to, with their commands
PACKAGES = {"trainers": TRAINERS, "sandboxes": SANDBOXES}
#: what each package's tools are, in ``python -m harness --help``
WHAT = {"trainers": "training tools", "sandboxes": "sandbox tools"}


def help_text(package: str) -> str:
    """The forwarding subcommand's line in ``python -m harness --help``."""
    return f"{WHAT[package]}: python -m {package} CMD ..."


def epilog() -> str:
    """The forwarded commands, listed under ``python -m harness --help``'s subcommands."""
    width = max(len(name) for commands in PACKAGES.values() for name in commands) + 2
    lines = []
    for package, commands in PACKAGES.items():
        lines += ["", f"{WHAT[package]} (python -m harness {package} CMD ... runs python -m {package} CMD ...):"]
        lines += [f"  {name.ljust(width)}{text}" for name, text in commands.items()]
    return "\n".join(lines).lstrip("\n")


def forward(package: str, argv: Sequence[str]) -> int:
    """``python -m <package> <argv>`` with this interpreter: in place of this process on POSIX (so signals reach
    the command as if it had been started directly, and its exit status is this process's), elsewhere as a child
    whose exit status is returned."""
    if package not in PACKAGES:
        raise ValueError(f"no package {package!r} to forward to: {', '.join(PACKAGES)}")
    command = [sys.executable, "-m", package, *argv]
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        os.execv(sys.executable, command)
    return subprocess.call(command)
