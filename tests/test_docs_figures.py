"""A figure is stated once, on docs/results.md; a page that uses one copies it from there and a copy that drifts
fails here (docs/scaling.md's table of measured figures)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANGE = re.compile(r"\d+(?:\.\d+)?-\d+(?:\.\d+)?")


def measured_rows(page: str) -> dict[str, str]:
    """The figure cell of each row of a page's first table marked ``measured``, by its symbol."""
    rows = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and cells[3] == "measured":
            rows[cells[1]] = cells[2]
    return rows


def test_scalings_measured_ranges_are_on_results() -> None:
    results = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    rows = measured_rows((ROOT / "docs" / "scaling.md").read_text(encoding="utf-8"))
    assert {"`H`", "`S`", "`C`", "`E`"} <= set(rows)
    drifted = {symbol: r for symbol, cell in rows.items() for r in RANGE.findall(cell) if r not in results}
    assert drifted == {}, "docs/scaling.md states ranges that docs/results.md does not: copy them from there"
