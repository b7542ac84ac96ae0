"""Cold-start SFT: teach SmolLM2-135M to call the python tool, on CPU (``python -m trainers warmup``).

Agentic RL starts from a model that already uses its tool (DemyAgent, CLEANER). The raw
135M model writes prose and never calls the tool, so SAAR never acts on it. This module
builds the project's first tool-using embedded model, ``embedded/smollm2-tools-sft`` (the start of
the expert-iteration rounds that build the warm model ``embedded/smollm2-tools``):

1. **Demonstrations.** Problems from :mod:`harness.benchmarks.generators` (seeded), each solved in
   the exact protocol of evaluation: the rollout core (:func:`harness.core.rollout.rollout`,
   SAAR off) runs a scripted "model" whose turns are the project's demonstrations, so
   every call is parsed by :mod:`harness.core.protocol`, executed in the real local sandbox
   and answered with the real tool output or traceback, exactly as at evaluation. A share
   (``fail_share``) of demonstrations first makes a call with a planted bug (a missing
   import, a typo, an unclosed parenthesis, a str + int, a wrong function name, broken
   JSON); the real error comes back and the next turn explains it and fixes the call.
2. **Loss mask.** Trajectories are rendered with :func:`harness.core.chat.render` (what the
   embedded provider renders at evaluation) and cut into tokens by
   :func:`trainers.core.tokens.assemble`. The loss covers the assistant turns, except a turn
   whose call failed: the model learns the fix, not the bug.
3. **Training** (:func:`fit`, shared with the expert-iteration rounds of
   :mod:`trainers.warmup.iterate`). LoRA (r 16, every linear layer) on the float32 model with
   bfloat16 autocast (its frozen weights rounded once, not at every call: :func:`frozen_weights_in_bf16`),
   AdamW, seeded data order, one torch thread (on cores shared with other jobs, two threads ran 4-7
   times slower). The rendered system prompt is the same in every example, so its keys and values are
   computed once per micro-batch (with gradients) and shared by its rows. A batch runs as micro-batches
   of ``micro_batch`` rows whose summed token losses are divided by the batch's trained tokens: the
   gradient of the whole batch's mean token loss, in less memory.
4. **Artifact** (:func:`write_adapter`). The adapter in bfloat16 (about 10 MB) and ``warmup.json``
   (the command, settings, data and loss figures, the :func:`host`) in ``harness/data/models/smollm2-tools-sft/``, which
   :func:`harness.engines.models.load_model` merges into the embedded base model, and where the
   expert-iteration rounds (:mod:`trainers.warmup.iterate`) that build ``smollm2-tools`` start.

Rebuild the committed artifact with ``python -m trainers warmup`` (the defaults).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import platform
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.benchmarks.generators import KINDS, GeneratedProblem, Kind, generate
from harness.core import chat, protocol
from harness.core.messages import Generation, Message
from harness.core.problems import rollout_config
from harness.core.rollout import rollout
from harness.engines.models import ADAPTERS_DIR, TOOLS_SFT_NAME
from trainers.core.tokens import assemble

#: Seeds of the training problems; held-out measurement uses seeds from HELD_OUT_SEED on.
TRAIN_SEED = 0
HELD_OUT_SEED = 1000

#: Kind weights of the training mix: the stdin programs are the kind the model is least fluent in.
TRAIN_WEIGHTS: dict[Kind, float] = {"bignum": 1.0, "modular": 1.0, "counting": 1.0, "aime": 1.0, "stdin": 0.6}


@dataclass(frozen=True)
class WarmupConfig:
    """Settings of ``python -m trainers warmup`` (the defaults build the committed artifact)."""

    seed: int = 0
    problems: int = 480  #: demonstrations generated (one per problem)
    fail_share: float = 0.15  #: share of demonstrations that fail first, then fix the call
    steps: int = 60
    batch_size: int = 8
    micro_batch: int = 8  #: rows per forward pass; a batch's gradient is the token-weighted sum of its micro-batches
    learning_rate: float = 1e-3
    warmup_steps: int = 5
    lora_r: int = 16
    lora_alpha: int = 32
    threads: int = 1  #: on shared cores 2 threads ran 4-7x slower than 1 (they spin against other jobs)
    out: str = str(ADAPTERS_DIR / TOOLS_SFT_NAME)

    def __post_init__(self) -> None:
        for name in ("problems", "steps", "batch_size", "micro_batch", "lora_r", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"warmup: --{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.fail_share <= 1.0:
            raise ValueError(f"warmup: --fail-share must be in [0, 1], got {self.fail_share}")


# --------------------------------------------------------------------------- demonstrations


@dataclass(frozen=True)
class Bug:
    """A planted mistake: the failing first attempt and what the fixing turn says about it."""

    name: str
    attempt: str  #: the whole first assistant turn (reasoning and call, possibly malformed)
    explanation: str  #: why it failed, said by the fixing turn


@dataclass
class Demonstration:
    """One rendered trajectory with the indices of its assistant turns that are trained on."""

    problem: GeneratedProblem
    messages: list[Message]
    trained_turns: list[int]  #: 0-based indices among the assistant turns
    bug: str | None = None
    error_kinds: list[str] = field(default_factory=list)


_OPENERS = (
    "I will compute this with Python.",
    "Let me compute it with the python tool.",
    "This is easiest to compute exactly with a short program.",
    "I'll write a small program to get the exact value.",
    "Computing this by hand is error-prone, so I use the tool.",
)
_CODE_OPENERS = (
    "I will write the program and test it on the sample input first.",
    "Let me test a solution on the sample input with the tool.",
    "I'll run my solution on Sample Input 1 before answering.",
)
_ANSWERS = (
    "The program printed {out}.\n\nThe answer is \\boxed{{{out}}}.",
    "The result is {out}, so the answer is \\boxed{{{out}}}.",
    "The tool returned {out}.\n\nFinal answer: \\boxed{{{out}}}",
)
_CODE_ANSWERS = (
    "It prints {out} for the sample, which matches Sample Output 1.\n\n```python\n{code}\n```",
    "The output {out} matches the sample. Final solution:\n\n```python\n{code}\n```",
)


def call_text(reasoning: str, code: str) -> str:
    """An assistant turn as the model writes it: reasoning, then the Hermes call."""
    return f"{reasoning}\n{protocol.serialize_call(code)}"


def sample_harness(problem: GeneratedProblem, stdin: str) -> str:
    """The program a stdin solution is tried with: the sample input fed through ``sys.stdin``."""
    return f"import io, sys\nsys.stdin = io.StringIO({stdin!r})\n{problem.code}"


def reference_program(problem: GeneratedProblem) -> str:
    """The generator's own program as a demonstration calls it (a stdin solution on its first sample input)."""
    return sample_harness(problem, problem.tests[0]["input"]) if problem.is_code else problem.code


