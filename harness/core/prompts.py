"""User prompts for each problem kind, read from a template file, and GPQA's stable choice shuffle.

The prompt is the only instruction the model gets about the answer format, so the project's
templates state it plainly: math and GPQA answers go in ``\\boxed{}`` (what the scorers in
:mod:`harness.benchmarks.scoring` read), code goes in a final ```python block (what
:func:`harness.benchmarks.scoring.extract_code` reads). Every prompt mentions the python tool;
its calling convention is given by the system prompt / tool schema of
:mod:`harness.core.protocol`, not here.

The templates are data: a YAML (or JSON) file maps each kind (``math``, ``gpqa``, ``code``) to
a template in :meth:`str.format` syntax. :data:`DEFAULT_TEMPLATES_PATH` is the project's own
file; :func:`load_prompt_templates` reads another one and checks it completely, so a broken
file fails before any sample runs. The placeholders of each kind are :data:`PLACEHOLDERS`:

* ``{problem}`` (every kind, required): the problem text, stripped; for ``gpqa`` the question,
  a blank line and its ``A) ...`` choice lines (:func:`gpqa_problem`), or the problem text as
  the data gives it when its choices are already inside;
* ``{starter}`` (``code``): the starter-code block (:data:`STARTER_TEMPLATE`), or empty;
* ``{io_rule}`` (``code``): :data:`CODE_STARTER_RULE` with starter code, else :data:`CODE_STDIN_RULE`;
* ``{domain}`` (``gpqa``): the question's domain as the data names it (a template that uses it
  refuses a question without one);
* ``{test_inputs}``, ``{test_outputs}`` (``code``): Python's ``str()`` of the list of the inputs
  (the expected outputs) of every test the problem is graded on, as the data holds them: the
  reference shows its ground truth this way (:func:`tests_text`). A loader computes them only
  for a template that uses them (:meth:`PromptTemplates.uses`).

A literal brace is written doubled (``\\boxed{{}}``); a single brace that is not one of these
placeholders is an error at load time, never a silent change of the prompt.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.core.kinds import KINDS

LETTERS = "ABCD"

#: The project's templates (what :func:`math_prompt`, :func:`gpqa_prompt` and :func:`code_prompt` render).
DEFAULT_TEMPLATES_PATH = Path(__file__).parents[1] / "data" / "prompts" / "project.yaml"

#: The placeholders each kind's template may use; ``{problem}`` is required in every one.
PLACEHOLDERS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "math": frozenset({"problem"}),
        "gpqa": frozenset({"problem", "domain"}),
        "code": frozenset({"problem", "starter", "io_rule", "test_inputs", "test_outputs"}),
    }
)
REQUIRED_PLACEHOLDER = "problem"
#: The placeholders that show a code problem's tests (their values: :func:`tests_text`).
TEST_PLACEHOLDERS = frozenset({"test_inputs", "test_outputs"})

CODE_STDIN_RULE = "Your program must read the input from standard input and write the answer to standard output."
CODE_STARTER_RULE = "Complete the starter code below; your solution is called through it, not through standard input."

#: The ``{starter}`` block of a code prompt with starter code.
STARTER_TEMPLATE = """
Use this starter code:
```python
{starter_code}
```
"""


class PromptTemplateError(ValueError):
    """A prompt template file is missing, malformed, or lacks a template a task needs."""


def _placeholders(text: str, kind: str, source: str) -> set[str]:
    """The placeholder names of ``text``, checked against the kind's :data:`PLACEHOLDERS`."""
    where = f"prompt templates {source}: template {kind!r}"
    allowed = PLACEHOLDERS[kind]
    hint = "a literal brace is written doubled, as {{ or }} (\\boxed{{}})"
    names: set[str] = set()
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise PromptTemplateError(f"{where}: unbalanced brace ({exc}); {hint}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in allowed:
            shown = "{" + name + "}"
            raise PromptTemplateError(
                f"{where}: unknown placeholder {shown} (allowed: {', '.join('{' + p + '}' for p in sorted(allowed))}); "
                f"{hint}"
            )
        if spec or conversion:
            raise PromptTemplateError(f"{where}: placeholder {{{name}}} has a conversion or format spec; write it bare")
        names.add(name)
    if REQUIRED_PLACEHOLDER not in names:
        raise PromptTemplateError(f"{where}: no {{{REQUIRED_PLACEHOLDER}}} placeholder (every template needs one)")
    return names


@dataclass(frozen=True)
class PromptTemplates:
    """The user-prompt templates of a run: one per problem kind, from one file.

    ``source`` is the file they came from and ``sha256`` the sha256 of its bytes (what a log
    records). The templates are checked when the object is built: an unknown kind, a
    non-string template, an unknown placeholder or a missing ``{problem}`` raises
    :class:`PromptTemplateError` naming ``source``.
    """

    templates: Mapping[str, str]  #: kind -> template text
    source: str  #: the file the templates came from
    sha256: str  #: sha256 of that file's bytes

    def __post_init__(self) -> None:
        if not isinstance(self.templates, Mapping):
            raise PromptTemplateError(
                f"prompt templates {self.source}: expected a mapping of kind to template "
                f"({', '.join(KINDS)}), got {type(self.templates).__name__}"
            )
        if not self.templates:
            raise PromptTemplateError(f"prompt templates {self.source}: no template (kinds: {', '.join(KINDS)})")
        for kind, text in self.templates.items():
            if kind not in PLACEHOLDERS:
                raise PromptTemplateError(
                    f"prompt templates {self.source}: unknown kind {kind!r} (kinds: {', '.join(KINDS)})"
                )
            if not isinstance(text, str):
                raise PromptTemplateError(
                    f"prompt templates {self.source}: template {kind!r} must be text, got {type(text).__name__}"
                )
            _placeholders(text, kind, self.source)
        object.__setattr__(self, "templates", MappingProxyType(dict(self.templates)))

    def __hash__(self) -> int:
        return hash((self.source, self.sha256, tuple(sorted(self.templates.items()))))

    def require(self, kinds: Iterable[str]) -> None:
        """Raise :class:`PromptTemplateError` naming the file and the first kind it has no template for."""
        for kind in kinds:
            if kind not in self.templates:
                defined = ", ".join(k for k in KINDS if k in self.templates)
                raise PromptTemplateError(
                    f"prompt templates {self.source}: no template for kind {kind!r}, which this task needs "
                    f"(the file defines: {defined})"
                )

    def uses(self, kind: str, placeholders: Iterable[str]) -> bool:
        """Whether the template of ``kind`` (which must exist) uses one of ``placeholders``."""
        self.require([kind])
        return not _placeholders(self.templates[kind], kind, self.source).isdisjoint(placeholders)

    def shows_tests(self) -> bool:
        """Whether the ``code`` template shows the problem's tests (``{test_inputs}`` or ``{test_outputs}``)."""
        return "code" in self.templates and self.uses("code", TEST_PLACEHOLDERS)

    def render(
        self,
        kind: str,
        problem: str,
        *,
        starter_code: str = "",
        domain: str = "",
        tests: tuple[Sequence[Any], Sequence[Any]] | None = None,
    ) -> str:
        """The user prompt of a problem of ``kind``.

        ``problem`` is stripped. ``starter_code`` (code) fills ``{starter}`` and selects
        ``{io_rule}``; ``domain`` (gpqa) fills ``{domain}``; ``tests`` (code: the inputs and
        the expected outputs of every test the problem is graded on) fill ``{test_inputs}`` and
        ``{test_outputs}`` (:func:`tests_text`).
        """
        self.require([kind])
        text = self.templates[kind]
        used = _placeholders(text, kind, self.source)
        starter = STARTER_TEMPLATE.format(starter_code=starter_code.rstrip()) if starter_code.strip() else ""
        values = {
            "problem": problem.strip(),
            "starter": starter,
            "io_rule": CODE_STARTER_RULE if starter else CODE_STDIN_RULE,
            "domain": domain.strip(),
        }
        if "domain" in used and not values["domain"]:
            raise PromptTemplateError(
                f"prompt templates {self.source}: template {kind!r} uses {{domain}}, but this question has no domain"
            )
        if not used.isdisjoint(TEST_PLACEHOLDERS):
            if not tests or not tests[0]:
                raise PromptTemplateError(
                    f"prompt templates {self.source}: template {kind!r} shows the problem's tests "
                    "({test_inputs}/{test_outputs}), but this problem has none"
                )
            values["test_inputs"], values["test_outputs"] = tests_text(*tests)
        return text.format_map(values)


def tests_text(inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple[str, str]:
    """The values of ``{test_inputs}`` and ``{test_outputs}``: Python's ``str()`` of each list.

    That is how the reference shows the ground truth it grades with (the ``str()`` of the
    JSON-decoded ``inputs`` and ``outputs`` lists): strings in quotes, a line break as ``\\n``.
    """
    if len(inputs) != len(outputs):
        raise ValueError(f"tests_text: {len(inputs)} inputs but {len(outputs)} outputs")
    return str(list(inputs)), str(list(outputs))


def _parse(raw: bytes, path: Path) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromptTemplateError(
            f"prompt templates {path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise PromptTemplateError(
                f"prompt templates {path}: not valid JSON ({exc.msg} at line {exc.lineno})"
            ) from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise PromptTemplateError(f"prompt templates {path}: not valid YAML ({problem}{at})") from None


def load_prompt_templates(path: str | os.PathLike[str] | None = None) -> PromptTemplates:
    """The templates of a YAML (or ``.json``) file; ``None``: the project's (:data:`DEFAULT_TEMPLATES_PATH`).

    A relative path is taken from the working directory. Everything is checked here (see
    :class:`PromptTemplates`); a kind the file does not define fails at :meth:`PromptTemplates.require`.
    """
    if path is None:
        return default_templates()
    return _load(Path(path).expanduser())


def _load(path: Path) -> PromptTemplates:
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "no such file"
        raise PromptTemplateError(f"prompt templates {path}: {what}")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PromptTemplateError(f"prompt templates {path}: cannot read it ({exc.strerror or exc})") from None
    data = _parse(raw, path)
    if data is None:
        raise PromptTemplateError(f"prompt templates {path}: the file is empty")
    if not isinstance(data, dict):
        raise PromptTemplateError(
            f"prompt templates {path}: expected a mapping of kind to template ({', '.join(KINDS)}), "
            f"got {type(data).__name__}"
        )
    return PromptTemplates(templates=data, source=str(path), sha256=hashlib.sha256(raw).hexdigest())


@functools.cache
def default_templates() -> PromptTemplates:
    """The project's templates (read once)."""
    return _load(DEFAULT_TEMPLATES_PATH)


# --------------------------------------------------------------------------- the project's prompts


def math_prompt(problem: str) -> str:
    """The user prompt of a math (AIME) problem."""
    return default_templates().render("math", problem)


def format_choices(choices: Sequence[str]) -> str:
    """``A) ...`` lines for up to four choices."""
    if not 1 <= len(choices) <= len(LETTERS):
        raise ValueError(f"format_choices: expected 1 to {len(LETTERS)} choices, got {len(choices)}")
    return "\n".join(f"{LETTERS[i]}) {choice.strip()}" for i, choice in enumerate(choices))


def gpqa_problem(question: str, choices: Sequence[str]) -> str:
    """The ``{problem}`` of a multiple-choice question: the question, a blank line, its choice lines."""
    return f"{question.strip()}\n\n{format_choices(choices)}"


def gpqa_prompt(question: str, choices: Sequence[str]) -> str:
    """The user prompt of a multiple-choice question with its (already shuffled) choices."""
    return default_templates().render("gpqa", gpqa_problem(question, choices))


def code_prompt(question: str, starter_code: str = "") -> str:
    """The user prompt of a programming problem (stdin program or starter-code function)."""
    return default_templates().render("code", question, starter_code=starter_code)


# --------------------------------------------------------------------------- GPQA's shuffle


def shuffle_seed(seed: int, sample_id: str) -> int:
    """A per-sample seed derived from the run seed and the sample id.

    Uses sha256, not ``hash()``, so it is the same in every process and Python version
    (``hash`` of a string changes with ``PYTHONHASHSEED``).
    """
    digest = hashlib.sha256(f"{seed}:{sample_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def shuffle_choices(correct: str, incorrect: Sequence[str], *, seed: int, sample_id: str) -> tuple[list[str], str]:
    """Shuffle the correct answer among the incorrect ones; return ``(choices, target_letter)``.

    The order depends only on ``seed`` and ``sample_id``: the same sample is laid out
    the same way in every run, and the target letter follows the correct answer.
    """
    choices = [correct, *incorrect]
    if len(choices) > len(LETTERS):
        raise ValueError(f"shuffle_choices: at most {len(LETTERS)} choices, got {len(choices)}")
    order = list(range(len(choices)))
    random.Random(shuffle_seed(seed, sample_id)).shuffle(order)
    shuffled = [choices[i] for i in order]
    return shuffled, LETTERS[order.index(0)]
