"""Answer extraction and scoring for the math, GPQA and code benchmarks.

Two judges live here, on purpose side by side:

- **Evaluation** (:func:`math_correct`, :func:`gpqa_correct`, :func:`lenient_reward`)
  judges *equivalence*: an equivalent number, fraction or expression in the last
  ``\\boxed{}`` is right (``025`` equals ``25``, ``1,000`` equals ``1000``,
  ``\\frac{1}{2}`` equals ``0.5``), decided by math-verify, the field's library.
- **Reference training reward** (:func:`strict_reward`) reproduces verl's ``math_dapo``
  strict box check, which the CLEANER recipe trains with: it looks only at the last
  :data:`STRICT_WINDOW` characters of the completion, takes the last ``\\boxed{`` there
  (nothing else: no ``\\fbox``, no ``\\boxed 5``) and compares its content with the target
  as strings. ``\\boxed{025}`` against ``25`` scores -1 there. The reference also reports
  its accuracy with this check, applied to the whole decoded response
  (:func:`reference_verdict` over :func:`harness.core.response.response_text`).

The light normalisation of :func:`strict_reward` is deliberately minimal (see
:func:`strict_normalize`): it cleans the target (a dataset field) and leaves the box
content exactly as the model wrote it, so ``\\boxed{ 25 }`` is not ``25``.

Nothing here imports Inspect; the Inspect scorers and the training reward are thin
wrappers around these functions. Code completions are graded in :mod:`harness.benchmarks.lcb`.
"""

from __future__ import annotations

import json
import logging
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from harness.core.kinds import Kind

logger = logging.getLogger(__name__)

#: The strict reward sees only this many trailing characters of the completion: verl's
#: ``math_dapo.compute_score`` keeps the last 300, and its strict box check the last 100 of those.
STRICT_WINDOW = 100

#: Seconds math-verify may spend on one comparison (parsing both sides, then verifying).
VERIFY_TIMEOUT = 5

#: Box commands recognised by :func:`extract_boxed`.
_BOX_COMMANDS = ("\\boxed", "\\fbox")


# --------------------------------------------------------------------------- boxes


def _box_spans(text: str) -> list[tuple[int, int, str]]:
    """Every ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed 5`` in ``text``.

    Returns ``(start, end, content)`` triples in order of appearance; ``end`` is the
    index just past the box. Braces nest; a box whose braces never close is not a box.
    """
    spans: list[tuple[int, int, str]] = []
    pattern = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
    for match in pattern.finditer(text):
        i = match.end()
        if i < len(text) and text[i] == "{":
            depth = 0
            for j in range(i, len(text)):
                ch = text[j]
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        spans.append((match.start(), j + 1, text[i + 1 : j]))
                        break
        elif i < len(text) and text[i] == " ":
            # "\boxed 5": the argument is the next run of non-space characters, as in TeX.
            rest = re.match(r" +([^\s$]+)", text[i:])
            if rest:
                spans.append((match.start(), i + rest.end(), rest.group(1)))
    return spans


