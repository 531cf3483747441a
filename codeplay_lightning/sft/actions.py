"""Training examples of GIF-MCTS's three actions, in the exact prompts the search sends (`search/tasks.py`).

The warm start samples puzzle solutions in the few-shot format but has never seen the search's prompts. These
examples teach them on *training* puzzles only (our corpus's train split, never a held-out family or P3's test):
- generate: the task and a prefix of a reference solution (the root's `def g():`, or more lines, as the tree's
  states are), answered with the whole program;
- improve: a program whose answer f rejects, with the wrong result as the sandbox reports it;
- fix: a program that raises, with its error as the sandbox reports it.
The wrong programs are the Solver's own failed attempts (the rows `codeplay evaluate --split train` writes) and
mechanical corruptions of reference solutions (a constant off by one, a swapped operator, a dropped `return`, a
misspelt name, a number turned into a string). Each is judged in the sandbox and kept only when it does not pass,
with the exact feedback the search would show; its answer is the reference solution, which passed the same
sandbox.

A 135M model cannot learn to write useful analyses from a few hundred examples, so the sections before the
corrected program are short templates filled from the feedback and the first lines where the wrong program and
the reference differ: every sentence is true of the pair, none is insight. The answers are chat replies, as the
search sends prompts to a model whose tokenizer has a chat template.
"""

from __future__ import annotations

import builtins
import difflib
import io
import keyword
import random
import tokenize
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from codeplay_lightning.execution import Sandbox
from codeplay_lightning.puzzles import Puzzle
from codeplay_lightning.search.tasks import P3Task

ACTIONS = ("generate", "improve", "fix")
CORRUPTIONS = ("constant", "operator", "return", "name", "type")
_SWAPPED = {"+": "-", "-": "+", "*": "+", "//": "%", "%": "//", "<": "<=", "<=": "<", ">": ">=", ">=": ">"}
_SWAPPED |= {"==": "!=", "!=": "=="}
_BUILTINS = set(vars(builtins))


@dataclass(frozen=True)
class ActionExample:
    action: str  # generate | improve | fix
    source: str  # reference | attempt | corruption:<kind>
    puzzle: str  # the training puzzle's name
    prompt: str  # what the search sends
    response: str  # what the model learns to answer


def corrupt(program: str, kind: str, rng: random.Random) -> str | None:
    """`program` with one mechanical error of `kind` (one of `CORRUPTIONS`) at a random place, or None when it
    has no place for one."""
    tokens = list(tokenize.generate_tokens(io.StringIO(program).readline))
    names = {token.string for token in tokens if token.type == tokenize.NAME}
    edits: list[tuple[tokenize.TokenInfo, tokenize.TokenInfo, str]] = []  # replace [first.start, last.end)
    for before, token, after in zip(tokens, tokens[1:], tokens[2:]):  # the first and last are never edited
        if kind == "constant" and token.type == tokenize.NUMBER and token.string.isdigit():
            edits.append((token, token, str(int(token.string) + rng.choice((-1, 1)))))
        elif kind == "operator" and token.type == tokenize.OP and token.string in _SWAPPED:
            edits.append((token, token, _SWAPPED[token.string]))
        elif kind == "return" and token.string == "return" and after.type != tokenize.NEWLINE:
            edits.append((token, after, after.string))  # `return x` -> `x`: g returns None
        elif kind == "name" and _is_variable_use(token, before, after, tokens):
            misspelt = token.string[:-1]
            if misspelt and misspelt not in names and not keyword.iskeyword(misspelt) and misspelt not in _BUILTINS:
                edits.append((token, token, misspelt))
        elif kind == "type" and token.type == tokenize.NUMBER and token.string.isdigit():
            edits.append((token, token, repr(token.string)))
    if not edits:
        return None
    first, last, text = rng.choice(edits)
    return program[: _offset(program, first.start)] + text + program[_offset(program, last.end) :]


def _is_variable_use(token, before, after, tokens) -> bool:
    """A later occurrence of a name already seen in g, read rather than bound: not g itself, an attribute, a
    keyword argument, an import or the target of `=`, `for` or `def`."""
    if token.type != tokenize.NAME or keyword.iskeyword(token.string) or token.string == "g":
        return False
    if before.string == "." or after.string in ("=", ":=") or before.string in ("def", "for", "from", "import", "as"):
        return False
    first_use = next(t for t in tokens if t.string == token.string)
    return first_use.start < token.start


def _offset(program: str, position: tuple[int, int]) -> int:
    row, column = position
    return sum(len(line) for line in program.splitlines(keepends=True)[: row - 1]) + column


