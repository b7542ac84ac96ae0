"""The Python packages of the reference's runtime that a program imports, derived from its install files.

Open-CLEANER (commit 91e40ad70b48320ea8db5716bb86292b4e187f4c) runs a tool call's program with the ``python3``
of its training environment (code-judge's ``PYTHON_EXECUTOR_PATH``, ``app/config.py`` line 40). Its README
("Get Started", lines 39-60) makes that environment: the verl image ``verlai/verl:app-verl0.6-...-sglang0.5.2``
(built by ``verl/docker/verl0.6-cu128-torch2.8.0-fa2.7.4/Dockerfile.base`` and ``Dockerfile.app.sglang``), then
``pip install -r code-judge/requirements.txt``, ``pip install -e code-judge`` and, in ``verl``,
``pip install -e .[sglang]`` (``verl/setup.py``: ``install_requires`` and the ``sglang`` extra).

:func:`derive` reads those files from a checkout of that commit (never running them: ``setup.py`` is parsed with
:mod:`ast`), each pinned by its sha256, so another commit is refused naming the file. Every requirement they name
is either kept (:data:`KEPT`: a library a program imports to compute, pinned, with the requirement that brings it)
or dropped with the reason (:data:`DROPPED`: training and serving machinery, CUDA, tools); a requirement in
neither is refused as a changed shape, naming its file and line. :func:`render` writes the kept packages as a pip
requirements file, each with the file and line it comes from: :data:`RUNTIME_FILE`, which the ``reference``
sandbox image installs (:mod:`sandboxes.image`)::

    python -m sandboxes.reference_runtime derive <checkout of Open-CLEANER> [--out FILE]

Pins: the reference's own constraint where it has one (``numpy<2.0.0``: its last release), else the release
current when the image its README names was built (autumn 2025), for CPython 3.11 (the sandbox's Debian
``python3``; the reference's image has 3.12). What each kept package needs comes with it, pinned too
(:data:`NEEDED`), so the image installs exactly this list.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import shlex
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

REFERENCE_COMMIT = "91e40ad70b48320ea8db5716bb86292b4e187f4c"
#: The list the ``reference`` image installs (a pip requirements file written by :func:`render`).
RUNTIME_FILE = Path(__file__).with_name("reference_runtime.txt")

README = "README.md"
CODE_JUDGE_REQUIREMENTS = "code-judge/requirements.txt"
VERL_SETUP = "verl/setup.py"
IMAGE_BASE = "verl/docker/verl0.6-cu128-torch2.8.0-fa2.7.4/Dockerfile.base"
IMAGE_APP = "verl/docker/verl0.6-cu128-torch2.8.0-fa2.7.4/Dockerfile.app.sglang"
#: The install files read, by path, with the sha256 of each at :data:`REFERENCE_COMMIT`.
SOURCES: Mapping[str, str] = {
    README: "c5ab958d3e598e8b44cb1c03834e2dcd90c071220d0e606efd5e8e13ca150038",
    CODE_JUDGE_REQUIREMENTS: "19e82918e39b5fd76efb6b0ccfcebd7b9d9941be0722d06b55783aa4e7b7045b",
    VERL_SETUP: "29c9afde9177da0952b39e8d302112c090eb1cea8a277da0f5fcc320915efd44",
    IMAGE_BASE: "061730a1cc83b350aa433b53f3f068a40560896aaa1518033294f438befc02d2",
    IMAGE_APP: "8a059284b944e9426a184a3c505f4fd21bdcefe3efe6262dfca7100bd2588e8c",
}
#: The README's install commands that make the runtime (each must be there, as written).
README_COMMANDS = (
    "pip install -r code-judge/requirements.txt",
    "pip install -e code-judge",
    "cd verl && pip install -e .[sglang] && cd ..",
)
#: The extras of ``verl/setup.py`` the README installs, and the list each is in.
SETUP_LISTS = ("install_requires", "SGLANG_REQUIRES")


@dataclass(frozen=True)
class Kept:
    """A package a program imports: its pin, and the reference's requirements that bring it (any one suffices)."""

    pin: str
    via: tuple[str, ...]
    how: str  #: how it comes (the requirement itself, or what that requirement needs)


