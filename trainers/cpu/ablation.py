"""SAAR in training, measured: the CPU trainer with SAAR on and off from the same warm start.

``python -m trainers ablation --recipe cpu-ablation --seeds 0 1 --steps 8 --run NAME``
trains, for every seed, one run with SAAR off and one with SAAR on. The two runs of a
seed share everything else: the warm model, the recipe, the data order, the LoRA
initialisation and the sampling seeds of every rollout (common random numbers: the
first turn of row r at step s is sampled with the same seed in both arms, so the arms
differ by what SAAR does and by what training on it changes). Before training (once
per seed) and after each run, the policy is evaluated on held-out problems with SAAR
off, so the arms are compared on what the policy does alone.

The command writes ``results/train/<run>/``: ``runs/saar-{off,on}-seed<k>/`` (each run's
``metrics.jsonl``, plot, settings and ``eval.json``), ``ablation.png`` (tool-failure
rate and accuracy per step, both arms), ``summary.json`` and ``report.md``. Runs already
finished are kept, so re-running the command continues an interrupted ablation;
``--report-only`` redraws the report from what is there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from harness.reports.intervals import mean_interval, wilson
from trainers.core.data import generated_items
from trainers.core.plot import read_metrics
from trainers.core.recipes import Recipe, load_recipe

ARMS = ("off", "on")
HELD_OUT_SEED = 3000  #: seed of the held-out problems (the RL set uses 2000, the warm SFT 0 and 1000)
#: per-step metrics the report compares (key, what it is)
COMPARED = (
    ("first_call_failure_rate", "tool-failure rate of the policy's first attempts (SAAR regenerations excluded)"),
    ("tool_failure_rate_pooled", "tool-failure rate over every executed call"),
    ("accuracy", "accuracy of the step's rollouts"),
    ("reward", "mean reward"),
    ("loss", "GRPO loss"),
    ("frac_reward_zero_std", "fraction of groups whose rewards are all equal"),
)


@dataclass(frozen=True)
class AblationConfig:
    """Options of ``python -m trainers ablation`` (each field is a command-line option)."""

    recipe: str = field(default="cpu-ablation", metadata={"help": "recipe both arms train with (name or file)"})
    seeds: tuple[int, ...] = field(default=(0, 1), metadata={"help": "seeds; each trains one run per arm"})
    steps: int = field(default=8, metadata={"help": "GRPO steps per run", "min": 1})
    run: str = field(default="saar-ablation", metadata={"help": "name of the output directory under --out"})
    out: str = field(default="results/train", metadata={"help": "where the run directory is written"})
    eval_problems: int = field(
        default=16, metadata={"help": "held-out problems evaluated with SAAR off before and after (0: none)", "min": 0}
    )
    jobs: int = field(
        default=1, metadata={"help": "runs trained at once, in child processes (1 thread each)", "min": 1}
    )
    engine: str = field(default="", metadata={"help": "what generates both arms' rollouts: hf or vllm (the recipe's)"})
    only: str = field(default="", metadata={"help": "train just this run, ARM:SEED (what --jobs children do)"})
    report_only: bool = field(default=False, metadata={"help": "only redraw the report from finished runs"})

    def __post_init__(self) -> None:
        if not self.seeds or any(not isinstance(s, int) or s < 0 for s in self.seeds):
            raise ValueError(f"ablation.seeds must be non-negative integers, got {self.seeds!r}")
        object.__setattr__(self, "seeds", tuple(self.seeds))
        if self.only and (self.only.partition(":")[0] not in ARMS or not self.only.partition(":")[2].isdigit()):
            raise ValueError(f"ablation.only must be ARM:SEED with ARM in {ARMS}, got {self.only!r}")
        for f in fields(self):
            if f.metadata.get("min") is not None and getattr(self, f.name) < f.metadata["min"]:
                raise ValueError(f"ablation.{f.name} must be >= {f.metadata['min']}, got {getattr(self, f.name)!r}")

    @property
    def run_dir(self) -> Path:
        return Path(self.out) / self.run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One option per :class:`AblationConfig` field, with its help text and default."""
    for f in fields(AblationConfig):
        flag = f"--{f.name.replace('_', '-')}"
        text = f"{f.metadata['help']} (default: {f.default})"
        if f.name == "report_only":
            parser.add_argument(flag, action="store_true", help=f.metadata["help"])
        elif f.name == "seeds":
            parser.add_argument(flag, type=int, nargs="+", default=list(f.default), help=text)
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default, help=text)


