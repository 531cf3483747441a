"""AppsTask and load_apps on a real Sandbox, with the fixture problems in tests/fixtures/apps and small
problems written per test: "double" below, whose test i (of 6) reads i + 1 and expects 2·(i + 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import FIXTURES, ScriptedLLM

from codeplay_lightning.search import AppsTask, Feedback, GifMcts, GifMctsConfig, load_apps, run_searches
from codeplay_lightning.search.gif_mcts import IMPROVE

FIXTURES = FIXTURES / "apps"

PAIR_SUMS = "t = int(input())\nfor _ in range(t):\n    a, b = map(int, input().split())\n    print(a + b)\n"
PAIR_SUMS_BYTES = (
    "import sys\nnumbers = sys.stdin.buffer.read().split()\n"
    "for i in range(int(numbers[0])):\n"
    "    sys.stdout.buffer.write(b'%d\\n' % (int(numbers[2 * i + 1]) + int(numbers[2 * i + 2])))\n"
)
LONGEST_RUN = (
    "class Solution:\n    def longest_run(self, nums: List[int]) -> int:\n        best = run = 0\n"
    "        for i, x in enumerate(nums):\n            run = run + 1 if i and nums[i - 1] == x else 1\n"
    "            best = max(best, run)\n        return best\n"
)
REVERSE_WORDS = "def reverse_words(sentence):\n    return ' '.join(reversed(sentence.split()))\n"
WITH_DEMO = REVERSE_WORDS + "\nif __name__ == '__main__':\n    print(reverse_words(input()))\n"  # would fail if run


def write_problem(directory: Path, inputs: list, outputs: list, fn_name: str | None = None) -> Path:
    directory.mkdir(parents=True)
    (directory / "question.txt").write_text("A problem.\n")
    spec = {"inputs": inputs, "outputs": outputs} | ({"fn_name": fn_name} if fn_name else {})
    (directory / "input_output.json").write_text(json.dumps(spec))
    return directory


@pytest.fixture
def double(tmp_path, sandbox) -> AppsTask:
    numbers = range(1, 7)
    return AppsTask(
        write_problem(tmp_path / "double", [f"{n}\n" for n in numbers], [f"{2 * n}\n" for n in numbers]), sandbox
    )


# ---------------------------------------------------------------- scores and failing examples


@pytest.mark.parametrize(
    "problem, solution",
    [
        ("pair_sums", PAIR_SUMS),
        ("pair_sums", PAIR_SUMS_BYTES),
        ("longest_run", LONGEST_RUN),
        ("reverse_words", REVERSE_WORDS),
        ("reverse_words", WITH_DEMO),
    ],
)
def test_a_correct_solution_scores_1(sandbox, problem, solution):
    evaluation = AppsTask(FIXTURES / problem, sandbox).evaluate(solution)
    assert evaluation == Feedback(1.0, buggy=False)


def test_a_partly_right_solution_shows_its_first_failing_example_from_the_first_half(double):
    evaluation = double.evaluate("n = int(input())\nprint(0 if n in (2, 5) else 2 * n)\n")  # fails tests 1 and 4
    assert (evaluation.score, evaluation.buggy) == (4 / 6, False)
    assert evaluation.failing_example == "Input:\n2\nExpected:\n4\nGot:\n0"


def test_failures_in_the_second_half_only_are_reported_without_the_tests(double):
    evaluation = double.evaluate("n = int(input())\nprint(2 * n if n < 5 else 0)\n")  # fails tests 4 and 5
    assert (evaluation.score, evaluation.buggy) == (4 / 6, False)
    assert evaluation.failing_example == (
        "The program passes all 3 tests that can be shown, but fails 2 of the 3 "
        "hidden tests. Look for cases it does not handle yet."
    )


def test_a_call_based_failing_example_shows_the_call_and_the_returned_value(sandbox):
    evaluation = AppsTask(FIXTURES / "longest_run", sandbox).evaluate(
        "class Solution:\n    def longest_run(self, nums):\n        return len(nums)\n"
    )
    assert evaluation.score == 3 / 5
    assert evaluation.failing_example == "Input:\nlongest_run([1, 1, 2, 2, 2, 3])\nExpected:\n[3]\nGot:\n6"


def test_a_program_that_prints_nothing_gets_a_readable_example(double):
    assert double.evaluate("pass\n").failing_example == "Input:\n1\nExpected:\n2\nGot:\n(no output)"


# ---------------------------------------------------------------- errors: only a compile error is a bug


def test_a_crash_on_one_test_keeps_the_score_and_shows_the_programs_own_traceback(double):
    evaluation = double.evaluate("n = int(input())\nprint(2 * n // (n != 2))\n")  # divides by False for n = 2
    assert (evaluation.score, evaluation.buggy, evaluation.error) == (5 / 6, False, "")
    assert evaluation.failing_example == (
        'Input:\n2\nExpected:\n4\nGot:\nTraceback (most recent call last):\n  File "<solution>", line 2, in '
        "<module>\n    print(2 * n // (n != 2))\nZeroDivisionError: integer division or modulo by zero"
    )


def test_a_syntax_error_is_buggy(double):
    evaluation = double.evaluate("def main(:\n    pass\n")
    assert (evaluation.score, evaluation.buggy) == (0.0, True)
    assert evaluation.error.startswith("SyntaxError: ") and "line 1" in evaluation.error


def test_an_endless_loop_on_one_test_keeps_the_score(double):
    evaluation = double.evaluate("n = int(input())\nwhile n == 3:\n    pass\nprint(2 * n)\n")
    assert (evaluation.score, evaluation.buggy) == (5 / 6, False)
    assert evaluation.failing_example.startswith("Input:\n3\nExpected:\n6\nGot:\nTimeout: the program ran longer")


def test_a_call_based_program_without_the_function_scores_0_and_says_why(sandbox):
    evaluation = AppsTask(FIXTURES / "reverse_words", sandbox).evaluate("def reverse(sentence):\n    return ''\n")
    assert (evaluation.score, evaluation.buggy) == (0.0, False)
    assert evaluation.failing_example.endswith("NameError: the program defines no function reverse_words")


# ---------------------------------------------------------------- judging


def test_exit_ends_a_program_normally(double):
    assert double.evaluate("n = int(input())\nprint(2 * n)\nexit()\nprint('unreachable')\n").score == 1.0
    assert double.evaluate("import sys\nprint(2 * int(input()))\nsys.exit(3)\n").score == 1.0


def test_stdout_is_compared_line_by_line_without_trailing_whitespace(sandbox):
    task = AppsTask(FIXTURES / "pair_sums", sandbox)
    padded = PAIR_SUMS.replace("print(a + b)", "print(a + b, end='  \\n')") + "print()\nprint('   ')\n"
    assert task.evaluate(padded).score == 1.0
    one_line = "t = int(input())\nprint(*[sum(map(int, input().split())) for _ in range(t)])\n"
    assert task.evaluate(one_line).score == 2 / 5  # right only where t = 1


def test_a_returned_value_matches_the_expected_one_or_its_one_element_list(tmp_path, sandbox):
    problem = write_problem(tmp_path / "twice", [[2], [3], [[1]]], [[4], 6, [[1, 1]]], fn_name="twice")
    assert AppsTask(problem, sandbox).evaluate("def twice(x):\n    return x * 2\n").score == 1.0


def test_a_returned_tuple_compares_as_a_list_as_in_apps(tmp_path, sandbox):
    problem = write_problem(tmp_path / "pair", [[2], [3]], [[[2, 4]], [[3, 6]]], fn_name="pair")
    assert AppsTask(problem, sandbox).evaluate("def pair(x):\n    return x, x * 2\n").score == 1.0


def test_the_description_says_how_the_program_is_called(sandbox):
    longest_run, pair_sums, reverse_words = load_apps(FIXTURES, sandbox)
    assert pair_sums.root_code == "" and pair_sums.description.endswith("print the output to standard output (stdout).")
    assert pair_sums.generate_prompt(pair_sums.root_code).endswith("## Program\n```python\n")
    starter = "class Solution:\n    def longest_run(self, nums: List[int]) -> int:\n        "
    assert longest_run.root_code == starter and "`Solution().longest_run(...)`" in longest_run.description
    assert longest_run.description.endswith(f"```python\n{starter.rstrip()}\n```")
    assert reverse_words.root_code == "" and "Write the function `reverse_words`" in reverse_words.description


# ---------------------------------------------------------------- loading


def test_a_directory_of_problems_loads_in_name_order(tmp_path, sandbox):
    for name in ("b", "a10", "a2"):
        write_problem(tmp_path / name, ["1\n"], ["1\n"])
    (tmp_path / "notes.txt").write_text("not a problem")
    assert [task.name for task in load_apps(tmp_path, sandbox)] == ["a10", "a2", "b"]
    assert [task.name for task in load_apps(FIXTURES, sandbox)] == ["longest_run", "pair_sums", "reverse_words"]
    [single] = load_apps(FIXTURES / "pair_sums", sandbox)
    assert single.name == "pair_sums" and single.tests[1] == ("1\n-5 5", "0")  # lists of lines are joined


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda problem: (problem / "question.txt").unlink(), "no question.txt"),
        (lambda problem: (problem / "input_output.json").unlink(), "no input_output.json"),
        (lambda problem: (problem / "input_output.json").write_text("{"), "input_output.json is not JSON"),
        (
            lambda problem: (problem / "input_output.json").write_text('{"inputs": ["1"]}'),
            'lists "inputs" and "outputs"',
        ),
        (
            lambda problem: (problem / "input_output.json").write_text('{"inputs": ["1", "2"], "outputs": ["1"]}'),
            "2 inputs but 1 outputs",
        ),
        (lambda problem: (problem / "input_output.json").write_text('{"inputs": [], "outputs": []}'), "no tests"),
        (
            lambda problem: (problem / "input_output.json").write_text('{"inputs": [1], "outputs": ["1"]}'),
            "must be text",
        ),
        (
            lambda problem: (problem / "input_output.json").write_text(
                '{"inputs": [1], "outputs": [1], "fn_name": "f"}'
            ),
            "list of its arguments",
        ),
        (
            lambda problem: (problem / "input_output.json").write_text(
                '{"inputs": [[1]], "outputs": [1], "fn_name": "a b"}'
            ),
            "is not a Python name",
        ),
    ],
)
def test_a_malformed_problem_is_a_one_line_error_naming_its_directory(tmp_path, sandbox, spoil, message):
    problem = write_problem(tmp_path / "broken_problem", ["1\n"], ["1\n"])
    spoil(problem)
    with pytest.raises(ValueError, match=message) as error:
        load_apps(tmp_path, sandbox)
    assert "broken_problem" in str(error.value) and "\n" not in str(error.value)


def test_a_path_without_problems_is_an_error(tmp_path, sandbox):
    with pytest.raises(ValueError, match="neither an APPS problem directory nor a directory of them"):
        load_apps(tmp_path, sandbox)
    with pytest.raises(ValueError, match="is not a directory"):
        load_apps(tmp_path / "missing", sandbox)


# ---------------------------------------------------------------- search


def test_gif_mcts_solves_an_apps_problem_through_an_improve_that_saw_a_failing_example(sandbox):
    task = AppsTask(FIXTURES / "pair_sums", sandbox)
    wrong_when_two_pairs = PAIR_SUMS.replace("print(a + b)", "print(a * b if t == 2 else a + b)")
    llm = ScriptedLLM([wrong_when_two_pairs + "```\nDone.", f"## What went wrong\n...\n```python\n{PAIR_SUMS}```\n"])
    search = GifMcts(task, GifMctsConfig(budget=5))
    [result] = run_searches([search], llm)
    assert (result.program, result.score, result.calls) == (PAIR_SUMS, 1.0, 2)
    assert search.best.action == IMPROVE
    assert llm.prompts[0].endswith("## Program\n```python\n")  # generate from the empty root
    assert "Input:\n2\n1 2\n3 4\nExpected:\n3\n7\nGot:\n2\n12" in llm.prompts[1]  # the first test, seen by improve