#: A function the reference programs use -> the name a small model guesses instead, and the fix's explanation.
_WRONG_FUNCTIONS = {
    "math.comb": ("math.choose", "math has no function choose; the binomial coefficient is math.comb."),
    "sympy.primepi": ("sympy.prime_pi", "sympy has no prime_pi; the prime-counting function is sympy.primepi."),
}


def plant_bug(problem: GeneratedProblem, code: str, reasoning: str, rng: random.Random) -> Bug:
    """A first attempt with a mistake a small model makes, chosen among those that apply to ``code``."""
    options: list[Bug] = []
    for module in ("math", "sympy"):
        if f"import {module}\n" in code:
            options.append(
                Bug(
                    "missing_import",
                    call_text(reasoning, code.replace(f"import {module}\n", "")),
                    f"I forgot to import {module}. I add the import.",
                )
            )
    for right, (wrong, explanation) in _WRONG_FUNCTIONS.items():
        if right in code:
            options.append(Bug("wrong_function", call_text(reasoning, code.replace(right, wrong)), explanation))
    if code.rstrip().endswith(")"):
        options.append(
            Bug("unclosed_paren", call_text(reasoning, code.rstrip()[:-1]), "A closing parenthesis is missing.")
        )
    last = code.rstrip().splitlines()[-1]
    if last.startswith("print(") and not problem.is_code:
        expr = last[len("print(") : -1]
        options.append(
            Bug(
                "str_plus_int",
                call_text(reasoning, code.replace(last, f'print("The answer is " + {expr})')),
                "A string cannot be added to an integer. I print the number alone.",
            )
        )
        options.append(
            Bug(
                "typo",
                call_text(reasoning, code.replace(last, f"pritn({expr})")),
                "I misspelled print.",
            )
        )
    if "input().split()" in code:
        options.append(
            Bug(
                "no_split",
                call_text(reasoning, code.replace("input().split()", "input()", 1)),
                "The numbers are on one line separated by spaces, so the line must be split first.",
            )
        )
    broken = protocol.serialize_call(code).replace("}}\n</tool_call>", "}\n</tool_call>")
    options.append(
        Bug(
            "malformed_json",
            f"{reasoning}\n{broken}",
            "My tool call was not valid JSON: a closing brace was missing. I write the call again.",
        )
    )
    return rng.choice(options)