def extract_boxed(text: str | None) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, verbatim.

    Nested braces are handled (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``). The
    content is returned exactly as written, whitespace included, because the strict
    reward compares it as a string; callers that judge equivalence strip it themselves.
    ``None`` when there is no complete box.
    """
    if not text:
        return None
    spans = _box_spans(text)
    return spans[-1][2] if spans else None


# --------------------------------------------------------------------------- math


@dataclass(frozen=True)
class Verdict:
    """The outcome of one math comparison.

    ``timed_out`` says that math-verify (or the backstop around its worker process) gave
    up before it found the answer equivalent: the answer then counts as not equivalent,
    but that "no" is the judge's silence, not a judgement. It is never set together with
    ``equivalent``: a comparison that proves equivalence in one of its attempts is decided
    whatever another attempt did.
    """

    equivalent: bool
    timed_out: bool = False


class _VerifyWorker:
    """The :mod:`harness.benchmarks.verify_worker` child: comparisons from threads other than the main one go there."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.benchmarks.verify_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        if self._read(120.0) is None:  # a fresh interpreter importing sympy: seconds, once
            self.kill()
            raise RuntimeError("the math-verify worker (python -m harness.benchmarks.verify_worker) did not start")

    def _read(self, timeout: float) -> dict | None:
        """The worker's next reply, or None when it gives none within ``timeout`` seconds."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            line = self.proc.stdout.readline()
            if not line:  # the worker died
                return None
            if line.strip():
                return json.loads(line)

    def ask(self, answer: str, target: str, timeout: float) -> dict | None:
        assert self.proc.stdin is not None
        request = {"answer": answer, "target": str(target), "timeout": VERIFY_TIMEOUT}
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError:
            return None
        return self._read(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


_worker_lock = threading.Lock()
_worker: _VerifyWorker | None = None


def _equivalent_in_worker(answer: str, target: str) -> Verdict:
    """:func:`_equivalent` in the worker process, killed (and restarted next time) when it does not answer.

    A worker that does not answer in time is a timeout; a comparison that raised in the
    worker is logged and counts as not equivalent (not as a timeout).
    """
    global _worker
    with _worker_lock:  # one comparison at a time per process: the worker answers in order
        if _worker is None or _worker.proc.poll() is not None:
            _worker = _VerifyWorker()
        # three parses' and a verification's worth of math-verify's own timeouts, then the backstop
        reply = _worker.ask(answer, target, timeout=3 * VERIFY_TIMEOUT + 2)
        if reply is None:
            _worker.kill()
            _worker = None
            return Verdict(False, timed_out=True)
    if "error" in reply:
        logger.warning("math-verify failed comparing answer %r with target %r: %s", answer, target, reply["error"])
    return Verdict(bool(reply.get("equivalent", False)), timed_out=bool(reply.get("timed_out", False)))


def _as_latex_box(content: str) -> str:
    return f"$\\boxed{{{content}}}$"


def _gold_text(target: str) -> str:
    target = str(target).strip()
    if target.startswith("$") or "\\boxed" in target:
        return target
    return f"${target}$"


def _misuse_from_a_thread(exc: BaseException) -> bool:
    """Whether ``exc`` is math-verify refusing to run its SIGALRM timeouts outside the main thread."""
    return isinstance(exc, ValueError) and "signal only works in main thread" in str(exc.__cause__ or exc)


def _parse(text: str, timeout: int | None) -> tuple[list, bool]:
    """math-verify's ``parse`` of ``text`` and whether it timed out.

    Exactly ``parse(text, parsing_timeout=timeout)``, which answers ``[]`` on any failure,
    a timeout included; ``raise_on_error`` only lets a timeout be told apart from the rest.
    """
    from math_verify import parse
    from math_verify.errors import TimeoutException

    try:
        return parse(text, parsing_timeout=timeout, raise_on_error=True), False
    except TimeoutException:
        return [], True
    except Exception as exc:  # noqa: BLE001 - parse without raise_on_error answers [] for every error
        if _misuse_from_a_thread(exc):
            raise
        return [], False


def _verify(gold: list, pred: list, timeout: int | None) -> tuple[bool, bool]:
    """math-verify's ``verify(gold, pred)`` and whether one of its comparisons timed out.

    ``verify`` tries every (gold, prediction) pair, each under its own timeout, and is
    true when one pair matches; a pair that fails or times out counts as no match. The
    pairs are tried here one at a time, in the same order, so that a timeout is seen.
    """
    from itertools import product

    from math_verify import verify
    from math_verify.errors import TimeoutException

    timed_out = False
    for g, p in product(gold, pred):
        try:
            if verify(g, p, timeout_seconds=timeout, raise_on_error=True):
                return True, False
        except TimeoutException:
            timed_out = True
        except Exception as exc:  # noqa: BLE001 - verify without raise_on_error counts an error as no match
            if _misuse_from_a_thread(exc):
                raise
    return False, timed_out


def _equivalent(answer: str, target: str, timeout: int | None) -> Verdict:
    """One comparison in this thread, which must be the main one when ``timeout`` is set (SIGALRM)."""
    gold, gold_timed_out = _parse(_gold_text(target), timeout)
    pred, pred_timed_out = _parse(_as_latex_box(answer.strip()), timeout)
    if not gold or not pred:
        # Neither side parsed into mathematics: fall back to a plain string comparison.
        same = answer.strip() == str(target).strip() and bool(answer.strip())
        return Verdict(same, timed_out=not same and (gold_timed_out or pred_timed_out))
    equivalent, timed_out = _verify(gold, pred, timeout)
    return Verdict(equivalent, timed_out=timed_out)


def compare_math(answer: str, target: str) -> Verdict:
    """Whether the LaTeX/plain ``answer`` is mathematically equivalent to ``target``, and whether the judge gave up.

    Bounded in every thread: math-verify's own timeouts use SIGALRM, which works only in
    the main thread, so from any other thread (a Ray actor, a thread pool) the comparison
    runs in the main thread of a worker process (:mod:`harness.benchmarks.verify_worker`), where those
    timeouts work; should the worker still not answer, it is killed. Either way the answer
    then counts as not equivalent, with ``timed_out`` set, and a warning names the answer
    and the target. A pathological answer such as ``9^{9^{9^{9^{9}}}}`` holds the GIL while
    sympy works on it, so a thread could not be abandoned instead.
    """
    if threading.current_thread() is threading.main_thread():
        verdict = _equivalent(answer, target, VERIFY_TIMEOUT)
    else:
        verdict = _equivalent_in_worker(answer, target)
    if verdict.timed_out:
        logger.warning(
            "math-verify timed out comparing answer %r with target %r: counted as not equivalent", answer, target
        )
    return verdict


def judge_math(completion: str | None, target: str) -> Verdict:
    """Evaluation judge for math, with the timeout said: is the last box of ``completion`` equivalent to ``target``?

    Only the last box counts (several boxes: the last wins; no box: wrong, and no timeout).
    The comparison is math-verify's (:func:`compare_math`).
    """
    answer = extract_boxed(completion)
    if answer is None or not answer.strip():
        return Verdict(False)
    return compare_math(answer, target)


def math_correct(completion: str | None, target: str) -> bool:
    """Evaluation judge for math: is the last box of ``completion`` equivalent to ``target``?

    Only the last box counts (several boxes: the last wins; no box: wrong). The
    comparison is math-verify's: ``\\boxed{025}`` and ``\\boxed{1,000}`` are right
    for ``25`` and ``1000``; ``\\boxed{0.5}`` is right for ``\\frac{1}{2}``.
    A comparison that timed out is not right (:func:`judge_math` says it timed out).
    """
    return judge_math(completion, target).equivalent


# --------------------------------------------------------------------------- gpqa

_LETTERS = "ABCD"
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf|textrm|mathtt|texttt)\s*\{([^{}]*)\}")
#: An explicit answer phrase; a bare "option X" / "choice X" is a mention, not an answer ("option D fails").
_ANSWER_PHRASE = re.compile(
    r"(?:final\s+answer|answer|correct\s+(?:option|choice|answer))"
    r"\s*(?:is|:|=)?\s*(?:is\s*)?[:\s]*\**\s*[\(\[]?\s*([A-D])\s*[\)\]]?(?![A-Za-z0-9])",
    re.IGNORECASE,
)


def _letter_of(content: str) -> str | None:
    """A single choice letter from box content such as ``C``, ``(C)``, ``\\text{C}``, ``C) 5 eV``."""
    text = content
    for _ in range(3):  # unwrap \text{\textbf{C}} and the like
        text = _TEXT_WRAPPER.sub(r"\1", text)
    text = text.strip().strip("$*").strip()
    m = re.fullmatch(r"[\(\[]?\s*([A-Da-d])\s*[\)\]]?\.?", text)
    if m:
        return m.group(1).upper()
    m = re.match(r"[\(\[]\s*([A-D])\s*[\)\]]|([A-D])\s*[\):.]\s", text + " ")
    if m:
        return (m.group(1) or m.group(2)).upper()
    return None


def gpqa_letter(completion: str | None) -> str | None:
    """The answer letter (A-D) of a multiple-choice completion, or ``None``.

    Accepted styles, in order of precedence: the last box (``\\boxed{C}``,
    ``\\boxed{(C)}``, ``\\boxed{\\text{C}}``, ``\\boxed{C) text}``), then the last
    explicit answer phrase (``The answer is C``, ``Answer: (C)``, ``final answer is **C**``,
    ``The correct option is C``). A letter only mentioned (``option D fails``, ``choice A``)
    is not an answer, so "The answer is B ... option D fails" is B.
    Lower-case letters count only inside a box, where nothing else could be meant.
    """
    if not completion:
        return None
    boxed = extract_boxed(completion)
    if boxed is not None:
        letter = _letter_of(boxed)
        if letter:
            return letter
    matches = list(_ANSWER_PHRASE.finditer(completion))
    for match in reversed(matches):
        letter = match.group(1)
        if letter.isupper():
            return letter
    return None


def gpqa_correct(completion: str | None, target: str) -> bool:
    """Evaluation judge for GPQA: the completion's letter is the target letter."""
    letter = gpqa_letter(completion)
    return letter is not None and letter == str(target).strip().upper()


