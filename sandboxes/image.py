"""The sandbox images: their recipes, their content-hash tags, and an offline build.

Two variants, one per runtime a tool environment asks for (:mod:`sandboxes.runtimes`):

``project``
    Python 3 with numpy and sympy (Debian's packages): the project's environment, its demo and baselines.
``reference``
    Python 3 (Debian's) with the Python packages of the reference's runtime that a program imports, pinned in
    ``sandboxes/reference_runtime.txt`` (:mod:`sandboxes.reference_runtime` derives it from Open-CLEANER's
    install files) and installed from PyPI with ``pip --no-deps``: numpy, pandas, scipy, sympy, networkx and
    what they need.

Each holds one unprivileged user and nothing else. The warm interpreter (:mod:`sandboxes.docker.worker`)
is not baked in: it is passed to ``python3 -c`` when a container starts, so that a change to it never
forces a rebuild.

Two ways to build the same recipe, tagged by one content hash so that either is
reused when present:

- ``sandboxes/Dockerfile`` (``Dockerfile.reference``) for machines that can pull ``debian:bookworm-slim``;
- an offline build for machines that cannot pull: ``mmdebstrap`` installs the Debian
  packages from the host's own apt sources into a tarball (and, for ``reference``, pip
  installs the pinned wheels from PyPI into it; nothing else is fetched), which
  ``docker import`` turns into an image.

Usage::

    python -m sandboxes.image build [--variant reference] [--force] [--tarball PATH]
    python -m sandboxes.image rootfs [--variant reference] PATH   # only the root filesystem, for build --tarball
    python -m sandboxes.image tag [--variant reference]      # print the tag the recipe builds
    python -m sandboxes.image status [--variant reference]   # present or not
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from sandboxes.reference_runtime import KEPT, RUNTIME_FILE

Variant = Literal["project", "reference"]
VARIANTS: tuple[Variant, ...] = ("project", "reference")
REPOSITORY = "cleaner-sandbox"
#: Debian packages of the ``project`` image (their dependencies come with them).
PACKAGES: tuple[str, ...] = ("python3", "python3-numpy", "python3-sympy")
#: Debian packages of the ``reference`` image (the C++ runtime its wheels link against); its Python packages come
#: from :data:`RUNTIME_FILE` (PyPI).
REFERENCE_PACKAGES: tuple[str, ...] = ("python3", "libstdc++6")
SANDBOX_USER = "sandbox"
SANDBOX_UID = 1000
DOCKERFILE = Path(__file__).with_name("Dockerfile")
REFERENCE_DOCKERFILE = Path(__file__).with_name("Dockerfile.reference")
#: Files dropped from the offline image to keep it small (documentation, manuals, translations).
_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*", "/usr/share/lintian/*")
#: Image configuration applied by ``docker import`` (a Dockerfile sets the same).
IMPORT_CHANGES = [
    f"USER {SANDBOX_UID}:{SANDBOX_UID}",
    "WORKDIR /work",
    "ENV PYTHONDONTWRITEBYTECODE=1 OPENBLAS_NUM_THREADS=1 HOME=/work LANG=C.UTF-8",
    'CMD ["python3"]',
]


def _check_variant(variant: str) -> Variant:
    if variant not in VARIANTS:
        raise ValueError(f"unknown sandbox image variant {variant!r}; variants: {', '.join(VARIANTS)}")
    return variant  # type: ignore[return-value]


def packages(variant: Variant = "project") -> tuple[str, ...]:
    """The Debian packages of a variant's image."""
    return PACKAGES if _check_variant(variant) == "project" else REFERENCE_PACKAGES


def recipe(variant: Variant = "project") -> dict[str, object]:
    """Everything that determines a variant's image content; its hash is the tag."""
    dockerfile = DOCKERFILE if _check_variant(variant) == "project" else REFERENCE_DOCKERFILE
    content: dict[str, object] = {
        "packages": list(packages(variant)),
        "suite": _host_suite(),
        "user": [SANDBOX_USER, SANDBOX_UID],
        "excludes": list(_EXCLUDES),
        "changes": IMPORT_CHANGES,
        "dockerfile": dockerfile.read_text() if dockerfile.exists() else "",
    }
    if variant == "reference":
        content["pip"] = {"requirements": RUNTIME_FILE.read_text(), "machine": platform.machine()}
    return content


def repository(variant: Variant = "project") -> str:
    """``cleaner-sandbox``, or ``cleaner-sandbox-reference`` for the reference's runtime."""
    return REPOSITORY if _check_variant(variant) == "project" else f"{REPOSITORY}-{variant}"


def image_tag(variant: Variant = "project") -> str:
    """``<repository>:<12 hex digits of the variant's recipe's sha256>``."""
    digest = hashlib.sha256(json.dumps(recipe(variant), sort_keys=True).encode()).hexdigest()[:12]
    return f"{repository(variant)}:{digest}"