class ScriptedTurns:
    """The ``generate`` of a demonstration: the project's turns, chosen after seeing each tool result."""

    def __init__(self, problem: GeneratedProblem, code: str, opener: str, bug: Bug | None, rng: random.Random) -> None:
        self.problem, self.code, self.reasoning, self.bug, self.rng = problem, code, opener, bug, rng
        self.turn = 0

    async def __call__(self, context: list[Message], *, seed: int | None = None) -> Generation:
        self.turn += 1
        if self.turn == 1:
            text = self.bug.attempt if self.bug else call_text(self.reasoning, self.code)
            return Generation(text=text, output_tokens=len(text) // 4)
        last = context[-1]
        if last.role != "tool":
            raise AssertionError(f"{self.problem.id}: scripted turn {self.turn} after a {last.role} message")
        if not last.meta.get("ok", False):
            if self.bug is None or self.turn > 2:
                raise DemonstrationError(
                    f"{self.problem.id}: the reference program failed in the sandbox:\n{last.content}"
                )
            error_line = error_summary(last.content)
            text = call_text(f"The call failed: {error_line}\n{self.bug.explanation}", self.code)
            return Generation(text=text, output_tokens=len(text) // 4)
        text = answer_text(self.problem, last.content, self.rng)
        return Generation(text=text, output_tokens=len(text) // 4)


def answer_text(problem: GeneratedProblem, output: str, rng: random.Random) -> str:
    """The closing turn after the reference program printed ``output``: the boxed answer, or the final solution.
    A reference program that printed anything but the problem's answer is a generator defect."""
    out = output.strip()
    if out != problem.answer:
        raise DemonstrationError(f"{problem.id}: the reference program printed {out!r}, not {problem.answer!r}")
    if problem.is_code:
        return rng.choice(_CODE_ANSWERS).format(out=out, code=problem.code)
    return rng.choice(_ANSWERS).format(out=out)


def error_summary(tool_output: str) -> str:
    """The line of a tool error that names it (a traceback's last line; a malformed call's reason)."""
    text = tool_output.strip().removeprefix("Error:").strip()
    if protocol.CALL_OPEN in text:  # the malformed-call message ends with an example call: not quoted
        text = text[: text.index(protocol.CALL_OPEN)].removesuffix("Call the tool as").strip()
    return text.splitlines()[-1] if text else "an error"


class DemonstrationError(RuntimeError):
    """A demonstration did not go as scripted (a generator or sandbox defect, never skipped silently)."""


async def build_demonstrations(
    problems: Sequence[GeneratedProblem], *, fail_share: float, seed: int, sandbox: str = "local"
) -> list[Demonstration]:
    """Run every problem's scripted demonstration through the rollout core and the real sandbox."""
    from sandboxes.backends import get_backend

    rng = random.Random(seed)
    # as the tasks configure it (harness.core.problems): a code task's final ```python block is the answer, not a call
    configs = {code: rollout_config("code" if code else "math", max_turns=4) for code in (False, True)}
    backend = get_backend(sandbox)
    demos: list[Demonstration] = []
    try:
        box = await backend.acquire()
        try:
            for problem in problems:
                turns_rng = random.Random(rng.random())
                fails = turns_rng.random() < fail_share
                opener = turns_rng.choice(_CODE_OPENERS if problem.is_code else _OPENERS)
                code = reference_program(problem)
                bug = plant_bug(problem, code, opener, turns_rng) if fails else None
                script = ScriptedTurns(problem, code, opener, bug, turns_rng)
                prompt = [Message("user", problem.prompt())]
                traj = await rollout(prompt, script, box, configs[problem.is_code], random.Random(0))
                if traj.stop_reason != "answer":
                    raise DemonstrationError(f"{problem.id}: demonstration ended with {traj.stop_reason}")
                if bug is not None and traj.tool_failures != 1:
                    raise DemonstrationError(f"{problem.id}: planted bug {bug.name} did not fail exactly once")
                failed = _failed_turns(traj.messages)
                n_turns = sum(1 for m in traj.messages if m.role == "assistant")
                trained = [i for i in range(n_turns) if i not in failed]
                demos.append(
                    Demonstration(problem, traj.messages, trained, bug.name if bug else None, list(traj.error_kinds))
                )
                await box.reset()
        finally:
            await backend.release(box)
    finally:
        await backend.shutdown()
    return demos


def _failed_turns(messages: Sequence[Message]) -> set[int]:
    """Indices (among assistant turns) of turns whose call failed (the next tool message is not ok)."""
    failed, turn = set(), -1
    for i, m in enumerate(messages):
        if m.role == "assistant":
            turn += 1
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            if nxt is not None and nxt.role == "tool" and not nxt.meta.get("ok", True):
                failed.add(turn)
    return failed


# --------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class Example:
    """A tokenized demonstration: ids and labels (-100 where no loss falls)."""

    ids: list[int]
    labels: list[int]


def tokenize(tokenizer: Any, demo: Demonstration) -> Example:
    """Render ``demo`` as the embedded provider renders prompts and mask all but its trained turns."""
    tokens = assemble(tokenizer, demo.messages, 1, render=chat.render)
    labels = [-100] * len(tokens.ids)
    for turn, (start, end) in enumerate(tokens.action_ranges):
        if turn in demo.trained_turns:
            labels[start:end] = tokens.ids[start:end]
    if len(tokens.action_ranges) != sum(1 for m in demo.messages if m.role == "assistant"):
        raise DemonstrationError(f"{demo.problem.id}: assistant turns and action ranges disagree")
    return Example(tokens.ids, labels)


def _common_prefix(rows: Sequence[Sequence[int]]) -> int:
    first = rows[0]
    n = min(len(r) for r in rows)
    for i in range(n):
        if any(r[i] != first[i] for r in rows):
            return i
    return n


# --------------------------------------------------------------------------- training


def _cache_keyword(decoder: Any) -> str:
    """The KV-cache argument (and output field) of a decoder: ``cache`` in newer transformers, else the old name."""
    import inspect

    return "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"


def trained_tokens(example: Example) -> int:
    """Tokens of ``example`` that carry a loss (a label predicts the token at its position from the one before)."""
    return sum(1 for lbl in example.labels[1:] if lbl != -100)


def _shared_prefix(batch: Sequence[Example]) -> int:
    """Tokens run once for the whole batch: the rows' common prefix, ending before any row's first label
    (so a lone row, whose whole sequence is its "common prefix", keeps every trained token in its suffix)."""
    common = _common_prefix([ex.ids for ex in batch]) - 1  # keep >= 1 token in every suffix
    first_label = min((i for ex in batch for i, lbl in enumerate(ex.labels) if lbl != -100), default=len(batch[0].ids))
    prefix = min(common, first_label - 1)
    if prefix < 1:
        raise DemonstrationError(f"a batch's rows share no prompt before their first trained token ({prefix})")
    return prefix


def _batch_loss(model: Any, batch: Sequence[Example], pad_id: int) -> Any:
    """Summed token loss of a batch; the rows' shared prefix is run once and its keys/values repeated."""
    import torch
    import torch.nn.functional as F

    inner = model.get_base_model().model  # the decoder stack (LoRA layers included)
    head = model.get_base_model().lm_head
    prefix = _shared_prefix(batch)
    # no label inside the prefix: a prompt is never trained on
    if any(lbl != -100 for ex in batch for lbl in ex.labels[: prefix + 1]):
        raise DemonstrationError("a label falls inside the shared prompt prefix")
    key = _cache_keyword(inner)
    pre = torch.tensor([batch[0].ids[:prefix]])
    cache = getattr(inner(input_ids=pre, use_cache=True), key)
    cache.batch_repeat_interleave(len(batch))
    width = max(len(ex.ids) for ex in batch) - prefix
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), prefix + width), dtype=torch.long)
    mask[:, :prefix] = 1
    for row, ex in enumerate(batch):
        n = len(ex.ids) - prefix
        ids[row, :n] = torch.tensor(ex.ids[prefix:])
        labels[row, :n] = torch.tensor(ex.labels[prefix:])
        mask[row, prefix : prefix + n] = 1
    positions = torch.arange(prefix, prefix + width).unsqueeze(0).expand(len(batch), -1)
    hidden = inner(input_ids=ids, attention_mask=mask, position_ids=positions, **{key: cache}).last_hidden_state
    target = labels[:, 1:]
    keep = target != -100
    logits = head(hidden[:, :-1][keep])
    return F.cross_entropy(logits.float(), target[keep], reduction="sum")


