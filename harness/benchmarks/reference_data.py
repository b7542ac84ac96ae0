"""The reference implementation's evaluation data: Open-CLEANER's parquet files, as problems.

Open-CLEANER's evaluation scripts (``recipe/cleaner/eval/*.sh``) hand verl one parquet file
per benchmark, and ``CustomRLHFDataset`` in ``recipe/cleaner/reward.py`` (lines 45-116 at
commit 91e40ad70b48320ea8db5716bb86292b4e187f4c) reads them. Its README (line 72) names the
hub dataset they come from, ``Gen-Verse/Open-AgentRL-Eval``. The layout, per that code:

* every file has a ``data_source`` column; the reference dispatches on the value of its
  first row (reward.py lines 52-65): ``AIME2024``, ``AIME2025``, ``gpqa_diamond``,
  ``LiveCodeBench_v6``;
* AIME 2024: ``Problem`` and ``Answer`` (line 73); AIME 2025: ``problem`` and ``answer``
  (line 75);
* GPQA-Diamond: ``problem`` (the question with its choices already in the text), ``solution``
  and ``domain`` (line 87). The ground truth is ``str(solution)`` (line 94), compared as it is
  with the content of the answer's last ``\\boxed{}`` (``math_dapo`` with
  ``strict_box_verify=True``, line 229): ``solution`` is the letter itself, nothing is extracted;
* LiveCodeBench: ``problem`` and ``reward_model``, a JSON string whose ``ground_truth`` holds
  the tests as ``{"inputs": [...], "outputs": [...]}`` (lines 100-105), scored on all of them
  (``code_math.compute_score``, line 227).

:func:`load_reference_parquet` reads such a file, local or on the hub, and checks it whole
before any sample runs. Prompts are rendered from ``problem`` with the run's templates (the
reference's own wording is not part of this project; docs/benchmarks.md says how to copy it).
The loaders of :mod:`harness.benchmarks.datasets` route such a file (their ``path``) to it; its
code lives in that module, so that they reach it without an import circle, and this module is
its documented entry point.
"""

from harness.benchmarks.datasets import (
    LAYOUTS,
    REFERENCE_HUB_REPO,
    ReferenceLayout,
    is_reference_source,
    layouts_for,
    load_reference_parquet,
    tests_from_ground_truth,
)

__all__ = [
    "LAYOUTS",
    "REFERENCE_HUB_REPO",
    "ReferenceLayout",
    "is_reference_source",
    "layouts_for",
    "load_reference_parquet",
    "tests_from_ground_truth",
]