#: The packages kept, by normalized name.
KEPT: Mapping[str, Kept] = {
    "numpy": Kept("1.26.4", ("numpy",), "numpy<2.0.0"),
    "pandas": Kept("2.3.3", ("pandas",), "pandas"),
    "scipy": Kept("1.16.2", ("sglang",), "sglang 0.5.5 requires scipy"),
    "sympy": Kept("1.14.0", ("torch", "math-verify"), "torch 2.8.0 requires sympy>=1.13.3; math-verify needs sympy"),
    "networkx": Kept("3.5", ("torch",), "torch 2.8.0 requires networkx"),
}
#: What the kept packages need to import, pinned: name -> (pin, who needs it).
NEEDED: Mapping[str, tuple[str, str]] = {
    "mpmath": ("1.3.0", "sympy"),
    "python-dateutil": ("2.9.0.post0", "pandas"),
    "pytz": ("2025.2", "pandas"),
    "tzdata": ("2025.2", "pandas"),
    "six": ("1.17.0", "python-dateutil"),
}
_INFRA = "training, serving or judging machinery, not a library a program computes with"
_GPU = "CUDA, GPU kernels or a deep-learning framework (gigabytes; no GPU in the sandbox)"
_TOOL = "a developer tool"
_DATA = "data and model formats and hubs of the trainer"
#: Requirements of the reference's files that are not kept, by normalized name, with the reason.
DROPPED: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "redis",
            "fastapi",
            "uvicorn",
            "psutil",
            "json-repair",
            "math-verify",
            "code-judge",
            "accelerate",
            "codetiming",
            "dill",
            "hydra-core",
            "peft",
            "pybind11",
            "pylatexenc",
            "ray",
            "wandb",
            "packaging",
            "tensorboard",
            "sglang",
            "xgrammar",
            "mathruler",
            "qwen-vl-utils",
            "hf-transfer",
            "blobfile",
            "liger-kernel",
            "mbridge",
        ),
        _INFRA,
    ),
    **dict.fromkeys(
        (
            "torch",
            "torchdata",
            "tensordict",
            "flash-attn",
            "apex",
            "transformerengine",
            "torch-memory-saver",
            "megatron-lm",
        ),
        _GPU,
    ),
    **dict.fromkeys(("transformers", "datasets", "pyarrow"), _DATA),
    **dict.fromkeys(("pip", "pytest", "py-spy", "pre-commit", "ruff"), _TOOL),
}


class ReferenceRuntimeError(ValueError):
    """An install file is missing, of another commit, or not in the shape this reader knows."""


@dataclass(frozen=True)
class Requirement:
    """One requirement an install file names: its normalized name, as written, and where."""

    name: str
    text: str
    path: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _name(text: str, where: str) -> str:
    if text.startswith("git+"):  # git+https://host/owner/Name.git[@ref]: Name
        return normalize(re.sub(r"(\.git)?(@[^/]*)?$", "", text.rstrip("/")).rsplit("/", 1)[-1])
    match = _NAME.match(text)
    if not match:
        raise ReferenceRuntimeError(f"{where}: {text!r} is not a requirement this reader knows")
    return normalize(match.group(0))


def _requirements_txt(path: str, text: str) -> Iterator[Requirement]:
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            yield Requirement(_name(line, f"{path}:{number}"), line, path, number)


def _setup_lists(path: str, text: str) -> Iterator[Requirement]:
    found: dict[str, ast.List] = {}
    for node in ast.parse(text, path).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in SETUP_LISTS and isinstance(node.value, ast.List):
                found[node.targets[0].id] = node.value
    for name in SETUP_LISTS:
        if name not in found:
            raise ReferenceRuntimeError(
                f"{path}: no list {name} = [...]: its shape is not that of {REFERENCE_COMMIT[:7]}"
            )
        for item in found[name].elts:
            if not (isinstance(item, ast.Constant) and isinstance(item.value, str)):
                raise ReferenceRuntimeError(f"{path}:{item.lineno}: {name} holds something other than a string")
            yield Requirement(_name(item.value, f"{path}:{item.lineno}"), item.value, path, item.lineno)


#: pip options whose value is the next word
_VALUED = {"-i", "--index-url", "--extra-index-url", "--config-settings", "-c", "--constraint"}


def _dockerfile(path: str, text: str) -> Iterator[Requirement]:
    """The packages of each ``pip install`` in a ``RUN`` instruction (continued lines joined; the first line's
    number)."""
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        start, command = number + 1, lines[number]
        while command.rstrip().endswith("\\") and number + 1 < len(lines):
            number += 1
            command = command.rstrip()[:-1] + " " + lines[number]
        number += 1
        for part in re.split(r"&&|;", command):
            words = shlex.split(part)
            for i in range(len(words) - 1):
                if re.fullmatch(r"pip3?", words[i]) and words[i + 1] == "install":
                    yield from _pip_words(words[i + 2 :], path, start)
                    break


def _pip_words(words: list[str], path: str, line: int) -> Iterator[Requirement]:
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in _VALUED:
            skip = True
        elif word.startswith("-"):
            continue
        elif word == ".":  # `pip install -e .` in a clone (Megatron-LM's, the line before)
            yield Requirement("megatron-lm", word, path, line)
        else:
            yield Requirement(_name(word, f"{path}:{line}"), word, path, line)