def epoch_batches(groups: Sequence[object], lengths: Sequence[int], size: int, rng: random.Random) -> list[list[int]]:
    """One epoch of batches, each drawn from one group (math or code prompts) and of similar lengths.

    Rows of one group share the whole prompt template, so the prefix computed once per
    batch is longer; rows of similar length waste little on padding (on these CPUs the
    padded batch width is most of a step's cost). Batch order is shuffled.
    """
    by_group: dict[object, list[int]] = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    batches = []
    for key in sorted(by_group, key=str):
        members = by_group[key]
        rng.shuffle(members)
        members.sort(key=lambda i: lengths[i])  # stable: equal lengths stay shuffled
        batches += [members[i : i + size] for i in range(0, len(members), size)]
    rng.shuffle(batches)
    return batches


def _lr_at(step: int, cfg: WarmupConfig | FitSettings) -> float:
    """Linear warm-up, then linear decay to a tenth of the peak."""
    if step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.learning_rate * (1.0 - 0.9 * frac)


@dataclass(frozen=True)
class FitSettings:
    """How :func:`fit` trains: steps of ``batch_size`` rows, run ``micro_batch`` rows at a time."""

    steps: int
    batch_size: int
    micro_batch: int
    learning_rate: float
    warmup_steps: int
    seed: int  #: the data order's seed


