"""Optional test dependencies skip on a developer's machine and fail under CI."""

from __future__ import annotations

import pytest
from needs import import_or_skip


def test_missing_module_skips_locally_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("CLEANER_REQUIRE_DEPS", raising=False)
    with pytest.raises(pytest.skip.Exception):
        import_or_skip("no_such_module_for_cleaner")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="is set but no_such_module_for_cleaner"):
        import_or_skip("no_such_module_for_cleaner")
    monkeypatch.delenv("CI")
    monkeypatch.setenv("CLEANER_REQUIRE_DEPS", "1")
    with pytest.raises(pytest.fail.Exception, match="is set but no_such_module_for_cleaner"):
        import_or_skip("no_such_module_for_cleaner")
    assert import_or_skip("json").dumps([]) == "[]"
