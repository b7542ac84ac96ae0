"""The sandbox image's root filesystem, written apart from the import (CI writes it while its first stage runs).

mmdebstrap is stood in for here (it needs root, apt and a minute); the real build runs in CI's
``sandboxes/ci_docker.sh prepare`` and the Docker-marked tests use the image it makes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandboxes import image


@pytest.fixture
def fake_mmdebstrap(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """mmdebstrap present with one apt source; each bootstrap writes part of its tarball, then fails if told."""
    fails: list[str] = []

    def bootstrap(out: str, sources: list[str], variant: str = "project") -> None:
        Path(out).write_bytes(b"half a root filesystem")
        if fails:
            raise RuntimeError(fails[0])
        Path(out).write_bytes(b"a root filesystem")

    monkeypatch.setattr(image.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(image, "_host_sources", lambda: ["deb http://deb.debian.org/debian bookworm main"])
    monkeypatch.setattr(image, "_bootstrap", bootstrap)
    return fails


def test_a_failed_bootstrap_leaves_no_tarball_to_import(tmp_path: Path, fake_mmdebstrap: list[str]) -> None:
    fake_mmdebstrap.append("mmdebstrap failed (exit 1)")
    out = tmp_path / "rootfs.tar"
    with pytest.raises(RuntimeError, match="exit 1"):
        image.main(["rootfs", str(out)])
    assert list(tmp_path.iterdir()) == []  # neither the tarball nor its partial file


def test_rootfs_writes_the_tarball_that_build_imports(tmp_path: Path, fake_mmdebstrap: list[str]) -> None:
    out = tmp_path / "rootfs.tar"
    assert image.main(["rootfs", str(out)]) == 0
    assert out.read_bytes() == b"a root filesystem" and list(tmp_path.iterdir()) == [out]


def test_the_reference_variant_is_an_image_of_its_own_and_leaves_the_projects_recipe_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, reference = image.recipe("project"), image.recipe("reference")
    assert set(project) == {"packages", "suite", "user", "excludes", "changes", "dockerfile"}  # as before: same tag
    assert project["packages"] == list(image.PACKAGES) and "pip" not in project
    assert reference["pip"]["requirements"] == image.RUNTIME_FILE.read_text()  # type: ignore[index]
    assert image.image_tag("reference").startswith("cleaner-sandbox-reference:")
    assert image.build_command(image.image_tag("reference")).endswith("build --variant reference")
    seen: list[str] = []
    monkeypatch.setattr(image.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(image, "_host_sources", lambda: ["deb http://deb.debian.org/debian bookworm main"])
    monkeypatch.setattr(image, "_bootstrap", lambda out, sources, variant: (seen.append(variant), Path(out).touch()))
    assert image.main(["rootfs", "--variant", "reference", str(tmp_path / "r.tar")]) == 0
    assert seen == ["reference"]
    with pytest.raises(ValueError, match="unknown sandbox image variant 'other'"):
        image.recipe("other")  # type: ignore[arg-type]
