"""Rollout log-probs of a purified trajectory, and how far SAAR's replaced spans are from on-policy.

Importance-sampling correction (OpenRLHF's ``--algo.advantage.is_correction_level``, TRL's
``vllm_importance_sampling_correction``) weighs each action token by the trainer's log-prob over the rollout
engine's, both in the context the trainer sees: the final sequence. SAAR rewrites that sequence after sampling.
A token the engine drew in exactly the final context (every turn of an untouched trajectory, and every turn of
a purified one but the replaced ones) keeps the log-prob it was sampled with: that is the density it was drawn
from. A token SAAR put in (a deep replacement's turn, a shallow replacement's new call) was drawn with the
failed turn and its error in view, a context the final sequence no longer has; it gets the engine's log-prob
under the final context instead, from one prefill of the finished sequence (:func:`scoring_params`, vLLM's
``prompt_logprobs``). The correction then corrects the engine/trainer mismatch of every token alike.

Which tokens were drawn in the final context is read from token ids alone (:func:`origins`): an action span's
leading tokens are in context when a generation had exactly the sequence before the span as its context and
began with them; the rest of the span is what a generation in another context produced (its suffix).

The SAAR off-policy gap (:func:`gap_logs`): per replaced span with a sampled origin, the mean over its replaced
tokens of the log-prob as sampled minus the log-prob under the final context (positive: the token was likelier
with the error in view). What IS correction cannot correct, since no sampling distribution in the final context
ever drew those tokens. Beside it, the in-context tokens of a rescored trajectory measure the engine's own difference
between decoding and prefilling the same tokens: the floor below which a gap is numerics.

vLLM's prompt log-probs skip the sampling processors (temperature, top-p, top-k, min-p), while the sampled ones
are after them (OpenRLHF's ``processed_logprobs``); both agree only for plain sampling, which
:func:`check_plain_sampling` requires.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: per-sample keys of :func:`gap_logs` (sums, so that a step's mean of each gives exact ratios: :func:`gap_summary`)
GAP_KEYS = (
    "saar_replaced_tokens",
    "saar_replaced_share",
    "saar_replaced_spans",
    "saar_gap_sum",
    "saar_gap_sq_sum",
    "rescore_kept_tokens",
    "rescore_kept_abs_sum",
)


@dataclass(frozen=True)
class Sample:
    """One generation as the engine sampled it: its context, its ids and their log-probs."""

    context: tuple[int, ...]
    ids: tuple[int, ...]
    logprobs: tuple[float, ...]


@dataclass
class SampleLog:
    """Every generation of one rollout attempt (discarded SAAR regenerations included)."""

    samples: list[Sample] = field(default_factory=list)
    _by_context: dict[tuple[int, ...], list[Sample]] = field(default_factory=dict)

    def add(self, context: Sequence[int], ids: Sequence[int], logprobs: Sequence[float]) -> None:
        if len(ids) != len(logprobs):
            raise ValueError(f"a generation of {len(ids)} ids came with {len(logprobs)} log-probs")
        sample = Sample(tuple(context), tuple(ids), tuple(logprobs))
        self.samples.append(sample)
        self._by_context.setdefault(sample.context, []).append(sample)

    def in_context(self, context: Sequence[int]) -> list[Sample]:
        return self._by_context.get(tuple(context), [])


@dataclass(frozen=True)
class SpanOrigin:
    """Where an action span's tokens were sampled."""

    start: int
    end: int
    kept: int  #: leading tokens sampled in the final context
    kept_logprobs: tuple[float, ...]  #: their sampled log-probs
    #: the sampled log-probs of the rest (``end - start - kept`` tokens), drawn in another context; None when no
    #: one generation ends with them (a turn tokenized from text, or a splice of two generations neither of which
    #: was drawn in the final context): such tokens are rescored and left out of the gap
    replaced_logprobs: tuple[float, ...] | None

    @property
    def replaced(self) -> int:
        return self.end - self.start - self.kept


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def origins(ids: Sequence[int], ranges: Sequence[tuple[int, int]], log: SampleLog) -> list[SpanOrigin]:
    """Each action range's origin in ``log`` (see the module docstring)."""
    out: list[SpanOrigin] = []
    for start, end in ranges:
        span = list(ids[start:end])
        kept, kept_lp = 0, ()
        for sample in log.in_context(ids[:start]):
            n = _common_prefix(sample.ids, span)
            if n > kept:
                kept, kept_lp = n, sample.logprobs[:n]
        rest = span[kept:]
        replaced_lp = () if not rest else None
        if rest:
            for sample in log.samples:
                if len(sample.ids) >= len(rest) and list(sample.ids[len(sample.ids) - len(rest) :]) == rest:
                    replaced_lp = sample.logprobs[len(sample.ids) - len(rest) :]
                    break
        out.append(SpanOrigin(start, end, kept, tuple(kept_lp), replaced_lp))
    return out


