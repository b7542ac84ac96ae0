"""``python -m harness``: the project's commands, evaluation, training and sandboxes alike.

python -m harness compare --tasks aime24 gpqa --model sglang/Qwen/Qwen3-4B-Instruct-2507 -M tool_call_parser=qwen25 \\
    --epochs 16
python -m harness compare --from-logs /cluster/logs/run7 --run run7
python -m harness regression                       # every results/baselines/*.yaml
python -m harness demo                             # the warm model on vLLM (or in process), SAAR on vs off
python -m harness serve smollm2-tools --port 8000   # the model behind vLLM's OpenAI server, on loopback
python -m harness protocol --preset cleaner-paper --kind gpqa   # the whole resolved protocol (the card)
python -m harness prompts from-reference ~/Open-CLEANER --out ~/reference-prompts.yaml   # the paper's prompts
python -m harness generate                         # the docs' tables and the task functions, from the code
python -m harness trainers warmup                  # = python -m trainers warmup
python -m harness sandboxes run prog.py            # = python -m sandboxes run prog.py

Each evaluation subcommand is one module (its options and its run): :mod:`harness.cli`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from harness.cli import compare, demo, forward, generate, prompts, regression
from harness.engines import serve
from harness.reports import card
from harness.reports.compare import CompareError

#: subcommand -> (its options, its run, its help)
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int], str]] = {
    "compare": (compare.add_arguments, compare.run, compare.HELP),
    "regression": (regression.add_arguments, regression.run, regression.HELP),
    "demo": (demo.add_arguments, demo.run, demo.HELP),
    "serve": (serve.add_arguments, serve.run, "serve a local model behind vLLM's OpenAI server on 127.0.0.1"),
    "protocol": (card.add_arguments, card.main, "print the whole resolved protocol of a preset (the card)"),
    "prompts": (prompts.add_arguments, prompts.run, prompts.HELP),
    "generate": (generate.add_arguments, generate.run, generate.HELP),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness",
        description=__doc__.splitlines()[0],
        epilog=forward.epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (add_arguments, _, help_text) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text))
    for package in forward.PACKAGES:  # their arguments are the forwarded command's
        sub.add_parser(package, help=forward.help_text(package), add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] and argv[0] in forward.PACKAGES:
        return forward.forward(argv[0], argv[1:])
    args = _parser().parse_args(argv)
    _, run, _ = COMMANDS[args.command]
    try:
        return run(args)
    except (CompareError, ValueError) as exc:
        print(f"{args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
