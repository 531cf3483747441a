"""APPS-format coding problems (Hendrycks et al. 2021) as search tasks, judged in the sandbox.

A problem directory holds `question.txt`, `input_output.json` (`{"inputs": [...], "outputs": [...]}`
and an optional `"fn_name"`) and, optionally, `starter_code.py`. Without `fn_name` a program reads a
test's input from stdin and prints its answer (APPS may store either as a list of lines); with it,
the program defines the function `fn_name`, or that method of `class Solution` when it has that
class, which is called with the test's input as its list of arguments and returns the answer.

Each test is one sandbox `Program`, whose pass is `f(g()) is True`. `g` is a harness that runs the
candidate's source on the test's input and returns what it printed or returned; `f` compares that
with the expected output and, when they differ, prints what it got: the verdict's output then holds
the candidate's wrong result. When the candidate raises, the harness prints the candidate's own
traceback (the verdict's detail shows only the harness's frames) and raises again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from codeplay_lightning.execution import Program, Sandbox, Verdict
from codeplay_lightning.search.tasks import DescribedTask, Feedback, describe_wrong_result

EXAMPLE_CHARS = 2000  # per part of a failing example: APPS inputs can run to megabytes

_HARNESS_HEAD = '''
import contextlib
import io
import sys
import traceback


def report(error):
    """Print the candidate's own traceback, its last four frames with their source lines."""
    lines = SOURCE.splitlines()
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename == "<solution>"]
    if frames:
        print("Traceback (most recent call last):")
    for frame in frames[-4:]:
        text = lines[frame.lineno - 1].strip() if 0 < frame.lineno <= len(lines) else ""
        print(f'  File "<solution>", line {frame.lineno}, in {frame.name}\\n    {text}')
    print(f"{type(error).__name__}: {error}")
'''

# Byte-backed streams, so that `sys.stdin.buffer` and `sys.stdout.buffer` work as on a judge. There is
# no site module in the sandbox, hence no builtin exit(): the program gets sys.exit under that name.
_STDIO_HARNESS = (
    _HARNESS_HEAD
    + """

def g():
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    saved_stdin, sys.stdin = sys.stdin, io.TextIOWrapper(io.BytesIO(STDIN.encode()), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
            exec(compile(SOURCE, "<solution>", "exec"), {"__name__": "__main__", "exit": sys.exit, "quit": sys.exit})
    except SystemExit:
        pass
    except Exception as error:
        report(error)
        raise
    finally:
        sys.stdin = saved_stdin
    stdout.flush()
    return stdout.buffer.getvalue().decode(errors="replace")
"""
)

# Not run as __main__, so that a demo under `if __name__ == "__main__":` stays out of the way. The
# typing names come first, as on LeetCode, whose starter code uses List without importing it.
_CALL_HARNESS = (
    _HARNESS_HEAD
    + """

def g():
    namespace = {"__name__": "solution"}
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            exec("from typing import *", namespace)
            exec(compile(SOURCE, "<solution>", "exec"), namespace)
            if "Solution" in namespace:
                function = getattr(namespace["Solution"](), FN_NAME)
            elif FN_NAME in namespace:
                function = namespace[FN_NAME]
            else:
                raise NameError(f"the program defines no function {FN_NAME}")
            result = function(*ARGS)
            return list(result) if isinstance(result, tuple) else result  # as APPS's own judge compares
    except Exception as error:
        report(error)
        raise
"""
)

_STDIO_CHECK = '''

def lines(text):
    """The lines without trailing spaces, trailing blank lines dropped."""
    stripped = [line.rstrip() for line in text.split("\\n")]
    while stripped and not stripped[-1]:
        stripped.pop()
    return stripped


def f(x):
    if lines(x) == lines(EXPECTED):
        return True
    print(x, end="")
    return False