def config_from_args(args: argparse.Namespace) -> AblationConfig:
    return AblationConfig(**{f.name: getattr(args, f.name) for f in fields(AblationConfig)})


def arm_recipe(recipe: Recipe, arm: str, seed: int, steps: int, engine: str = "") -> Recipe:
    """The recipe of one run: SAAR on or off, the seed and step count set (and the engine, when given), no
    checkpoints."""
    saar = {**recipe.executor.saar, "enabled": arm == "on"}
    cpu = {**recipe.cpu, "seed": seed, "steps": steps, "save_steps": 0, **({"engine": engine} if engine else {})}
    return replace(recipe, name=f"saar-{arm}-seed{seed}", executor=replace(recipe.executor, saar=saar), cpu=cpu)


def run_name(arm: str, seed: int) -> str:
    return f"saar-{arm}-seed{seed}"


def run_ablation(cfg: AblationConfig, *, progress: bool = True) -> Path:
    """Train every (seed, arm) run not finished yet, then write the report; return the report's path.

    With ``jobs`` > 1 the runs go to that many child processes (``--only ARM:SEED``), each
    logging to its run directory's ``log.txt``.
    """
    recipe = load_recipe(cfg.recipe)
    started = time.time()
    pending = [] if cfg.report_only else [(arm, seed) for seed in cfg.seeds for arm in ARMS]
    if cfg.only:
        arm, _, seed = cfg.only.partition(":")
        pending = [(arm, int(seed))]
    kept = [(a, s) for a, s in pending if _finished(cfg, a, s)]
    pending = [(a, s) for a, s in pending if (a, s) not in kept]
    # runs kept from an earlier invocation: the wall time goes on from what that invocation's report recorded
    earlier_s = (_recorded_elapsed(cfg) or 0.0) if kept else 0.0
    if pending:
        _refuse_another_model(cfg, model_fingerprint(recipe.model))
    if cfg.jobs > 1 and len(pending) > 1:
        _run_children(cfg, pending, progress)
    else:
        for arm, seed in pending:
            train_arm(cfg, recipe, arm, seed, progress)
    if cfg.only:
        return cfg.run_dir / "runs" / run_name(*pending[0]) if pending else cfg.run_dir
    return write_report(cfg, recipe, None if cfg.report_only else time.time() - started + earlier_s)


def _recorded_elapsed(cfg: AblationConfig) -> float | None:
    """The wall time the run directory's last report recorded (None: no report yet, or none recorded)."""
    previous = cfg.run_dir / "summary.json"
    return json.loads(previous.read_text()).get("elapsed_s") if previous.is_file() else None


def _finished(cfg: AblationConfig, arm: str, seed: int) -> bool:
    run_dir = cfg.run_dir / "runs" / run_name(arm, seed)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file() or len(read_metrics(metrics)) < cfg.steps:
        return False
    return not cfg.eval_problems or (run_dir / "eval.json").is_file()


def _refuse_another_model(cfg: AblationConfig, model_id: str) -> None:
    """An ablation continues only from the model its finished runs started from (the arms must share it)."""
    for path in sorted((cfg.run_dir / "runs").glob("*/eval.json")):
        started_from = json.loads(path.read_text()).get("model")
        if started_from not in (None, model_id):
            raise ValueError(
                f"{path} was trained from {started_from}, and the recipe's model is now {model_id}: "
                f"continue it with that model, or start another run (--run)"
            )


