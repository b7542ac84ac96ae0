"""Sampling seeds: one per (sample, epoch), one per generation within it.

A provider that honours a per-request seed (vLLM, SGLang, the embedded model) returns the
same text for the same seed and context. One global seed would therefore make every
epoch of a sample the same sample, and pass@1 over epochs, pass@k and the bootstrap
interval would mean nothing. So:

* each (sample, epoch) gets its own :func:`trajectory_seed`, from the run's seed; the two
  arms of a SAAR ablation derive the same one (common random numbers keep the pairing);
* each generation of a trajectory gets :func:`generation_seed` from the trajectory seed,
  the index of the assistant turn it writes and the SAAR retry (0 for an ordinary turn), so
  the first turn is sampled identically in both arms and a SAAR regeneration has a seed
  of its own instead of repeating the failed turn.

The seeds are sha256-derived (stable across processes and Python versions, unlike
``hash``) and fit in 31 bits, which every provider accepts.
"""

from __future__ import annotations

import hashlib

_MASK = (1 << 31) - 1


def derive(*parts: object) -> int:
    """A 31-bit seed from ``parts`` (their text, joined); equal parts give equal seeds."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") & _MASK


def trajectory_seed(seed: int, sample_id: object, epoch: int) -> int:
    """The seed of one (sample, epoch) of a run seeded with ``seed`` (the same in both SAAR arms)."""
    return derive("trajectory", seed, sample_id, epoch)


def generation_seed(trajectory: int, *, turn: int, retry: int = 0) -> int:
    """The seed of the generation of assistant turn ``turn`` (0-based), SAAR regeneration ``retry`` (0: none)."""
    if turn < 0 or retry < 0:
        raise ValueError(f"generation_seed: turn and retry must be >= 0, got turn={turn}, retry={retry}")
    return derive("generation", trajectory, turn, retry)


def saar_draw_seed(trajectory: int) -> int:
    """The seed of the per-trajectory draw of whether SAAR is on (the 70/30 curriculum)."""
    return derive("saar", trajectory)
