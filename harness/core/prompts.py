"""User prompts for each problem kind, and GPQA's stable choice shuffle.

The prompt is the only instruction the model gets about the answer format, so each
one states it plainly: math and GPQA answers go in ``\\boxed{}`` (what the scorers in
:mod:`harness.benchmarks.scoring` read), code goes in a final ```python block (what
:func:`harness.benchmarks.scoring.extract_code` reads). Every prompt mentions the python tool;
its calling convention is given by the system prompt / tool schema of
:mod:`harness.core.protocol`, not here.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

LETTERS = "ABCD"

MATH_TEMPLATE = """\
Solve the following math problem. You may use the python tool to compute or check \
intermediate results. Reason step by step, and put your final answer within \\boxed{{}}.

{problem}"""

GPQA_TEMPLATE = """\
Answer the following multiple-choice question. You may use the python tool for \
calculations. Reason step by step, then give the letter of your final answer \
(one of A, B, C, D) within \\boxed{{}}, for example \\boxed{{A}}.

{question}

{choices}"""

CODE_TEMPLATE = """\
Solve the following programming problem in Python 3. You may use the python tool to \
run and test your code before answering. {io_rule}

{question}
{starter}
Write your complete final solution in a single ```python code block at the end of \
your answer."""

CODE_STDIN_RULE = "Your program must read the input from standard input and write the answer to standard output."
CODE_STARTER_RULE = "Complete the starter code below; your solution is called through it, not through standard input."

STARTER_TEMPLATE = """
Use this starter code:
```python
{starter_code}
```
"""


def math_prompt(problem: str) -> str:
    """The user prompt of a math (AIME) problem."""
    return MATH_TEMPLATE.format(problem=problem.strip())


def format_choices(choices: Sequence[str]) -> str:
    """``A) ...`` lines for up to four choices."""
    if not 1 <= len(choices) <= len(LETTERS):
        raise ValueError(f"format_choices: expected 1 to {len(LETTERS)} choices, got {len(choices)}")
    return "\n".join(f"{LETTERS[i]}) {choice.strip()}" for i, choice in enumerate(choices))


def gpqa_prompt(question: str, choices: Sequence[str]) -> str:
    """The user prompt of a multiple-choice question with its (already shuffled) choices."""
    return GPQA_TEMPLATE.format(question=question.strip(), choices=format_choices(choices))


def code_prompt(question: str, starter_code: str = "") -> str:
    """The user prompt of a programming problem (stdin program or starter-code function)."""
    starter = STARTER_TEMPLATE.format(starter_code=starter_code.rstrip()) if starter_code.strip() else ""
    rule = CODE_STARTER_RULE if starter else CODE_STDIN_RULE
    return CODE_TEMPLATE.format(io_rule=rule, question=question.strip(), starter=starter)


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