def needs_rescoring(spans: Sequence[SpanOrigin]) -> bool:
    """Whether any action token was not sampled in the final context."""
    return any(s.replaced for s in spans)


def rollout_log_probs(n: int, spans: Sequence[SpanOrigin], rescored: Sequence[float | None] | None) -> list[float]:
    """OpenRLHF's ``rollout_log_probs``: one value per position of the ``n`` observation tokens (the log-prob of the
    token at that position), 0 outside the action ranges. In-context tokens: as sampled; replaced tokens: the final
    context's (``rescored``; where that has no value, as sampled)."""
    values = [0.0] * n
    for s in spans:
        values[s.start : s.start + s.kept] = s.kept_logprobs
        for j in range(s.replaced):
            pos = s.start + s.kept + j
            score = rescored[pos] if rescored is not None and pos < len(rescored) else None
            if score is None:
                if s.replaced_logprobs is None:
                    raise ValueError(f"action token {pos} was neither sampled in context nor rescored")
                score = s.replaced_logprobs[j]
            values[pos] = score
    return values


def gap_logs(spans: Sequence[SpanOrigin], rescored: Sequence[float | None] | None) -> dict[str, float]:
    """The per-sample numbers of :data:`GAP_KEYS` (all 0 for a trajectory SAAR did not touch)."""
    replaced = sum(s.replaced for s in spans)
    response = sum(s.end - s.start for s in spans)
    gaps: list[float] = []
    kept_tokens, kept_abs = 0, 0.0
    for s in spans:
        if rescored is None:
            break
        for j, lp in enumerate(s.kept_logprobs):
            pos = s.start + j
            if pos < len(rescored) and rescored[pos] is not None:
                kept_tokens += 1
                kept_abs += abs(lp - rescored[pos])  # type: ignore[operator]
        if s.replaced and s.replaced_logprobs is not None:
            diffs = [
                lp - rescored[pos]  # type: ignore[operator]
                for j, lp in enumerate(s.replaced_logprobs)
                if (pos := s.start + s.kept + j) < len(rescored) and rescored[pos] is not None
            ]
            if diffs:
                gaps.append(sum(diffs) / len(diffs))
    return {
        "saar_replaced_tokens": float(replaced),
        "saar_replaced_share": replaced / response if response else 0.0,
        "saar_replaced_spans": float(len(gaps)),
        "saar_gap_sum": sum(gaps),
        "saar_gap_sq_sum": sum(g * g for g in gaps),
        "rescore_kept_tokens": float(kept_tokens),
        "rescore_kept_abs_sum": kept_abs,
    }


