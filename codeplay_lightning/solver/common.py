"""What every Solver strategy shares: its config and the interface the rollout reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from codeplay_lightning.execution import Sandbox
from codeplay_lightning.models.sampling import SamplingConfig
from codeplay_lightning.puzzles import SOLVER_STOP, Puzzle
from codeplay_lightning.search.llm import LLM

Strategy = Literal["sample", "gif_mcts", "worldcoder"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)


@dataclass
class SolverConfig:
    """`strategy`: `sample` draws N_a few-shot samples per puzzle, D = N_a / passes; `gif_mcts` and
    `worldcoder` run one search per puzzle with a budget of N_a LLM calls, D = the calls it needed to
    reach its first solution. `llm`: `frozen` samples from the Setter's frozen reference weights;
    anything else is loaded apart: `smollm2-135m`, a hub id, a local directory, or
    `openai:BASE_URL#MODEL` for an OpenAI-compatible server."""

    strategy: Strategy = "sample"  # sample | gif_mcts | worldcoder
    llm: str = "frozen"  # frozen | smollm2-135m | hub id | local directory | openai:BASE_URL#MODEL
    attempts: int = 8  # N_a: samples per puzzle, or a search's budget of LLM calls
    batch_size: int = 32  # sequences a local LLM samples together: (puzzle, attempt) rows, or a round's prompts
    max_new_tokens: int = 128  # length cap of one completion (a search's answers, prose and program, need more)
    temperature: float = 0.8  # > 0: the N_a attempts must differ
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"solver.strategy must be one of {', '.join(STRATEGIES)}; got {self.strategy!r}")
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 (greedy attempts all agree), got {self.temperature}")

    @property
    def sampling(self) -> SamplingConfig:
        """How the Solver's LLM samples. The few-shot Solver continues `def g():` and stops where the
        few-shot pattern goes on; a search's answers (prose, then a fenced program) run to eos."""
        stop_strings = SOLVER_STOP if self.strategy == "sample" else ()
        return SamplingConfig(self.max_new_tokens, self.temperature, self.top_p, stop_strings)


class SolverResult(Protocol):
    """What the rollout reads of the Solver's work on one puzzle."""

    @property
    def puzzle(self) -> Puzzle: ...

    @property
    def passes(self) -> int:
        """Solutions found: passing samples, or 1 for a solved search; 0 when unsolved."""
        ...

    @property
    def difficulty(self) -> float:
        """D in [1, N_a], or math.inf when unsolved."""
        ...


class Solver(Protocol):
    llm: LLM
    sandbox: Sandbox

    def solve(self, puzzles: Sequence[Puzzle]) -> Sequence[SolverResult]:
        """One result per puzzle, in order."""
        ...
