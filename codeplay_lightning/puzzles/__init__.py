"""Puzzles: the `Puzzle` type, validation of Setter outputs, the P3 loader, our bundled puzzle set
and the few-shot prompts."""

from codeplay_lightning.puzzles.bundled import bundled_puzzles, fewshot_puzzles, parse_puzzle_blocks
from codeplay_lightning.puzzles.p3 import in_classes, load_p3, load_p3_split, puzzle_class
from codeplay_lightning.puzzles.parsing import PuzzleCheck, answer_type, check_puzzle
from codeplay_lightning.puzzles.prompts import SETTER_STOP, SOLVER_STOP, setter_prompt, solver_prompt
from codeplay_lightning.puzzles.puzzle import Puzzle

__all__ = [
    "SETTER_STOP",
    "SOLVER_STOP",
    "Puzzle",
    "PuzzleCheck",
    "answer_type",
    "bundled_puzzles",
    "check_puzzle",
    "fewshot_puzzles",
    "in_classes",
    "load_p3",
    "load_p3_split",
    "parse_puzzle_blocks",
    "puzzle_class",
    "setter_prompt",
    "solver_prompt",
]
