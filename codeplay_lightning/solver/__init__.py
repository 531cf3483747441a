"""The Solver: a frozen few-shot LM that attempts each puzzle N_a times, judged by the sandbox."""

from codeplay_lightning.solver.few_shot import (
    FewShotSolver,
    PuzzleResult,
    SolverConfig,
    candidate_program,
    difficulty,
)

__all__ = ["FewShotSolver", "PuzzleResult", "SolverConfig", "candidate_program", "difficulty"]