def build_command(tag: str) -> str:
    """The command that builds the image ``tag`` of the current recipes (for an error that says how to get it)."""
    variant = next((v for v in VARIANTS if tag.startswith(f"{repository(v)}:")), "project")
    return "python -m sandboxes.image build" + ("" if variant == "project" else f" --variant {variant}")


def _host_suite() -> str:
    """The Debian codename of the host (the suite whose packages the offline build installs)."""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip().strip('"') or "bookworm"
    except OSError:
        pass
    return "bookworm"


def _host_sources() -> list[str]:
    """The host's apt source files (deb822 ``.sources`` or one-line ``.list``) that are in use."""
    found = []
    main = Path("/etc/apt/sources.list")
    if main.exists() and any(ln.strip() and not ln.lstrip().startswith("#") for ln in main.read_text().splitlines()):
        found.append(str(main))
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*")):
        if path.suffix in (".list", ".sources"):
            found.append(str(path))
    return found


def _log(message: str) -> None:
    print(f"[sandbox image] {message}", file=sys.stderr, flush=True)


def _client():  # noqa: ANN202 - docker is imported lazily
    import docker

    return docker.from_env()


def image_exists(tag: str | None = None) -> bool:
    """Whether the engine holds the image ``tag`` (default: the current recipe's)."""
    import docker.errors

    try:
        _client().images.get(tag or image_tag())
        return True
    except docker.errors.ImageNotFound:
        return False


def build_offline(
    tag: str | None = None, *, variant: Variant = "project", tarball: str | None = None, force: bool = False
) -> str:
    """Build a variant's image with ``mmdebstrap`` from the host's apt sources and ``docker import`` it.

    Returns the tag. Reuses an existing image of the same tag unless ``force``.
    ``tarball`` keeps the root filesystem tarball at that path (and reuses it when present).
    """
    tag = tag or image_tag(variant)
    if not force and image_exists(tag):
        _log(f"{tag} is present; reusing it")
        return tag
    workdir = tempfile.mkdtemp(prefix="cleaner-image-")
    try:
        out = tarball or os.path.join(workdir, "rootfs.tar")
        if tarball and os.path.exists(tarball) and not force:
            _log(f"reusing the root filesystem {tarball}")
        else:
            build_rootfs(out, variant)
        size_mb = os.path.getsize(out) / 1e6
        _log(f"importing {size_mb:.0f} MB root filesystem as {tag}")
        start = time.monotonic()
        repo, _, version = tag.partition(":")
        api = _client().api
        api.import_image_from_file(out, repository=repo, tag=version or "latest", changes=IMPORT_CHANGES)
        _log(f"imported {tag} in {time.monotonic() - start:.1f} s")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return tag


def build_rootfs(out: str, variant: Variant = "project") -> str:
    """Write a variant's root filesystem to the tarball ``out`` with ``mmdebstrap`` (no Docker engine needed).

    Written beside ``out`` and renamed into place when complete, so an interrupted build never leaves a tarball
    that ``build --tarball`` would import. CI builds it while its first stage runs (``sandboxes/ci_docker.sh
    prepare``).
    """
    if shutil.which("mmdebstrap") is None:
        raise RuntimeError(
            "mmdebstrap is not installed: run `apt-get install -y mmdebstrap` (or build from sandboxes/Dockerfile)"
        )
    sources = _host_sources()
    if not sources:
        raise RuntimeError(
            "no apt sources found in /etc/apt/sources.list or /etc/apt/sources.list.d: cannot build offline"
        )
    partial = f"{out}.partial"
    try:
        _bootstrap(partial, sources, variant)
        os.replace(partial, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)
    return out


#: Where the ``reference`` image's Python packages go: a directory Debian's ``python3`` has on its path.
_SITE = '"$1/usr/local/lib/python$v/dist-packages"'


def _pip_hook() -> str:
    """The customize hook that installs :data:`RUNTIME_FILE` into the root filesystem ``$1``: this interpreter's
    pip fetches the pinned wheels of the rootfs's Python version and machine from PyPI (``--no-deps``: exactly
    the list), then the rootfs's own ``python3`` compiles them (the image's root is read-only, so bytecode
    cannot be written when a program first imports them; unchecked, because the tarball's clamped mtimes would
    make timestamped bytecode stale) and imports each kept package (a wheel that needs a
    library the image lacks fails the build, not a program)."""
    machine = platform.machine()
    platforms = " ".join(f"--platform {tag}_{machine}" for tag in ("manylinux_2_28", "manylinux_2_17", "manylinux2014"))
    return (
        'v=$(chroot "$1" python3 -c \'import sys; print("%d.%d" % sys.version_info[:2])\') && '
        f"{shlex.quote(sys.executable)} -m pip install --quiet --disable-pip-version-check --no-deps --no-compile "
        f"--only-binary=:all: {platforms} --implementation cp --python-version $v "
        f"--abi cp$(echo $v | tr -d .) --target {_SITE} -r {shlex.quote(str(RUNTIME_FILE))} && "
        f'rm -rf {_SITE}/bin && chroot "$1" python3 -m compileall -q --invalidation-mode unchecked-hash '
        f"/usr/local/lib/python$v/dist-packages && "
        f'chroot "$1" python3 -c "import {", ".join(KEPT)}"'
    )