def first_difference(wrong: str, right: str) -> tuple[int, list[str], list[str]]:
    """Where `wrong` first differs from `right`, line by line: the 1-based line in `wrong`, the lines `wrong` has
    there and the lines `right` has instead."""
    wrong_lines, right_lines = wrong.rstrip().splitlines(), right.rstrip().splitlines()
    matcher = difflib.SequenceMatcher(None, wrong_lines, right_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            return i1 + 1, wrong_lines[i1:i2], right_lines[j1:j2]
    raise ValueError("the two programs have the same lines")


def generate_response(program: str) -> str:
    return f"```python\n{program.rstrip()}\n```"


def improve_response(failing_example: str, wrong: str, right: str) -> str:
    """The improve answer: the wrong result, the line that makes it, the fix and the corrected program."""
    line, old, new = first_difference(wrong, right)
    one_line = len(old) == 1 and len(new) == 1
    where = (
        f"Line {line}, `{old[0].strip()}`, makes the answer wrong." if one_line else "g computes its answer wrongly."
    )
    return (
        f"## What went wrong\nThe check fails: {failing_example.splitlines()[-1]}.\n"
        f"## Where and why\n{where}\n## How to fix it\n{_how(old, new)}\n"
        f"## Corrected program\n{generate_response(right)}"
    )


def fix_response(error: str, wrong: str, right: str) -> str:
    """The fix answer: the error and the line it comes from, the fix and the corrected program."""
    line, old, new = first_difference(wrong, right)
    source = f" It comes from line {line}, `{old[0].strip()}`." if len(old) == 1 and len(new) == 1 else ""
    return (
        f"## What went wrong\nRunning g fails with: {error.strip().splitlines()[-1]}.{source}\n"
        f"## How to fix it\n{_how(old, new)}\n## Corrected program\n{generate_response(right)}"
    )


def _how(old: list[str], new: list[str]) -> str:
    if len(old) == 1 and len(new) == 1:
        return f"Write `{new[0].strip()}` instead of `{old[0].strip()}`."
    return "Rewrite g as below."


def action_examples(
    puzzles: Sequence[Puzzle],
    sandbox: Sandbox,
    per_action: int,
    seed: int,
    attempts: Sequence[tuple[str, str]] = (),
) -> tuple[list[ActionExample], Counter]:
    """Up to `per_action` examples of each action, at most one per puzzle and action, and counts of what happened
    on the way. A puzzle's reference is its first solution, used only if it passes the sandbox now. `attempts` are
    (puzzle name, program) pairs of the Solver's failed tries at these puzzles: they fill up to half of the improve
    and fix examples, corruptions the rest."""
    rng = random.Random(seed)
    order = sorted(puzzles, key=lambda p: p.name)
    rng.shuffle(order)
    tasks = {puzzle.name: P3Task(puzzle, sandbox) for puzzle in order}
    unknown = sum(name not in tasks for name, _ in attempts)
    if unknown:
        raise ValueError(f"{unknown} attempts are at puzzles that are not among the training puzzles")
    references: dict[str, str | None] = {}
    examples: list[ActionExample] = []
    stats: Counter = Counter()

    def reference(name: str) -> str | None:
        if name not in references:
            right = tasks[name].puzzle.solutions[0]
            references[name] = right if tasks[name].evaluate(right).score == 1.0 else None
            stats["references that fail the sandbox"] += references[name] is None
        return references[name]

    def count(action: str) -> int:
        return sum(example.action == action for example in examples)

    def add(action: str, source: str, name: str, prompt: str, response: str) -> None:
        examples.append(ActionExample(action, source, name, prompt, response))
        stats[f"{action} from {source.split(':')[0]}"] += 1

    def judge(name: str, wrong: str, source: str, limit: int) -> bool:
        """Add the example that `wrong` makes if its action has fewer than `limit` examples and none of this
        puzzle yet; did it?"""
        right, task = reference(name), tasks[name]
        if right is None or wrong.strip() == right.strip():
            return False
        feedback = task.evaluate(wrong)
        action = "fix" if feedback.buggy else "improve"
        if feedback.score == 1.0:
            stats[f"{source.split(':')[0]}s that pass"] += 1
            return False
        if count(action) >= limit or any(e.puzzle == name and e.action == action for e in examples):
            return False
        if action == "fix":
            response = fix_response(feedback.error, wrong, right)
            add(action, source, name, task.fix_prompt(wrong, feedback.error), response)
        else:
            response = improve_response(feedback.failing_example, wrong, right)
            add(action, source, name, task.improve_prompt(wrong, feedback.failing_example), response)
        return True

    for puzzle in order:
        if count("generate") == per_action:
            break
        right = reference(puzzle.name)
        lines = right.rstrip().splitlines(keepends=True) if right is not None else []
        if len(lines) > 1 and right.startswith(P3Task.root_code):
            code_so_far = "".join(lines[: rng.choice(range(1, len(lines), 2))])  # the tree's states: 1, 3, 5... lines
            prompt = tasks[puzzle.name].generate_prompt(code_so_far)
            add("generate", "reference", puzzle.name, prompt, generate_response(right))

    tries = list(attempts)
    rng.shuffle(tries)
    for name, program in tries:
        if count("improve") >= per_action // 2 and count("fix") >= per_action // 2:
            break
        judge(name, program, "attempt", per_action // 2)
    for puzzle in order:
        if count("improve") == count("fix") == per_action:
            break
        for kind in rng.sample(CORRUPTIONS, len(CORRUPTIONS)):
            right = reference(puzzle.name)
            wrong = corrupt(right, kind, rng) if right is not None else None
            if wrong is not None and judge(puzzle.name, wrong, f"corruption:{kind}", per_action):
                break
    return examples, stats