# --------------------------------------------------------------------------- rewards


def strict_normalize(text: str) -> str:
    """The strict reward's light normalisation, applied to the target only.

    The target (a dataset field) is converted to ``str`` and stripped of surrounding
    whitespace and a single pair of ``$`` delimiters. The box content is NOT
    normalised: it is compared exactly as the model wrote it, as the reference does, so
    ``\\boxed{ 25 }``, ``\\boxed{25.0}``, ``\\boxed{025}`` and ``\\boxed{1,000}`` miss
    ``25``/``1000``.
    """
    text = str(text).strip()
    if len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = text[1:-1].strip()
    return text


def strict_box(text: str) -> str | None:
    """The content of the last ``\\boxed{`` in ``text``, as verl's strict check finds it.

    Only the literal ``\\boxed{`` counts. Its braces are matched from there; when they never
    close, there is no answer, even if an earlier box is complete.
    """
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + len("\\boxed{") : i]
    return None


def strict_reward(completion: str | None, target: str) -> float:
    """The reference training reward: +1 if the last box equals the target string, else -1.

    Exactly what verl's ``math_dapo`` strict box check accepts (:func:`strict_box` over the
    last :data:`STRICT_WINDOW` characters): a box followed by more than that much text is not
    seen, a box cut by the window is no box, and ``\\fbox`` is not read. Only the target is
    normalised (:func:`strict_normalize`). Works for math answers and for GPQA letters
    (``\\boxed{C}`` against ``C``).
    """
    answer = reference_answer(completion)
    if answer is None:
        return -1.0
    return 1.0 if answer == strict_normalize(target) else -1.0