def _bootstrap(out: str, sources: list[str], variant: Variant = "project") -> None:
    """Run mmdebstrap into the tarball ``out``, showing its progress lines as they come."""
    hook_user = (
        f'echo "{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}::/work:/usr/sbin/nologin" >> "$1/etc/passwd"; '
        f'echo "{SANDBOX_USER}:x:{SANDBOX_UID}:" >> "$1/etc/group"; '
        f'mkdir -p "$1/work" && chown {SANDBOX_UID}:{SANDBOX_UID} "$1/work"; '
        'rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*'
    )
    hooks = [_pip_hook()] if variant == "reference" else []
    cmd = [
        "mmdebstrap",
        "--variant=essential",
        "--format=tar",  # whatever the file is named (build_rootfs writes to OUT.partial)
        "--include=" + ",".join(packages(variant)),
        *[f"--dpkgopt=path-exclude={pattern}" for pattern in _EXCLUDES],
        *[f"--customize-hook={hook}" for hook in [*hooks, hook_user]],
        _host_suite(),
        out,
        *sources,
    ]
    pip = f" and {RUNTIME_FILE.name} from PyPI" if hooks else ""
    _log(f"bootstrapping {_host_suite()} with {', '.join(packages(variant))}{pip} from {', '.join(sources)}")
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
    assert proc.stderr is not None
    tail: list[str] = []
    for line in proc.stderr:
        line = line.rstrip()
        tail = (tail + [line])[-30:]
        if line.startswith(("I:", "E:", "W:")):  # mmdebstrap's stage lines (progress bars need a tty)
            _log(f"[{time.monotonic() - start:5.0f} s] {line}")
    if proc.wait() != 0:
        last = "\n".join(tail)
        raise RuntimeError(f"mmdebstrap failed (exit {proc.returncode}); last output:\n{last}")
    _log(f"root filesystem built in {time.monotonic() - start:.0f} s ({os.path.getsize(out) / 1e6:.0f} MB)")


def build_dockerfile(tag: str | None = None, *, variant: Variant = "project", force: bool = False) -> str:
    """Build from ``sandboxes/Dockerfile`` or ``Dockerfile.reference`` (needs to pull ``debian:bookworm-slim``)."""
    tag = tag or image_tag(variant)
    if not force and image_exists(tag):
        _log(f"{tag} is present; reusing it")
        return tag
    dockerfile = DOCKERFILE if variant == "project" else REFERENCE_DOCKERFILE
    api = _client().api
    for chunk in api.build(path=str(dockerfile.parent), dockerfile=dockerfile.name, tag=tag, decode=True, rm=True):
        if "stream" in chunk and chunk["stream"].strip():
            _log(chunk["stream"].rstrip())
        if "error" in chunk:
            raise RuntimeError(f"docker build failed: {chunk['error']}")
    return tag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandboxes.image", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the image unless present (offline by default)")
    rootfs = sub.add_parser("rootfs", help="only write the root filesystem tarball (no engine needed)")
    tag = sub.add_parser("tag", help="print the tag of the current recipe")
    status = sub.add_parser("status", help="say whether the image is present (exit 1 if not)")
    for command in (build, rootfs, tag, status):
        command.add_argument(
            "--variant", choices=VARIANTS, default="project", help="which image (default: %(default)s)"
        )
    build.add_argument("--force", action="store_true", help="rebuild even if the tag is present")
    build.add_argument("--tarball", help="keep (and reuse) the root filesystem tarball at this path")
    build.add_argument("--dockerfile", action="store_true", help="build from sandboxes/Dockerfile (pulls a base image)")
    rootfs.add_argument("tarball", help="where to write it; `build --tarball` with the same path imports it")
    args = parser.parse_args(argv)
    variant: Variant = args.variant
    if args.command == "tag":
        print(image_tag(variant))
        return 0
    if args.command == "rootfs":
        print(build_rootfs(args.tarball, variant))
        return 0
    if args.command == "status":
        present = image_exists(image_tag(variant))
        print(f"{image_tag(variant)} {'present' if present else 'absent'}")
        return 0 if present else 1
    if args.dockerfile:
        print(build_dockerfile(variant=variant, force=args.force))
    else:
        print(build_offline(variant=variant, tarball=args.tarball, force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