def _readme(path: str, text: str) -> Iterator[Requirement]:
    """The README's install commands: the code-judge package itself (its requirements file is read apart)."""
    for command in README_COMMANDS:
        if command not in text.splitlines() and f"{command}\n" not in text:
            raise ReferenceRuntimeError(
                f"{path}: the install command {command!r} is not there: its shape is not that of "
                f"commit {REFERENCE_COMMIT[:7]}"
            )
    line = next(i for i, text_line in enumerate(text.splitlines(), 1) if text_line.strip() == README_COMMANDS[1])
    yield Requirement("code-judge", README_COMMANDS[1], path, line)


_READERS = {
    README: _readme,
    CODE_JUDGE_REQUIREMENTS: _requirements_txt,
    VERL_SETUP: _setup_lists,
    IMAGE_BASE: _dockerfile,
    IMAGE_APP: _dockerfile,
}


def read_requirements(checkout: str | os.PathLike[str], pinned: Mapping[str, str] | None = None) -> list[Requirement]:
    """Every requirement the install files of ``checkout`` name, in file order.

    Raises :class:`ReferenceRuntimeError` for a missing file or one whose sha256 is not ``pinned``'s (default:
    :data:`SOURCES`, the commit's).
    """
    root = Path(checkout).expanduser()
    pinned = SOURCES if pinned is None else pinned
    found: list[Requirement] = []
    for path, reader in _READERS.items():
        file = root / path
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise ReferenceRuntimeError(
                f"{file}: cannot read it ({exc.strerror}): give a checkout of Open-CLEANER at commit {REFERENCE_COMMIT}"
            ) from None
        digest = hashlib.sha256(raw).hexdigest()
        if digest != pinned[path]:
            raise ReferenceRuntimeError(
                f"{file}: sha256 {digest} is not that of {path} at Open-CLEANER commit {REFERENCE_COMMIT} "
                f"({pinned[path]}): check out that commit (git checkout {REFERENCE_COMMIT[:7]})"
            )
        found.extend(reader(path, raw.decode("utf-8")))
    return found


def derive(checkout: str | os.PathLike[str], pinned: Mapping[str, str] | None = None) -> str:
    """The text of :data:`RUNTIME_FILE` from a checkout of the reference (see the module docstring).

    Raises :class:`ReferenceRuntimeError` as :func:`read_requirements` does, for a requirement neither kept nor
    dropped (naming its file and line), and for a kept package whose requirement is no longer there.
    """
    requirements = read_requirements(checkout, pinned)
    unknown = [r for r in requirements if r.name not in DROPPED and r.name not in KEPT]
    if unknown:
        listed = "; ".join(f"{r.where}: {r.text!r}" for r in unknown)
        raise ReferenceRuntimeError(
            f"requirements this reader has not classified (kept or dropped): {listed}: "
            f"their shape is not that of commit {REFERENCE_COMMIT[:7]}"
        )
    by_name: dict[str, list[Requirement]] = {}
    for r in requirements:
        by_name.setdefault(r.name, []).append(r)
    lines = [
        "# The Python packages of Open-CLEANER's runtime that a program imports (the `reference` sandbox image).",
        f"# Derived from its install files at commit {REFERENCE_COMMIT} by",
        "# `python -m sandboxes.reference_runtime derive <checkout>` (sandboxes/reference_runtime.py says how);",
        "# do not edit by hand. Installed with `pip install --no-deps`: what each needs is listed too.",
    ]
    for name, kept in KEPT.items():
        sources = [r for via in kept.via for r in by_name.get(via, [])]
        if not sources:
            raise ReferenceRuntimeError(
                f"{name}: none of {', '.join(kept.via)} is required by the install files any more: "
                f"their shape is not that of commit {REFERENCE_COMMIT[:7]}"
            )
        places = ", ".join(r.where for r in sources)
        lines.append(f"{name}=={kept.pin}  # {kept.how}: {places}")
    for name, (pin, needed_by) in NEEDED.items():
        lines.append(f"{name}=={pin}  # needed by {needed_by}")
    return "\n".join(lines) + "\n"


def pinned_packages(text: str | None = None) -> dict[str, str]:
    """The packages of :data:`RUNTIME_FILE` (or of ``text`` in its form): name -> version."""
    text = RUNTIME_FILE.read_text() if text is None else text
    packages = {}
    for line in text.splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec:
            name, _, version = spec.partition("==")
            packages[name] = version
    return packages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandboxes.reference_runtime", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    derive_cmd = sub.add_parser("derive", help="write the list from a checkout of the reference's pinned commit")
    derive_cmd.add_argument("checkout", help=f"a checkout of Open-CLEANER at commit {REFERENCE_COMMIT[:7]}")
    derive_cmd.add_argument("--out", default=str(RUNTIME_FILE), help="where to write it (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        text = derive(args.checkout)
    except ReferenceRuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    Path(args.out).write_text(text)
    print(f"wrote {args.out}: {', '.join(f'{k}=={v}' for k, v in pinned_packages(text).items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
