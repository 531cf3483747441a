"""Tasks for the code search: a description, the generate / improve / fix prompts, and an evaluator.

The prompts follow the structure of the paper's appendix J (figures 3-5), reworded: generate shows
the task and the code so far and lets the LLM continue it inside an open ```python fence; improve
shows the full program and one wrong result and asks for an explanation, the faulty part, a fix and
the corrected program; fix does the same with the error instead of a wrong result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from codeplay_lightning.execution import Program, Sandbox
from codeplay_lightning.puzzles import Puzzle

_ROLE = (
    "You are an experienced Python programmer. You are given a task and {what}. "
    "{job} You are scored on the fraction of tests your program passes.\n\n"
)
_STEPS_IMPROVE = (
    "Answer in four parts: explain how the program's result differs from the expected one; "
    "point out the code responsible and why its logic is wrong; propose a concrete fix; "
    "then write the whole corrected program. Use this format:\n"
    "## What went wrong\n...\n## Where and why\n...\n## How to fix it\n...\n"
    "## Corrected program\n```python\n...\n```\n\n"
)
_STEPS_FIX = (
    "Answer in three parts: explain the error and the code responsible for it; propose how to "
    "fix it; then write the whole corrected program. Use this format:\n"
    "## What went wrong\n...\n## How to fix it\n...\n"
    "## Corrected program\n```python\n...\n```\n\n"
)


def generate_prompt(description: str, code_so_far: str) -> str:
    """Paper fig. 3: the completion continues `code_so_far` inside an open code fence (at an empty
    root, the program starts there)."""
    if code_so_far.strip():
        role = _ROLE.format(
            what="the beginning of a program for it",
            job="Continue the program from where it stops, writing all the missing code, so "
            "that it does what the task asks without errors.",
        )
    else:
        role = _ROLE.format(what="nothing more", job="Write a program that does what the task asks without errors.")
    return f"{role}## Task\n{description}\n\n## Program\n```python\n{code_so_far}"


def improve_prompt(description: str, program: str, failing_example: str) -> str:
    """Paper fig. 4: full program + one example it gets wrong, with chain-of-thought sections."""
    role = _ROLE.format(
        what="a program for it that gives a wrong result", job="Rewrite the program so that it does what the task asks."
    )
    return (
        f"{role}## Task\n{description}\n\n{_STEPS_IMPROVE}## Program\n```python\n{program.rstrip()}\n```\n\n"
        f"## A wrong result\n{failing_example}\n\n## What went wrong\n"
    )


def fix_prompt(description: str, program: str, error: str) -> str:
    """Paper fig. 5: full program + the error it raised, with chain-of-thought sections."""
    role = _ROLE.format(
        what="a program for it that fails with an error",
        job="Rewrite the program so that it runs without errors and does what the task asks.",
    )
    return (
        f"{role}## Task\n{description}\n\n{_STEPS_FIX}## Program\n```python\n{program.rstrip()}\n```\n\n"
        f"## Error\n{error}\n\n## What went wrong\n"
    )


_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def continuation(completion: str) -> str:
    """The code of a generate completion: everything before the fence that closes the code block."""
    return completion.split("```", 1)[0]


def generated_program(code_so_far: str, completion: str) -> str:
    """The program a generate completion makes. A completion model continues the open fence of the
    prompt: `code_so_far` + its text up to the closing (bare) fence. A chat model answers anew (ours):
    when the completion starts with a fence, or its first fence opens a ```python block after some
    prose, that block is the code, taken whole when it restates the code so far, else appended to it."""
    first_fence = completion.find("```")
    opening = _FENCE.match(completion, first_fence) if first_fence >= 0 else None
    chat_answer = opening is not None and (
        not completion[:first_fence].strip() or completion[first_fence:].startswith(("```python", "```py"))
    )
    if not chat_answer:
        return code_so_far + continuation(completion)
    code = opening.group(1)
    first_line = code_so_far.strip().split("\n", 1)[0]
    return code if first_line and code.lstrip().startswith(first_line) else code_so_far + code


def extract_code(completion: str) -> str:
    """The program in an improve / fix completion: the last fenced code block (an unclosed last fence
    runs to the end); the whole completion when it has no fence."""
    blocks = _FENCE.findall(completion)
    return blocks[-1] if blocks else completion


@dataclass(frozen=True)
class Feedback:
    """A candidate program run on a task's tests: the search's value and the improve or fix prompt's content."""

    score: float  # in [0, 1]: the fraction of tests passed (paper §4's accuracy)
    buggy: bool  # the program did not run (syntax error, exception, timeout, memory)
    error: str = ""  # the error, for the fix prompt
    failing_example: str | None = None  # one wrong result, for the improve prompt


def describe_wrong_result(input_text: str, expected: str, got: str) -> str:
    """One wrong result as the improve prompt shows it: the input, the expected and the actual result
    (paper fig. 4's input, ground-truth output and incorrect output)."""
    return f"Input:\n{input_text}\nExpected:\n{expected}\nGot:\n{got}"


class Task(Protocol):
    description: str
    root_code: str  # the root node's state: what the first generate continues

    def generate_prompt(self, code_so_far: str) -> str: ...

    def improve_prompt(self, program: str, failing_example: str) -> str: ...

    def fix_prompt(self, program: str, error: str) -> str: ...

    def evaluate(self, program: str) -> Feedback: ...


class DescribedTask:
    """The three prompts of a task built from its `description` (every task here words them alike)."""

    description: str

    def generate_prompt(self, code_so_far: str) -> str:
        return generate_prompt(self.description, code_so_far)

    def improve_prompt(self, program: str, failing_example: str) -> str:
        return improve_prompt(self.description, program, failing_example)

    def fix_prompt(self, program: str, error: str) -> str:
        return fix_prompt(self.description, program, error)


class P3Task(DescribedTask):
    """A Python Programming Puzzle: a candidate program is the source of `g`, scored 1 when the sandbox
    finds `f(g()) is True` (with the answer's type checked), else 0. Never executed in this process."""

    root_code = "def g():\n"

    def __init__(self, puzzle: Puzzle, sandbox: Sandbox):
        self.puzzle, self.sandbox = puzzle, sandbox
        self.judge_faults = 0  # programs the sandbox failed to judge (its own fault): scored as buggy, and counted
        self.description = (
            "Write a Python function `g()` with no arguments that returns an answer `x` "
            "for which `f(x)` is `True`, where `f` is:\n"
            f"```python\n{puzzle.f.rstrip()}\n```"
        )

    def evaluate(self, program: str) -> Feedback:
        candidate = Program(f=self.puzzle.f, g=program, ans_type=self.puzzle.ans_type, name=self.puzzle.name)
        verdict = self.sandbox.verify([candidate])[0]
        self.judge_faults += verdict.judge_fault
        if verdict.status == "pass":
            return Feedback(score=1.0, buggy=False)
        if verdict.status == "fail" and verdict.returned:
            example = describe_wrong_result(
                "none (g takes no arguments)",
                "f(answer) to be True",
                f"g() returned {verdict.answer}, and f returned {verdict.returned} for it",
            )
            return Feedback(score=0.0, buggy=False, failing_example=example)
        if verdict.status == "fail":  # "answer ... is not of type ...": the whole story already
            return Feedback(score=0.0, buggy=False, failing_example=verdict.detail)
        return Feedback(score=0.0, buggy=True, error=verdict.detail or verdict.status)
