"""Few-shot prompts in the format of the Codeplay paper (appendix B).

    from typing import List

    def f(s: str):
        return "Good " + s == "Good morning"

    def g():
        return "morning"

    assert f(g())

The Setter prompt ends after the last `assert f(g())` and a blank line, so the Setter's next token
starts a new `def f`. The Solver prompt appends the puzzle's `f`, a blank line and `def g():`.
"""

from __future__ import annotations

from collections.abc import Sequence

from codeplay_lightning.puzzles.puzzle import Puzzle

# A puzzle ends at the first blank line after `def f` (paper, appendix D).
SETTER_STOP: tuple[str, ...] = ("\n\n",)
# g ends where the few-shot pattern goes on (`assert f(g())`, another `def`) or at two blank
# lines; one blank line inside g's body is allowed.
SOLVER_STOP: tuple[str, ...] = ("\nassert", "\ndef ", "\n\n\n")

_HEADER = "from typing import List\n\n"


def setter_prompt(examples: Sequence[Puzzle]) -> str:
    """The few-shot block, ending with a blank line after the last `assert f(g())`."""
    return _HEADER + _few_shot_block(examples)


def solver_prompt(examples: Sequence[Puzzle], puzzle: Puzzle) -> str:
    """The few-shot block, then `puzzle.f`, a blank line and `def g():` for the Solver to continue."""
    return _HEADER + _few_shot_block(examples) + puzzle.f.rstrip() + "\n\ndef g():"


def _few_shot_block(examples: Sequence[Puzzle]) -> str:
    blocks = []
    for example in examples:
        if not example.solutions:
            raise ValueError(f"few-shot example {example.name!r} has no solution")
        blocks.append(f"{example.f.rstrip()}\n\n{example.solutions[0].rstrip()}\n\nassert f(g())\n\n")
    return "".join(blocks)