def reference_answer(text: str | None) -> str | None:
    """The answer the strict check reads: :func:`strict_box` over the last :data:`STRICT_WINDOW` characters."""
    if not text:
        return None
    return strict_box(text[-STRICT_WINDOW:])


#: The one choice of judgement by problem kind: a kind here has its answer read from the text (its lenient check,
#: the evaluation judge); any other kind (``code``) is graded by running it (:mod:`harness.benchmarks.lcb`). The
#: evaluation's scorers, the training reward and the reference's verdict ask :func:`is_read` or :func:`lenient_check`.
READ_CHECKS: dict[Kind, Callable[[str | None, str], bool]] = {"math": math_correct, "gpqa": gpqa_correct}


def is_read(kind: Kind) -> bool:
    """Whether the answers of ``kind`` are read from the text (math, gpqa), not graded by running them (code)."""
    return kind in READ_CHECKS


def lenient_check(kind: Kind, where: str) -> Callable[[str | None, str], bool]:
    """The evaluation judge of a read kind; a ValueError naming ``where`` for a kind that is run."""
    check = READ_CHECKS.get(kind)
    if check is None:
        read = " or ".join(repr(k) for k in READ_CHECKS)
        raise ValueError(
            f"{where}: kind must be {read}, got {kind!r} (code is graded by running it: harness.benchmarks.lcb)"
        )
    return check


def reference_verdict(response: str | None, target: str, kind: Kind) -> bool:
    """The reference's accuracy judgement of a whole response: :func:`strict_reward` is +1.

    The reference reports accuracy with its training reward (the ``acc`` of verl's
    ``math_dapo.compute_score(..., strict_box_verify=True)``, called by the recipe's
    ``compute_score_outcome_reward`` for every data source without ``code`` in its name),
    applied to the whole decoded response: every assistant turn and the tool results
    between them (:func:`harness.core.response.response_text` builds that text). GPQA is
    judged by the same rule, the target being the correct letter: ``\\boxed{C}`` for ``C``.
    Code is graded by running it (:mod:`harness.benchmarks.lcb`), not here.
    """
    lenient_check(kind, "reference_verdict")
    return strict_reward(response, target) > 0


def lenient_reward(completion: str | None, target: str, kind: Kind = "math") -> float:
    """+1/-1 from the evaluation judge (equivalence) instead of string equality."""
    return 1.0 if lenient_check(kind, "lenient_reward")(completion, target) else -1.0


def is_correct(completion: str | None, target: str, kind: Kind) -> bool:
    """Evaluation judge by problem kind (math or gpqa)."""
    return lenient_check(kind, "is_correct")(completion, target)


# --------------------------------------------------------------------------- code

_CODE_FENCE = re.compile(r"```[ \t]*(?P<lang>[A-Za-z0-9_+-]*)[ \t]*\n(?P<body>.*?)```", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>.*?(?:</tool_call>|$)", re.DOTALL)


def extract_code(completion: str | None) -> str | None:
    """The solution program of a code completion: its last ```python block.

    Tool calls (``<tool_call>...</tool_call>``) are removed first, so code the model
    only ran as a test is not taken for its answer. ``py`` and ``python3`` fences count
    as python; when there is no python block, the last untagged block is used.
    ``None`` when there is no non-empty block.
    """
    if not completion:
        return None
    text = _TOOL_CALL.sub("", completion)
    python_blocks: list[str] = []
    bare_blocks: list[str] = []
    for match in _CODE_FENCE.finditer(text):
        body = match.group("body")
        if not body.strip():
            continue
        lang = match.group("lang").lower()
        if lang in ("python", "py", "python3"):
            python_blocks.append(body)
        elif lang == "":
            bare_blocks.append(body)
    if python_blocks:
        return python_blocks[-1]
    return bare_blocks[-1] if bare_blocks else None
