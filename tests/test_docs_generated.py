"""The docs' generated sections are what the code generates now (``python -m harness docs`` writes them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import docs

ROOT = Path(__file__).resolve().parents[1]


def test_every_generated_section_is_current() -> None:
    assert docs.stale() == [], "run: python -m harness docs"


def test_a_stale_section_is_found_and_rewritten(tmp_path: Path) -> None:
    for page, _ in docs.SECTIONS:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((ROOT / page).read_text(encoding="utf-8"), encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8").replace("| `seed` |", "| `sed` |"), encoding="utf-8")
    assert docs.stale(tmp_path) == ["README.md#task-arguments"]
    assert docs.stale(tmp_path, write=True) == ["README.md#task-arguments"]
    assert docs.stale(tmp_path) == [] and "| `seed` |" in readme.read_text(encoding="utf-8")


def test_a_page_without_its_section_is_an_error() -> None:
    with pytest.raises(ValueError, match="README.md: expected one generated section 'task-arguments', found 0"):
        docs.render("no markers here", "task-arguments", ["x"], "README.md")
