"""The training reward for code, by the judge: the official grader (lenient) or the reference's grading.

The reference's training reward for code is ``code_math.compute_score`` (verl
``utils/reward_score/livecodebench/code_math.py`` at Open-CLEANER commit 91e40ad): -1 without a
```` ```python ```` block in the response after its first ``</think>`` (lines 197-198, 311-313) or when
its last block does not parse (316-320), else the fraction of tests (365) whose whole stdout, stripped,
equals the expected output (code-judge ``app/worker_manager.py`` line 77), a functional test's input
given on stdin (335).
"""

from __future__ import annotations

import json

import pytest

from harness.benchmarks.problem import Problem
from trainers.core.reward import compute_reward


def fenced(code: str) -> str:
    return f"Here it is.\n```python\n{code}```\n"


# LeetCode-style, as the LCB fixture's functional problem: the official grader calls Solution.addToEvery,
# the reference runs the program as a script with the test's input on stdin.
LEETCODE = Problem(
    "leetcode-add",
    "Add k to every element.",
    kind="code",
    tests=[
        {
            "input": json.dumps(nums) + "\n" + str(k),
            "output": json.dumps([x + k for x in nums]),
            "testtype": "functional",
        }
        for nums, k in [([1, 2], 3), ([0], 0), ([-5, 5, 9], 2)]
    ],
    fn_name="addToEvery",
)
SOLUTION = "class Solution:\n    def addToEvery(self, nums, k):\n        return [x + k for x in nums]\n"

# stdin: 2.5 for an expected 2.500000 passes the official grader's numeric comparison, not the exact one
MEAN = Problem(
    "mean",
    "Print the mean.",
    kind="code",
    tests=[
        {"input": "2\n2 3\n", "output": "2.500000\n", "testtype": "stdin"},
        {"input": "1\n7\n", "output": "7.000000\n", "testtype": "stdin"},
        {"input": "3\n1 2 3\n", "output": "2.000000\n", "testtype": "stdin"},
    ],
)
SHORT = "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) / n)\n"
EXACT = "n = int(input())\nxs = list(map(int, input().split()))\nprint(f'{sum(xs) / n:.6f}')\n"


async def test_the_judges_grade_code_as_their_graders_do(local_sandbox) -> None:
    official = await compute_reward(LEETCODE, fenced(SOLUTION), local_sandbox, lenient=True)
    reference = await compute_reward(LEETCODE, fenced(SOLUTION), local_sandbox, lenient=False)
    assert (official.reward, official.correct) == (1.0, True)
    assert (reference.reward, reference.score, reference.correct) == (0.0, 0.0, False)  # nothing printed
    assert (await compute_reward(MEAN, fenced(SHORT), local_sandbox, lenient=True)).reward == 1.0
    assert (await compute_reward(MEAN, fenced(SHORT), local_sandbox, lenient=False)).reward == pytest.approx(0.0)
    exact = await compute_reward(MEAN, fenced(EXACT), local_sandbox, lenient=False)
    assert (exact.reward, exact.correct) == (1.0, True)


async def test_the_reference_judge_reads_the_whole_response(local_sandbox) -> None:
    # the last block of the whole response counts, and one after </think> only; an unfenced or broken one is -1
    response = fenced("print('draft')\n") + "Tool output: ok\n" + fenced(EXACT)
    assert (await compute_reward(MEAN, response, local_sandbox, lenient=False)).reward == 1.0
    thought = fenced(EXACT) + "</think>The answer is above."
    for judged in (thought, "print(1)", fenced("print(1\n")):
        outcome = await compute_reward(MEAN, judged, local_sandbox, lenient=False)
        assert (outcome.reward, outcome.score, outcome.correct) == (-1.0, 0.0, False)
    # the official grader reads the final block and keeps -1 for a missing or broken one
    for judged in ("print(1)", fenced("print(1\n")):
        assert (await compute_reward(MEAN, judged, local_sandbox, lenient=True)).reward == -1.0