@dataclass(frozen=True)
class FitResult:
    losses: list[float]  #: mean token loss of each step's batch
    train_s: float
    train_cpu_s: float


def batch_step(model: Any, batch: Sequence[Example], pad_id: int, micro_batch: int, *, bf16: bool = True) -> float:
    """Backpropagate the mean token loss of ``batch`` (run ``micro_batch`` rows at a time); return it.

    Each micro-batch's summed token loss is divided by the trained tokens of the whole batch, so the
    accumulated gradient is the whole batch's, however it is cut (exactly so in float32, ``bf16=False``;
    under bfloat16 autocast up to its rounding, which depends on the padded width).
    """
    import torch

    total = sum(trained_tokens(ex) for ex in batch)
    if total == 0:
        raise DemonstrationError("a batch without a trained token")
    loss = 0.0
    for start in range(0, len(batch), micro_batch):
        # bf16 matmuls (avx512_bf16/AMX), fp32 weights
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            part = _batch_loss(model, batch[start : start + micro_batch], pad_id) / total
        part.backward()
        loss += float(part.detach())
    return loss


@contextlib.contextmanager
def frozen_weights_in_bf16(model: Any) -> Iterator[None]:
    """The frozen weights of ``model``'s LoRA-wrapped linears in bfloat16 while it trains under bfloat16 autocast,
    their float32 values back afterwards (the engine is synced from them).

    Autocast keeps its casts only of weights that require grad, so it rounds every frozen weight to bfloat16 again
    at each call: rounded once here, the products are the same bits and a step is about 5% faster.
    """
    import torch
    from peft.tuners.lora import LoraLayer

    kept = []
    for layer in model.modules():
        if isinstance(layer, LoraLayer) and isinstance(layer.get_base_layer(), torch.nn.Linear):
            weight = layer.get_base_layer().weight
            kept.append((weight, weight.data))
            weight.data = weight.data.to(torch.bfloat16)
    try:
        yield
    finally:
        for weight, data in kept:
            weight.data = data


