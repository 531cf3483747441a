"""Examples of the search's actions: mechanical corruptions, every example judged by the sandbox in the search's
exact prompts and read back by the search's own parsers, only training puzzles, and the SFT loss on responses."""

import ast
import copy
import itertools
import json
import random

import pytest
from support import TURNS_CHAT_TEMPLATE

from codeplay_lightning.commands.actions import failed_attempts
from codeplay_lightning.corpus import FAMILIES
from codeplay_lightning.corpus.build import draw, p3_entry
from codeplay_lightning.llm import chat_text
from codeplay_lightning.puzzles import Puzzle
from codeplay_lightning.search.tasks import P3Task, extract_code, generated_program
from codeplay_lightning.sft.actions import CORRUPTIONS, action_examples, corrupt, first_difference
from codeplay_lightning.sft.data import pack_examples, training_data

PROGRAM = "def g():\n    total, count = 10, 3\n    for i in range(count):\n        total -= i\n    return total * 2\n"


@pytest.fixture(scope="module")
def puzzles(tmp_path_factory) -> list[Puzzle]:
    """The train split of a small corpus, one puzzle per instance (its first solution)."""
    instances = itertools.islice(draw(FAMILIES[:6], seed=0), 31)
    entries = [p3_entry(instance, index) for index, instance in enumerate(instances)]
    entries[-1]["split"] = "heldout_families"
    path = tmp_path_factory.mktemp("corpus") / "corpus.json"
    path.write_text(json.dumps(entries))
    first_solutions: dict[str, Puzzle] = {}
    for puzzle in training_data([path])[0]:
        first_solutions.setdefault(puzzle.name, puzzle)
    return list(first_solutions.values())


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_a_corruption_changes_one_line_and_still_parses(kind):
    for seed in range(5):
        wrong = corrupt(PROGRAM, kind, random.Random(seed))
        assert wrong is not None and wrong != PROGRAM
        ast.parse(wrong)
        line, old, new = first_difference(wrong, PROGRAM)
        assert len(old) == len(new) == 1 and PROGRAM.splitlines()[line - 1] == new[0]


def test_a_corruption_without_a_place_for_it_is_none():
    program = "def g():\n    return 'abc'\n"
    assert corrupt(program, "constant", random.Random(0)) is None
    assert corrupt(program, "name", random.Random(0)) is None
    assert corrupt(program, "return", random.Random(0)) == "def g():\n    'abc'\n"


def test_every_example_is_judged_and_read_back_by_the_search(puzzles, sandbox):
    examples, stats = action_examples(puzzles, sandbox, per_action=6, seed=0)
    assert {action: sum(e.action == action for e in examples) for action in ("generate", "improve", "fix")} == {
        "generate": 6,
        "improve": 6,
        "fix": 6,
    }
    by_name = {puzzle.name: puzzle for puzzle in puzzles}
    for example in examples:
        puzzle = by_name[example.puzzle]
        task = P3Task(puzzle, sandbox)
        program_shown = example.prompt.split("## Program\n```python\n", 1)[1]
        if example.action == "generate":
            assert example.prompt == task.generate_prompt(program_shown)
            assert generated_program(program_shown, example.response) == puzzle.solutions[0].rstrip() + "\n"
            continue
        wrong = program_shown.split("\n```\n\n", 1)[0] + "\n"
        feedback = task.evaluate(wrong)
        assert feedback.score == 0 and feedback.buggy == (example.action == "fix")
        expected = (
            task.fix_prompt(wrong, feedback.error)
            if feedback.buggy
            else task.improve_prompt(wrong, feedback.failing_example)
        )
        assert example.prompt == expected
        assert task.evaluate(extract_code(example.response)).score == 1.0
    assert len({(e.puzzle, e.action) for e in examples}) == len(examples)


def test_failed_attempts_fill_half_of_improve_and_fix(puzzles, sandbox, tmp_path):
    wrong_answer = "def g():\n    return None\n"
    rows = [
        {"name": p.name, "tries": [{"g": wrong_answer, "status": "fail"}, {"g": p.solutions[0], "status": "pass"}]}
        for p in puzzles
    ]
    path = tmp_path / "puzzles.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    attempts = failed_attempts(path)
    assert attempts == [(p.name, wrong_answer) for p in puzzles]
    examples, _ = action_examples(puzzles, sandbox, per_action=4, seed=0, attempts=attempts)
    improve = [e for e in examples if e.action == "improve"]
    assert len(improve) == 4 and sum(e.source == "attempt" for e in improve) == 2
    with pytest.raises(ValueError, match="not among the training puzzles"):
        action_examples(puzzles, sandbox, 4, 0, attempts=[("heldout:0", wrong_answer)])


def test_training_data_reads_examples_and_the_loss_is_on_responses_only(puzzles, sandbox, char_tokenizer, tmp_path):
    examples, _ = action_examples(puzzles[:8], sandbox, per_action=2, seed=1)
    path = tmp_path / "actions.jsonl"
    path.write_text("".join(json.dumps(e.__dict__) + "\n" for e in examples))
    read_puzzles, read_examples = training_data([path])
    assert read_puzzles == [] and read_examples == examples

    tokenizer = copy.deepcopy(char_tokenizer)
    tokenizer.chat_template = TURNS_CHAT_TEMPLATE
    sequences, too_long = pack_examples(tokenizer, read_examples, block=100_000, seed=0)
    assert too_long == 0 and len(sequences) == 1
    trained = "".join(tokenizer.decode(i) for i, label in zip(*sequences[0]) if label != -100)
    assert trained.endswith("<eos>") and sorted(trained.split("<eos>")[:-1]) == sorted(e.response for e in examples)
    whole = tokenizer.decode(sequences[0].ids)
    assert all(chat_text(tokenizer, e.prompt) + e.response in whole for e in examples)
    shortest = min(len(pack_examples(tokenizer, [e], 100_000, 0)[0][0].ids) for e in examples)
    assert pack_examples(tokenizer, examples, shortest - 1, 0) == ([], len(examples))

    path.write_text(json.dumps({"action": "rewrite", "prompt": "p", "response": "r"}) + "\n")
    with pytest.raises(ValueError, match="line 1: not an action example"):
        training_data([path])