def gap_summary(means: Mapping[str, float]) -> dict[str, float]:
    """A step's SAAR gap from the step's means of :data:`GAP_KEYS` and ``response_tokens`` (what OpenRLHF logs):
    the share of response tokens replaced, the replaced spans' gap (mean and standard deviation over spans) and
    the engine's decode/prefill floor (mean absolute difference over in-context tokens of rescored samples)."""
    spans = means.get("saar_replaced_spans", 0.0)
    mean = means.get("saar_gap_sum", 0.0) / spans if spans else 0.0
    var = means.get("saar_gap_sq_sum", 0.0) / spans - mean * mean if spans else 0.0
    response = means.get("response_tokens", 0.0)
    kept = means.get("rescore_kept_tokens", 0.0)
    return {
        "saar_replaced_token_share": means.get("saar_replaced_tokens", 0.0) / response if response else 0.0,
        "saar_gap_mean": mean,
        "saar_gap_std": math.sqrt(max(var, 0.0)),
        "rescore_floor": means.get("rescore_kept_abs_sum", 0.0) / kept if kept else 0.0,
    }


# ---------------------------------------------------------------------------------------------- the engine side


def check_plain_sampling(params: Any, where: str) -> None:
    """Refuse sampling whose log-probs a prefill cannot reproduce: temperature 1, no top-p, top-k or min-p."""
    temperature = getattr(params, "temperature", 1.0)
    top_p = getattr(params, "top_p", 1.0)
    top_k = getattr(params, "top_k", -1)
    min_p = getattr(params, "min_p", 0.0)
    if temperature != 1.0 or top_p != 1.0 or top_k not in (-1, 0, None) or min_p:
        raise ValueError(
            f"{where}: rollout log-probs of SAAR-purified trajectories are rescored by a prefill, whose log-probs "
            "skip temperature, top-p, top-k and min-p: sample with temperature 1.0, top_p 1.0 and no top-k/min-p "
            f"(got temperature {temperature}, top_p {top_p}, top_k {top_k}, min_p {min_p}), or turn the "
            "importance-sampling correction off"
        )


def scoring_params() -> Any:
    """vLLM's sampling params of one prefill that scores every token of its prompt (one token generated)."""
    from vllm import SamplingParams  # noqa: PLC0415

    return SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0, detokenize=False)


def sampled_logprobs(output: Any) -> list[float]:
    """The log-probs of a vLLM completion's own tokens (requested with ``logprobs`` >= 0)."""
    if output.logprobs is None:
        raise ValueError("the engine returned no log-probs for a generation that asked for them")
    return [float(step[token].logprob) for token, step in zip(output.token_ids, output.logprobs, strict=True)]


def prompt_logprobs(request_output: Any, ids: Sequence[int]) -> list[float | None]:
    """Per position of ``ids`` the log-prob of that token given those before it (None at position 0)."""
    rows = request_output.prompt_logprobs
    if rows is None or len(rows) != len(ids):
        raise ValueError(f"the engine scored {0 if rows is None else len(rows)} of the {len(ids)} prompt tokens")
    return [None if row is None else float(row[token].logprob) for token, row in zip(ids, rows, strict=True)]


async def rescore(engine: Any, ids: Sequence[int], max_length: int) -> list[float | None]:
    """The engine's log-prob of each of ``ids`` under the ids before it: one prefill through OpenRLHF's rollout actor
    (``generate(prompt_token_ids, sampling_params)``). A sequence at ``max_length`` leaves its last token unscored
    (the engine needs room for the one token it generates)."""
    scored = list(ids[: max_length - 1]) if len(ids) >= max_length else list(ids)
    out = await engine.generate(scored, scoring_params())
    return prompt_logprobs(out, scored)


async def final_log_probs(
    engine: Any, ids: Sequence[int], ranges: Sequence[tuple[int, int]], log: SampleLog, max_length: int
) -> tuple[list[float], dict[str, float]]:
    """A finished trajectory's rollout log-probs (:func:`rollout_log_probs`) and SAAR gap (:func:`gap_logs`); the
    engine prefills it (:func:`rescore`) only when a token was not drawn in the final context."""
    spans = origins(ids, ranges, log)
    rescored = await rescore(engine, ids, max_length) if needs_rescoring(spans) else None
    return rollout_log_probs(len(ids), spans, rescored), gap_logs(spans, rescored)