def fit(
    model: Any,
    examples: Sequence[Example],
    groups: Sequence[object],
    settings: FitSettings,
    pad_id: int,
    *,
    progress: bool = True,
    desc: str = "warmup SFT",
) -> FitResult:
    """Train ``model``'s trainable (LoRA) weights on ``examples`` with AdamW (see the module docstring).

    ``groups`` (one per example: math or code prompt) keep a batch's rows on one prompt template.
    """
    import torch
    from tqdm import tqdm

    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=settings.learning_rate, weight_decay=0.0)
    order_rng = random.Random(settings.seed)
    lengths = [len(e.ids) for e in examples]
    batches: list[list[int]] = []
    losses: list[float] = []
    bar = tqdm(range(settings.steps), desc=desc, disable=not progress, file=sys.stdout)
    train_started, cpu_started = time.monotonic(), time.process_time()
    with frozen_weights_in_bf16(model):
        for step in bar:
            if not batches:
                batches = epoch_batches(groups, lengths, settings.batch_size, order_rng)
            batch = [examples[i] for i in batches.pop()]
            for group in optim.param_groups:
                group["lr"] = _lr_at(step, settings)
            optim.zero_grad()
            losses.append(batch_step(model, batch, pad_id, settings.micro_batch))
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optim.step()
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return FitResult(losses, time.monotonic() - train_started, time.process_time() - cpu_started)


def train(cfg: WarmupConfig, *, progress: bool = True) -> Path:
    """Generate, tokenize, fine-tune and write the adapter; return the artifact directory."""
    import torch
    from peft import LoraConfig, get_peft_model

    from harness.engines.models import load_model

    started = time.monotonic()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    weights = [TRAIN_WEIGHTS[k] for k in KINDS]
    problems = generate(cfg.problems, seed=TRAIN_SEED + cfg.seed, weights=weights, prefix="train")
    demos = asyncio.run(build_demonstrations(problems, fail_share=cfg.fail_share, seed=cfg.seed))
    data_s = time.monotonic() - started
    model, tokenizer = load_model(None, dtype=torch.float32)
    examples = [tokenize(tokenizer, d) for d in demos]
    lengths = [len(e.ids) for e in examples]
    print(
        f"warmup: {len(demos)} demonstrations ({sum(d.bug is not None for d in demos)} with a failed call), "
        f"{sum(lengths)} tokens, {sum(sum(x != -100 for x in e.labels) for e in examples)} trained, "
        f"longest {max(lengths)}; built in {data_s:.0f} s",
        flush=True,
    )
    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0, target_modules="all-linear")
    model = get_peft_model(model, lora)
    settings = FitSettings(cfg.steps, cfg.batch_size, cfg.micro_batch, cfg.learning_rate, cfg.warmup_steps, cfg.seed)
    groups = [d.problem.is_code for d in demos]
    result = fit(model, examples, groups, settings, tokenizer.pad_token_id, progress=progress)
    out = save_adapter(
        model, cfg, demos, result.losses, data_s=data_s, train_s=result.train_s, train_cpu_s=result.train_cpu_s
    )
    total_s = time.monotonic() - started
    print(f"warmup: adapter written to {out} (training {result.train_s:.0f} s, total {total_s:.0f} s)")
    return out


def save_adapter(
    model: Any,
    cfg: WarmupConfig,
    demos: Sequence[Demonstration],
    losses: list[float],
    *,
    data_s: float,
    train_s: float,
    train_cpu_s: float,
) -> Path:
    """Write the LoRA weights in bfloat16 and ``warmup.json`` (what was built, how, and how to rebuild it)."""
    kinds = Counter(d.problem.kind for d in demos)
    data_digest = hashlib.sha256(
        json.dumps([[m.role, m.text] for d in demos for m in d.messages]).encode()
    ).hexdigest()[:16]
    config = asdict(cfg)
    if Path(cfg.out).resolve() == (ADAPTERS_DIR / TOOLS_SFT_NAME).resolve():
        config["out"] = f"harness/data/models/{TOOLS_SFT_NAME}"
    manifest = {
        "rebuild": "python -m trainers warmup" + _non_default_args(cfg),
        "config": config,
        "demonstrations": len(demos),
        "kinds": dict(sorted(kinds.items())),
        "failed_call_demonstrations": dict(sorted(Counter(d.bug for d in demos if d.bug).items())),
        "data_sha256_16": data_digest,
        "loss_first5": round(sum(losses[:5]) / max(1, len(losses[:5])), 4),
        "loss_last5": round(sum(losses[-5:]) / max(1, len(losses[-5:])), 4),
        "data_seconds": round(data_s, 1),
        "train_seconds": round(train_s, 1),
        "train_cpu_seconds": round(train_cpu_s, 1),  #: below train_seconds x threads when the cores were shared
        "losses": [round(x, 4) for x in losses],
        "threads": cfg.threads,
        "load_average_1min_at_end": round(os.getloadavg()[0], 2),
        "host": host(),
    }
    return write_adapter(model, Path(cfg.out), "warmup.json", manifest)