def train_arm(cfg: AblationConfig, recipe: Recipe, arm: str, seed: int, progress: bool = True) -> None:
    """One run, with the held-out evaluation of its result and (in the off arm) of its warm start."""
    from trainers.cpu.trainer import CpuTrainer  # noqa: PLC0415 - loads transformers

    runs = cfg.run_dir / "runs"
    run_dir = runs / run_name(arm, seed)
    if run_dir.exists():  # an interrupted run starts again (ablation runs keep no checkpoints)
        for f in run_dir.glob("*.*"):
            if f.name != "log.txt":
                f.unlink()
    if progress:
        print(f"== seed {seed}, SAAR {arm} ({cfg.steps} steps) -> {run_dir}", flush=True)
    held_out = generated_items(cfg.eval_problems, seed=HELD_OUT_SEED, prefix="heldout") if cfg.eval_problems else []
    model_id = model_fingerprint(recipe.model)
    with CpuTrainer(arm_recipe(recipe, arm, seed, cfg.steps, cfg.engine), run_dir=run_dir, progress=progress) as run:
        warm_path = runs / f"warm-eval-seed{seed}.json"
        if held_out and arm == "off" and not warm_path.is_file():
            warm_path.write_text(json.dumps(run.evaluate(held_out, saar=False, seed=seed), indent=2))
        started = time.time()
        run.train()
        train_s = time.time() - started
        after = run.evaluate(held_out, saar=False, seed=seed) if held_out else {}
    (run_dir / "eval.json").write_text(json.dumps({**after, "train_s": train_s, "model": model_id}, indent=2))


def model_fingerprint(spec: str | None) -> str:
    """The model spec and, for a file or adapter directory, the sha256 of its weights (first 16 hex digits).

    Recorded per run, so a report shows that every run started from the same warm model.
    """
    from harness.engines.models import resolve_spec  # noqa: PLC0415

    kind, path = resolve_spec(spec)
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes())
    return f"{spec or 'smollm2'} ({kind}, sha256 {digest.hexdigest()[:16]})"


def _run_children(cfg: AblationConfig, pending: list[tuple[str, int]], progress: bool) -> None:
    """Run ``pending`` in at most ``cfg.jobs`` child processes; raise if one fails."""
    waiting, running, failed = list(pending), [], []
    base = [sys.executable, "-m", "trainers.cpu.ablation", "--recipe", cfg.recipe, "--steps", str(cfg.steps)]
    base += ["--run", cfg.run, "--out", cfg.out, "--eval-problems", str(cfg.eval_problems), "--engine", cfg.engine]
    base += ["--seeds", *map(str, cfg.seeds)]
    while waiting or running:
        while waiting and len(running) < cfg.jobs:
            arm, seed = waiting.pop(0)
            run_dir = cfg.run_dir / "runs" / run_name(arm, seed)
            run_dir.mkdir(parents=True, exist_ok=True)
            log = (run_dir / "log.txt").open("w")
            child = subprocess.Popen([*base, "--only", f"{arm}:{seed}"], stdout=log, stderr=subprocess.STDOUT)
            running.append((arm, seed, child, log))
            if progress:
                print(f"== started seed {seed}, SAAR {arm} (pid {child.pid}, log {run_dir / 'log.txt'})", flush=True)
        time.sleep(2)
        for entry in list(running):
            arm, seed, child, log = entry
            if child.poll() is not None:
                running.remove(entry)
                log.close()
                if child.returncode:
                    failed.append(f"{run_name(arm, seed)} (exit {child.returncode})")
                if progress:
                    print(f"== finished seed {seed}, SAAR {arm}: exit {child.returncode}", flush=True)
    if failed:
        raise RuntimeError(f"ablation runs failed: {', '.join(failed)}; see their log.txt")


# --------------------------------------------------------------------------- the report


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def _collect(cfg: AblationConfig) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """arm -> seed -> per-step metrics rows, for the runs that exist."""
    out: dict[str, dict[int, list[dict[str, Any]]]] = {arm: {} for arm in ARMS}
    for arm in ARMS:
        for seed in cfg.seeds:
            path = cfg.run_dir / "runs" / run_name(arm, seed) / "metrics.jsonl"
            if path.is_file():
                out[arm][seed] = read_metrics(path)
    return out


def _eval(cfg: AblationConfig, arm: str | None, seed: int) -> dict[str, Any] | None:
    runs = cfg.run_dir / "runs"
    path = runs / f"warm-eval-seed{seed}.json" if arm is None else runs / run_name(arm, seed) / "eval.json"
    return json.loads(path.read_text()) if path.is_file() else None


