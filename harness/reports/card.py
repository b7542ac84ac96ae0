"""The protocol card: the whole resolved protocol of an evaluation, and what differs from the project's default.

``python -m harness protocol --preset cleaner-paper --kind math`` prints it; every eval log carries it in
its task metadata (``card``), and the ablation report shows the card of its logs. It holds the sampling
and the limits, SAAR's settings, the tool environment (its whole profile), the judge, how the response
budget counts, the prompt templates' file and hash, and the dtype the reference's engine served a
preset's model in (:data:`ENGINE_DTYPES`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from harness.benchmarks.presets import PRESETS, EvalProtocol, resolve
from harness.core.kinds import KINDS, Kind
from harness.core.prompts import PromptTemplates, load_prompt_templates

#: The dtype the reference's evaluation served each preset's model in, by problem kind: an engine setting, not a
#: task's, so the card says it and the engine is told (``-M dtype=...``). Open-CLEANER 91e40ad,
#: ``recipe/cleaner/eval/eval_qwen3_4b_{aime_gpqa,livecodebench}.sh`` line 147 and
#: ``eval_qwen2_7b_livecodebench.sh`` line 144 (``actor_rollout_ref.rollout.dtype=float16``);
#: ``eval_qwen2_7b_aime_gpqa.sh`` sets none: verl's default, ``bfloat16``
#: (``verl/verl/trainer/config/rollout/rollout.yaml``).
ENGINE_DTYPES: dict[str, dict[Kind, str]] = {
    "cleaner-paper": {"math": "float16", "gpqa": "float16", "code": "float16"},
    "cleaner-paper-7b": {"math": "bfloat16", "gpqa": "bfloat16", "code": "float16"},
}


def engine_dtype(preset: str | None, kind: Kind) -> str | None:
    """The dtype the reference served a preset's model in for problems of ``kind`` (None: no preset's)."""
    return ENGINE_DTYPES.get(preset or "", {}).get(kind)


def protocol_card(preset: str | None, kind: Kind, protocol: EvalProtocol, templates: PromptTemplates) -> dict[str, Any]:
    """The card of one task's resolved protocol: every setting, and those that differ from the default protocol."""
    settings = protocol.to_dict()
    default = resolve(None, kind).to_dict()
    env = protocol.env.to_dict()
    default_env = resolve(None, kind).env.to_dict()
    return {
        "preset": preset,
        "kind": kind,
        "protocol": settings,
        "tool_env": env,
        "budget": f"{protocol.max_total_tokens} tokens, counting {_budget_counts(protocol)}"
        if protocol.max_total_tokens
        else "none",
        "prompt_template": {"source": templates.source, "sha256": templates.sha256},
        "engine_dtype": engine_dtype(preset, kind),
        "differs_from_default": {
            **{k: [default[k], v] for k, v in settings.items() if default[k] != v},
            **{f"tool_env.{k}": [default_env[k], v] for k, v in env.items() if default_env[k] != v},
        },
    }


def _budget_counts(protocol: EvalProtocol) -> str:
    if protocol.env.counts_response:
        return "every response token (generated and tool output); each generation takes what is left"
    return "generated tokens kept, checked after each tool result"


def render_card(card: dict[str, Any]) -> str:
    """The card as text, for a terminal or a report."""
    lines = [f"preset {card['preset'] or '(none)'}, problem kind {card['kind']}", ""]
    lines += [f"  {k} = {v!r}" for k, v in card["protocol"].items()]
    lines += ["", f"tool environment {card['tool_env']['name']}:"]
    lines += [f"  {k} = {v!r}" for k, v in card["tool_env"].items() if k != "name"]
    lines += ["", f"budget: {card['budget']}"]
    if card.get("engine_dtype"):
        dtype = card["engine_dtype"]
        lines.append(f"engine dtype: {dtype}, as the reference served it (give the engine -M dtype={dtype})")
    template = card["prompt_template"]
    lines += [f"prompt templates: {template['source']} (sha256 {template['sha256'][:16]})", ""]
    differs = card["differs_from_default"]
    if differs:
        lines.append("differs from the project's default protocol:")
        lines += [f"  {k}: {json.dumps(a)} -> {json.dumps(b)}" for k, (a, b) in differs.items()]
    else:
        lines.append("the project's default protocol")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None, help="a named protocol (default: none)")
    parser.add_argument("--kind", choices=KINDS, default="math", help="the problem kind (default: math)")
    parser.add_argument("--prompt-template", default=None, help="a prompt template file (default: the project's)")
    parser.add_argument("--json", action="store_true", help="print the card as JSON")
    parser.add_argument(
        "-T",
        dest="task_args",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a protocol setting, as a task takes it (e.g. -T tool_env=project)",
    )


def main(args: argparse.Namespace) -> int:
    given: dict[str, Any] = {}
    for item in args.task_args:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"-T {item!r}: expected NAME=VALUE")
        given[name] = _value(value)
    protocol = resolve(args.preset, args.kind, **given)
    card = protocol_card(args.preset, args.kind, protocol, load_prompt_templates(args.prompt_template))
    print(json.dumps(card, indent=2) if args.json else render_card(card))
    return 0


def _value(text: str) -> Any:
    """A -T value as Inspect reads one (YAML scalars: numbers, booleans, strings)."""
    import yaml

    return yaml.safe_load(text)
