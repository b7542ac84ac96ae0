"""Markdown for the reports: a table from its header and rows.

Every report the project writes (the evaluation's :func:`harness.reports.report.write_report`, the CPU
training ablation's :func:`trainers.cpu.ablation_report.write_report`) renders its tables here, so they all
read the same way.
"""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table: the header, its ``|---|`` rule, one line per row (cells as given, already formatted).

    >>> print(markdown_table(["arm", "pass@1"], [["off", "0.250"], ["on", "0.375"]]))
    | arm | pass@1 |
    |---|---|
    | off | 0.250 |
    | on | 0.375 |
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
