"""The Solver: a frozen LLM's attempts at each puzzle, judged by the sandbox, give its difficulty D.

`solver.strategy` picks how it attempts a puzzle, always with N_a = `solver.attempts` LLM calls at most:

- `few-shot` (Codeplay): N_a independent few-shot samples; D = N_a / passes, which estimates the
  expected number of samples per solution; ∞ when none passes.
- `gif-mcts`, `worldcoder`: one code search per puzzle with a budget of N_a calls;
  D = the calls it needed to reach its first solving program (`SearchResult.solved_at`), ∞ when
  the budget ran out, and passes = 1 if solved else 0. Calls-to-solution is the search's own count
  of samples per solution, on the same scale 1..N_a, so R_d's ramp (0 at D = 1, 1 from D = 3)
  applies unchanged.

The Solver is frozen, so `solver.llm` may be any backend: the Setter's frozen weights or a model
loaded apart (see `codeplay_lightning.config.SolverConfig`).
"""

from codeplay_lightning.solver.base import Solver, SolverResult
from codeplay_lightning.solver.few_shot import FewShotSolver, PuzzleResult, candidate_program, difficulty
from codeplay_lightning.solver.search_solver import SearchPuzzleResult, SearchSolver
from codeplay_lightning.solver.strategies import STRATEGIES, solver_sampling

__all__ = [
    "STRATEGIES",
    "FewShotSolver",
    "PuzzleResult",
    "SearchPuzzleResult",
    "SearchSolver",
    "Solver",
    "SolverResult",
    "candidate_program",
    "difficulty",
    "solver_sampling",
]
