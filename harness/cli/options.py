"""Options and names shared by the evaluation subcommands."""

from __future__ import annotations

import argparse
from datetime import datetime


def run_name() -> str:
    """A new run's default name: the local time, ``YYYYmmdd-HHMMSS``."""
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def add_share_prefix(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-share-prefix",
        dest="share_prefix",
        action="store_false",
        help="generate every request in both arms (default: the requests the arms have in common, before SAAR "
        "first acts, are generated once and shared)",
    )
