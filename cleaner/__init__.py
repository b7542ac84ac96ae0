"""The benchmarks as Inspect tasks of an installed harness: ``inspect eval cleaner/<name>`` from any directory.

Inspect finds them through the ``cleaner`` entry point (``[project.entry-points.inspect_ai]`` in pyproject.toml),
as ``inspect_evals`` users find theirs; a checkout runs the same tasks from ``tasks/<name>.py``. Inspect prefixes
the task names with ``cleaner/`` after ``pip install -e .`` too because the distribution is named like this package.
"""
