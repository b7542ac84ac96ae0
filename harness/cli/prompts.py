"""``python -m harness prompts``: prompt template files.

``python -m harness prompts from-reference CHECKOUT --out FILE`` writes the reference's evaluation prompts
(Open-CLEANER's, read from its ``recipe/cleaner/reward.py`` at the pinned commit without running it:
:mod:`harness.benchmarks.reference_prompts`) as a template file for ``-T prompt_template=FILE`` and
``python -m trainers prepare-data --prompt-template FILE``; with ``--training`` its training prompts, for
``prepare-data``.
"""

from __future__ import annotations

import argparse
import sys

HELP = "write prompt template files (the reference's prompts: from-reference)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from harness.benchmarks.reference_prompts import OPEN_AGENTRL_FIRST_SOURCE

    actions = p.add_subparsers(dest="action", required=True)
    ref = actions.add_parser(
        "from-reference",
        help="write Open-CLEANER's prompts, read from a checkout of its pinned commit, as a template file",
    )
    ref.add_argument(
        "checkout", help="a checkout of Open-CLEANER at the pinned commit (git or plain), or its reward.py"
    )
    ref.add_argument("--out", required=True, help="the template file to write (YAML); keep it out of the repository")
    ref.add_argument(
        "--training",
        nargs="?",
        const=OPEN_AGENTRL_FIRST_SOURCE,
        metavar="FIRST_DATA_SOURCE",
        help="write the training prompts instead (for prepare-data): those the reference gives a training file "
        "whose first row has this data_source; it chooses one prompt method per file by its first row "
        f"(default: {OPEN_AGENTRL_FIRST_SOURCE}, the first row of Open-AgentRL-30K.parquet)",
    )


def run(args: argparse.Namespace) -> int:
    from harness.benchmarks.reference_prompts import write_templates

    templates = write_templates(args.checkout, args.out, training=args.training)
    kinds = ", ".join(templates.templates)
    print(f"wrote {templates.source} (kinds: {kinds}; sha256 {templates.sha256})", file=sys.stdout)
    if args.training is None:
        print(f"use it with: -T prompt_template={templates.source}", file=sys.stdout)
    else:
        print(f"use it with: python -m trainers prepare-data --prompt-template {templates.source}", file=sys.stdout)
    return 0