def write_adapter(model: Any, out: Path, manifest_name: str, manifest: dict[str, Any]) -> Path:
    """Write ``model``'s LoRA weights in bfloat16, its adapter config and ``manifest`` as JSON into ``out``.

    The directory is an adapter directory: it works as a model spec (:func:`harness.engines.models.resolve_spec`).
    """
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in get_peft_model_state_dict(model).items()}
    save_file(state, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    peft_config = model.peft_config["default"]
    peft_config.base_model_name_or_path = "embedded/smollm2"
    peft_config.save_pretrained(str(out))
    (out / manifest_name).write_text(json.dumps(manifest, indent=2) + "\n")
    for written in out.iterdir():
        written.chmod(0o644)  # safetensors writes 0600; the artifact is committed and read by every user
    return out


def _non_default_args(cfg: WarmupConfig) -> str:
    default = WarmupConfig()
    parts = []
    for name, value in asdict(cfg).items():
        if value != getattr(default, name):
            parts.append(f"--{name.replace('_', '-')} {value}")
    return (" " + " ".join(parts)) if parts else ""


def package_versions(names: Sequence[str]) -> dict[str, str | None]:
    """The installed version of each package (None where it is not installed): what a build's arithmetic ran on."""
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


#: the CPU features that decide which kernels torch and vLLM run, and so the last bits of their floats
KERNEL_FEATURES = ("avx2", "avx512", "amx", "fma")
#: the libraries whose arithmetic a build's data and adapter come from
COMPUTING_PACKAGES = ("torch", "vllm", "transformers", "peft")


def host(cpuinfo: str | None = None) -> dict[str, Any]:
    """What a build's bytes (the SFT's, a round's) depend on besides the command and the data: the CPU (its model
    and the vector features its kernels are chosen by), a cap on the features oneDNN may use (``ONEDNN_MAX_CPU_ISA``,
    None when unset) and the computing libraries' versions. Two builds of the same command whose data agree and
    whose adapters do not tell here whether they ran on different arithmetic.

    ``cpuinfo`` is ``/proc/cpuinfo``'s text (read when None; where there is none, the CPU is ``unknown``).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}  # the last processor's, which are all alike
    for line in cpuinfo.splitlines():
        key, colon, value = line.partition(":")
        if colon:
            fields[key.strip()] = value.strip()
    flags = fields.get("flags", "").split()
    return {
        "machine": platform.machine(),
        "cpu": fields.get("model name", "unknown"),
        "cpu_features": sorted(f for f in flags if f.startswith(KERNEL_FEATURES)),
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
        "packages": package_versions(COMPUTING_PACKAGES),
    }


def add_arguments(parser: Any) -> None:
    """The ``warmup`` sub-command's options (one per :class:`WarmupConfig` field)."""
    default = WarmupConfig()
    helps = {
        "seed": "seed of the problems, the demonstrations, LoRA's init and the data order",
        "problems": "demonstrations to generate (one per problem)",
        "fail_share": "share of demonstrations whose first call fails and is then fixed",
        "steps": "optimizer steps",
        "batch_size": "demonstrations per step",
        "micro_batch": "rows per forward pass (the gradient stays the whole batch's; fewer rows, less memory)",
        "learning_rate": "peak learning rate (linear warm-up, then linear decay to a tenth)",
        "warmup_steps": "steps of learning-rate warm-up",
        "lora_r": "LoRA rank (every linear layer)",
        "lora_alpha": "LoRA alpha",
        "threads": "torch threads",
        "out": "artifact directory (default: the one embedded/smollm2-tools-sft loads)",
    }
    for name, value in asdict(default).items():
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=type(value), default=value, help=f"{helps[name]} (default {value})"
        )


def config_from_args(args: Any) -> WarmupConfig:
    return WarmupConfig(**{name: getattr(args, name) for name in asdict(WarmupConfig())})