'''

# APPS stores most expected return values wrapped in a one-element list.
_CALL_CHECK = """

def f(x):
    if x == EXPECTED or [x] == EXPECTED:
        return True
    print(repr(x))
    return False
"""


class AppsTask(DescribedTask):
    """The APPS problem in `directory` (see the module docstring); `name` is the directory's name.

    A candidate program scores the fraction of tests it passes. Its failing example, for the improve
    prompt, comes from the first half of the tests only (paper §5.2), so that the second half stays
    unseen: a candidate cannot pass it by printing the answers it was shown."""

    def __init__(self, directory: Path | str, sandbox: Sandbox):
        directory = Path(directory)
        self.name, self.sandbox = directory.name, sandbox
        for required in ("question.txt", "input_output.json"):
            if not (directory / required).is_file():
                raise ValueError(f"APPS problem {directory}: no {required}")
        question = (directory / "question.txt").read_text()
        starter = directory / "starter_code.py"
        self.root_code = starter.read_text() if starter.is_file() else ""
        try:
            spec = json.loads((directory / "input_output.json").read_text())
        except ValueError as error:
            raise ValueError(f"APPS problem {directory}: input_output.json is not JSON ({error})") from None
        self.fn_name, self.tests = _read_tests(spec, f"APPS problem {directory}")
        self.visible_tests = (len(self.tests) + 1) // 2  # the first half, rounded up
        self.description = _describe(question, self.root_code, self.fn_name)

    def test_program(self, program: str, index: int) -> Program:
        """The sandbox program that runs `program` on test `index`."""
        test_input, expected = self.tests[index]
        if self.fn_name is None:
            g = f"SOURCE = {program!r}\nSTDIN = {test_input!r}\n{_STDIO_HARNESS}"
            f = f"EXPECTED = {expected!r}\n{_STDIO_CHECK}"
        else:
            g = f"SOURCE = {program!r}\nFN_NAME = {self.fn_name!r}\nARGS = {test_input!r}\n{_CALL_HARNESS}"
            f = f"EXPECTED = {expected!r}\n{_CALL_CHECK}"
        return Program(f=f, g=g, name=f"{self.name}:{index}")  # f has no annotation: no answer type check

    def evaluate(self, program: str) -> Feedback:
        """Every test in one sandbox call, so that the wardens run them in parallel. Only a program
        that does not compile is buggy, as in the GIF-MCTS authors' APPS simulator: an error or a
        timeout on some tests depends on the input, and the program keeps the score of the rest."""
        try:
            compile(program, "<solution>", "exec", dont_inherit=True)  # compiling runs none of it
        except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
            return Feedback(0.0, buggy=True, error=f"{type(error).__name__}: {error}")
        verdicts = self.sandbox.verify([self.test_program(program, index) for index in range(len(self.tests))])
        score = sum(verdict.passed for verdict in verdicts) / len(verdicts)
        failed = [index for index, verdict in enumerate(verdicts) if not verdict.passed]
        if not failed:
            return Feedback(score, buggy=False)
        if failed[0] < self.visible_tests:
            return Feedback(score, buggy=False, failing_example=self.wrong_result(failed[0], verdicts[failed[0]]))
        hidden = len(self.tests) - self.visible_tests
        example = (
            f"The program passes all {self.visible_tests} tests that can be shown, but fails {len(failed)} "
            f"of the {hidden} hidden tests. Look for cases it does not handle yet."
        )
        return Feedback(score, buggy=False, failing_example=example)

    def error_text(self, verdict: Verdict) -> str:
        """A test the program raised on or ran too long for: its traceback as the harness printed it,
        else the sandbox's word."""
        if verdict.status == "timeout":
            return (
                f"Timeout: the program ran longer than {self.sandbox.timeout:g} s on a test "
                "(an endless loop, or too slow)"
            )
        return verdict.output.strip() or verdict.detail

    def wrong_result(self, index: int, verdict: Verdict) -> str:
        """Test `index` as the improve prompt shows it: what the program printed or returned, or its
        error when it raised or ran out of time."""
        test_input, expected = self.tests[index]
        got = verdict.output if verdict.status == "fail" else self.error_text(verdict)
        if self.fn_name is None:
            return describe_wrong_result(_clip(test_input), _clip(expected), _clip(got) or "(no output)")
        call = f"{self.fn_name}({', '.join(map(repr, test_input))})"
        return describe_wrong_result(_clip(call), _clip(repr(expected)), _clip(got))


def load_apps(path: Path | str, sandbox: Sandbox) -> list[AppsTask]:
    """The APPS problems at `path`: one problem directory, or a directory of them (sorted by name)."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path} is not a directory")
    if (path / "question.txt").exists() or (path / "input_output.json").exists():
        return [AppsTask(path, sandbox)]
    problems = sorted((child for child in path.iterdir() if child.is_dir()), key=lambda child: child.name)
    if not problems:
        raise ValueError(f"{path} is neither an APPS problem directory nor a directory of them")
    return [AppsTask(problem, sandbox) for problem in problems]


def _read_tests(spec, where: str) -> tuple[str | None, list[tuple[str | list, object]]]:
    """(fn_name, [(input, expected output)]) from input_output.json, with stdin/stdout text joined."""
    if not (isinstance(spec, dict) and isinstance(spec.get("inputs"), list) and isinstance(spec.get("outputs"), list)):
        raise ValueError(f'{where}: input_output.json needs the lists "inputs" and "outputs"')
    inputs, outputs, fn_name = spec["inputs"], spec["outputs"], spec.get("fn_name")
    if len(inputs) != len(outputs):
        raise ValueError(f"{where}: {len(inputs)} inputs but {len(outputs)} outputs")
    if not inputs:
        raise ValueError(f"{where}: no tests")
    if fn_name is not None:
        if not isinstance(fn_name, str) or not fn_name.isidentifier():
            raise ValueError(f"{where}: fn_name {fn_name!r} is not a Python name")
        if not all(isinstance(arguments, list) for arguments in inputs):
            raise ValueError(f"{where}: every input of a call-based problem must be the list of its arguments")
        return fn_name, list(zip(inputs, outputs))
    if not all(_is_text(item) for item in inputs + outputs):
        raise ValueError(
            f"{where}: every input and output of a stdin/stdout problem must be text (a string or a list of lines)"
        )
    return None, [(_text(test_input), _text(expected)) for test_input, expected in zip(inputs, outputs)]


def _is_text(item) -> bool:
    return isinstance(item, str) or isinstance(item, list) and all(isinstance(line, str) for line in item)


def _text(item: str | list[str]) -> str:
    return item if isinstance(item, str) else "\n".join(item)


def _describe(question: str, starter_code: str, fn_name: str | None) -> str:
    if fn_name is None:
        usage = "Read the input from standard input (stdin) and print the output to standard output (stdout)."
    elif re.search(r"^class Solution\b", starter_code, re.MULTILINE):
        usage = (
            f"Write the method `{fn_name}` of `class Solution`: each test calls `Solution().{fn_name}(...)` "
            "with its arguments and checks the value it returns."
        )
    else:
        usage = (
            f"Write the function `{fn_name}`: each test calls it with its arguments and checks the value it returns."
        )
    starter = f"\n\nStart from this code:\n```python\n{starter_code.rstrip()}\n```" if starter_code.strip() else ""
    return f"{question.strip()}\n\n{usage}{starter}"


def _clip(text: str) -> str:
    text = text.rstrip("\n")
    if len(text) <= EXAMPLE_CHARS:
        return text
    return f"{text[:EXAMPLE_CHARS]}\n[... {len(text) - EXAMPLE_CHARS} more characters]"