def summarize(cfg: AblationConfig) -> dict[str, Any]:
    """The numbers of the report: per-arm means by step range, paired per-seed differences, held-out evals."""
    data = _collect(cfg)
    paired = [s for s in cfg.seeds if s in data["off"] and s in data["on"]]
    summary: dict[str, Any] = {"seeds_complete": paired, "steps": cfg.steps, "arms": {}, "paired": {}, "eval": {}}
    half = max(cfg.steps // 2, 1)
    for arm in ARMS:
        rows = [r for s in paired for r in data[arm][s]]
        early = [r for r in rows if r["step"] <= half]
        late = [r for r in rows if r["step"] > half]
        summary["arms"][arm] = {
            key: {
                "all": _mean([r.get(key, 0.0) for r in rows]),
                "first_half": _mean([r.get(key, 0.0) for r in early]),
                "second_half": _mean([r.get(key, 0.0) for r in late]),
            }
            for key, _ in COMPARED
        }
        for key in ("saar_shallow", "saar_deep", "saar_exhausted", "saar_purified", "tool_calls", "tool_failures"):
            summary["arms"][arm][key] = sum(r.get(key, 0.0) for r in rows)
        summary["arms"][arm]["step_s"] = _mean([r.get("step_s", 0.0) for r in rows])
    for key, _ in COMPARED:
        diffs = []
        for s in paired:
            on = _mean([r.get(key, 0.0) for r in data["on"][s] if r["step"] > half])
            off = _mean([r.get(key, 0.0) for r in data["off"][s] if r["step"] > half])
            diffs.append(on - off)
        summary["paired"][key] = {"on_minus_off_second_half": diffs, "mean": _mean(diffs)}
    for s in cfg.seeds:
        summary["eval"][s] = {"warm": _eval(cfg, None, s), **{arm: _eval(cfg, arm, s) for arm in ARMS}}
    summary["intervals"] = _intervals(cfg, data, summary)
    summary["held_out_pooled"] = _held_out_pooled(cfg, summary)
    return summary


#: what the intervals are computed for: (key, what) of the held-out evaluations and of the training steps
HELD_OUT = (("accuracy", "held-out accuracy"), ("first_call_failure_rate", "held-out first-attempt tool-failure rate"))
PER_STEP = (
    ("first_call_failure_rate", "first-attempt tool-failure rate of the steps"),
    ("accuracy", "accuracy of the steps"),
)


def _intervals(
    cfg: AblationConfig, data: dict[str, dict[int, list[dict[str, Any]]]], summary: dict[str, Any]
) -> list[dict[str, Any]]:
    """Each change the ablation asks about, per seed and as a mean with its 95% t interval over seeds: what
    training did in each arm (held out: after minus the warm start; per step: second half minus first half), and
    SAAR on minus off."""
    rows: list[dict[str, Any]] = []

    def add(what: str, comparison: str, values: list[float]) -> None:
        if not values:  # not measured (no held-out evaluation, or no seed finished both arms)
            return
        iv = mean_interval(values)
        rows.append(
            {
                "what": what,
                "comparison": comparison,
                "per_seed": values,
                "mean": _mean(values),
                "interval": None if iv is None else [iv.low, iv.high],
                "beyond_seed_spread": None if iv is None else iv.excludes_zero,
            }
        )

    for key, what in HELD_OUT:
        held = {p: [_held(summary, s, p, key) for s in cfg.seeds] for p in ("warm", *ARMS)}
        for a, b, comparison in (
            ("off", "warm", "after SAAR off - warm start"),
            ("on", "warm", "after SAAR on - warm start"),
            ("on", "off", "after SAAR on - after SAAR off"),
        ):
            add(
                what,
                comparison,
                [x - y for x, y in zip(held[a], held[b], strict=True) if x is not None and y is not None],
            )
    half = max(cfg.steps // 2, 1)
    for key, what in PER_STEP:
        for arm in ARMS:
            values = []
            for s in summary["seeds_complete"]:
                early = [r.get(key, 0.0) for r in data[arm][s] if r["step"] <= half]
                late = [r.get(key, 0.0) for r in data[arm][s] if r["step"] > half]
                if early and late:
                    values.append(_mean(late) - _mean(early))
            add(what, f"SAAR {arm}: second half - first half", values)
        add(what, "SAAR on - off, second half", summary["paired"][key]["on_minus_off_second_half"])
    return rows


def _held(summary: dict[str, Any], seed: int, policy: str, key: str) -> float | None:
    """One held-out evaluation's ``key`` (``policy``: warm, off or on), or ``None`` where it was not run."""
    ev = summary["eval"][seed].get(policy)
    return None if not ev or ev.get(key) is None else float(ev[key])


def _held_out_pooled(cfg: AblationConfig, summary: dict[str, Any]) -> dict[str, Any]:
    """Held-out accuracy of each policy pooled over the seeds (problems x seeds samples), with its Wilson interval."""
    out = {}
    for policy in ("warm", *ARMS):
        accs = [a for s in cfg.seeds if (a := _held(summary, s, policy, "accuracy")) is not None]
        if accs and cfg.eval_problems:
            n = cfg.eval_problems * len(accs)
            k = sum(round(a * cfg.eval_problems) for a in accs)
            iv = wilson(k, n)
            out[policy] = {"right": k, "samples": n, "accuracy": iv.value, "interval": [iv.low, iv.high]}
    return out


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "nan" if x != x else f"{x:.3f}"
    return str(x)


def reading(summary: dict[str, Any]) -> list[str]:
    """Plain sentences on the paired differences: their mean, and in how many seeds they agree in sign."""
    out = []
    for key, what in COMPARED[:3]:
        diffs = summary["paired"][key]["on_minus_off_second_half"]
        if not diffs:
            continue
        lower = sum(1 for d in diffs if d < 0)
        higher = sum(1 for d in diffs if d > 0)
        out.append(
            f"- {what}, second half: SAAR on minus off = {_fmt(summary['paired'][key]['mean'])} on average; "
            f"lower with SAAR in {lower} of {len(diffs)} seeds, higher in {higher}."
        )
    moved = [r for r in summary.get("intervals", []) if r["beyond_seed_spread"]]
    if moved:
        out += [
            "- Beyond the seed-to-seed spread (95% interval over seeds excludes 0): "
            + "; ".join(f"{r['what']}, {r['comparison']}: {r['mean']:+.3f}" for r in moved)
            + "."
        ]
    else:
        out.append("- No change moved beyond the seed-to-seed spread (every 95% interval over seeds holds 0).")
    return out


def write_report(cfg: AblationConfig, recipe: Recipe, elapsed_s: float | None) -> Path:
    """``report.md``, ``summary.json`` and ``ablation.png`` in the run directory (a redrawn report keeps the wall
    time its runs measured)."""
    from trainers.core.plot import plot_ablation  # noqa: PLC0415

    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    if elapsed_s is None:
        elapsed_s = _recorded_elapsed(cfg)
    data = _collect(cfg)
    summary = summarize(cfg)
    summary["config"] = asdict(cfg)
    summary["recipe"] = {"path": recipe.shown_path, "model": recipe.model, "cpu": recipe.cpu, "data": recipe.data}
    summary["recipe"]["saar"] = recipe.executor.saar
    models = sorted({str(ev.get("model")) for s in cfg.seeds for arm in ARMS if (ev := _eval(cfg, arm, s))})
    if elapsed_s is not None:
        summary["elapsed_s"] = elapsed_s
    (cfg.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    plot = plot_ablation(data, cfg.run_dir / "ablation.png")
    seeds = " ".join(str(s) for s in cfg.seeds)
    command = f"python -m trainers ablation --recipe {cfg.recipe} --seeds {seeds} --steps {cfg.steps} --run {cfg.run}"
    if cfg.eval_problems != 16:
        command += f" --eval-problems {cfg.eval_problems}"
    if cfg.jobs > 1:
        command += f" --jobs {cfg.jobs}"
    lines = [
        f"# SAAR in training: on vs off ({cfg.run})",
        "",
        f"Command: `{command}`",
        "",
        f"Model `{recipe.model or 'smollm2'}` (warm start, the same in both arms), recipe `{recipe.shown_path}`, "
        f"seeds {seeds}, {cfg.steps} steps per run; seeds with both arms finished: {summary['seeds_complete']}. "
        f"Per step: {recipe.cpu.get('prompts_per_step')} problems x {recipe.cpu.get('num_generations')} rollouts, "
        f"at most {recipe.cpu.get('max_new_tokens')} tokens per turn, {recipe.executor.max_turns} turns; "
        f"SAAR settings of the on arm: `{json.dumps({**recipe.executor.saar, 'enabled': True})}`. "
        f"Weights every run started from: {', '.join(models) or 'not recorded'}. "
        f"Machine: {platform.machine()}, CPU only"
        + (f"; wall time {elapsed_s / 60:.1f} min." if elapsed_s is not None else "."),
        "",
        f"![tool-failure rate and accuracy per step, both arms]({plot.name})",
        "",
        f"## Per-step metrics, mean over seeds (first half: steps 1-{max(cfg.steps // 2, 1)}; second half: the rest)",
        "",
        "| metric | off, first half | off, second half | on, first half | on, second half | on - off, second "
        "half (per seed) |",
        "|---|---|---|---|---|---|",
    ]
    for key, what in COMPARED:
        off, on = summary["arms"]["off"][key], summary["arms"]["on"][key]
        diffs = ", ".join(_fmt(d) for d in summary["paired"][key]["on_minus_off_second_half"])
        lines.append(
            f"| {what} | {_fmt(off['first_half'])} | {_fmt(off['second_half'])} | {_fmt(on['first_half'])} | "
            f"{_fmt(on['second_half'])} | {_fmt(summary['paired'][key]['mean'])} ({diffs}) |"
        )
    lines += ["", "| totals over the runs | off | on |", "|---|---|---|"]
    for key in ("tool_calls", "tool_failures", "saar_shallow", "saar_deep", "saar_exhausted", "saar_purified"):
        lines.append(f"| {key} | {int(summary['arms']['off'][key])} | {int(summary['arms']['on'][key])} |")
    lines.append(
        f"| seconds per step (mean) | {_fmt(summary['arms']['off']['step_s'])} | "
        f"{_fmt(summary['arms']['on']['step_s'])} |"
    )
    if cfg.eval_problems:
        lines += [
            "",
            f"## Held-out problems ({cfg.eval_problems}, seed {HELD_OUT_SEED}), SAAR off at test, one sample each",
            "",
            "| seed | policy | accuracy | first-attempt tool-failure rate | tool calls per problem |",
            "|---|---|---|---|---|",
        ]
        for s in cfg.seeds:
            for name, ev in (
                ("warm start", summary["eval"][s]["warm"]),
                *((f"after SAAR {a}", summary["eval"][s][a]) for a in ARMS),
            ):
                if ev:
                    lines.append(
                        f"| {s} | {name} | {_fmt(ev.get('accuracy'))} | {_fmt(ev.get('first_call_failure_rate'))} "
                        f"| {_fmt(ev.get('tool_calls_mean'))} |"
                    )
    if pooled := summary["held_out_pooled"]:
        names = {"warm": "warm start", "off": "after SAAR off", "on": "after SAAR on"}
        lines += [
            "",
            "Pooled over the seeds (95% Wilson intervals): "
            + "; ".join(
                f"{names[p]} {v['right']}/{v['samples']} = {v['accuracy']:.3f} "
                f"[{v['interval'][0]:.3f}, {v['interval'][1]:.3f}]"
                for p, v in pooled.items()
            )
            + ".",
        ]
    lines += [
        "",
        "## Changes and their 95% intervals over seeds (Student's t)",
        "",
        "A change moved beyond the seed-to-seed spread when its interval excludes 0.",
        "",
        "| measure | change | per seed | mean [95% interval] | beyond the seed spread |",
        "|---|---|---|---|---|",
    ]
    for row in summary["intervals"]:
        iv = row["interval"]
        shown = "-" if iv is None else f"{row['mean']:+.3f} [{iv[0]:+.3f}, {iv[1]:+.3f}]"
        beyond = {None: "too few seeds", True: "**yes**", False: "no"}[row["beyond_seed_spread"]]
        per_seed = ", ".join(f"{v:+.3f}" for v in row["per_seed"])
        lines.append(f"| {row['what']} | {row['comparison']} | {per_seed} | {shown} | {beyond} |")
    lines += ["", "## What the numbers say", "", *reading(summary), ""]
    notes = cfg.run_dir / "reading.md"  # a hand-written interpretation, kept when the report is redrawn
    if notes.is_file():
        lines += ["## Reading (written by hand after the run)", "", notes.read_text(encoding="utf-8").strip(), ""]
    path = cfg.run_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainers ablation", description=__doc__.splitlines()[0])
    add_arguments(parser)
    print(run_ablation(config_from_args(parser.parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
