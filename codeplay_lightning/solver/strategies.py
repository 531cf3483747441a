"""`STRATEGIES`: each `solver.strategy` in one row: where its completions end, whether its prompts are chat, and
its Solver. The config's `StrategyName` lists the same names (OmegaConf refuses any other)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from codeplay_lightning.config import SolverConfig
from codeplay_lightning.execution import Sandbox
from codeplay_lightning.llm.interface import LLM
from codeplay_lightning.models.sampling import SamplingConfig
from codeplay_lightning.puzzles import SOLVER_STOP, Puzzle
from codeplay_lightning.search.driver import SEARCHES
from codeplay_lightning.solver.base import Solver
from codeplay_lightning.solver.few_shot import FewShotSolver
from codeplay_lightning.solver.search_solver import SearchSolver

# (llm, sandbox, few-shot examples, config, the rollout's generator) -> the Solver
SolverBuilder = Callable[[LLM, Sandbox, Sequence[Puzzle], SolverConfig, torch.Generator], Solver]


@dataclass(frozen=True)
class Strategy:
    stop_strings: tuple[str, ...]  # where a completion ends (besides eos)
    chat: bool | None  # False: raw text the LLM continues; None: chat where the LLM takes it (`load_llm`'s rule)
    build: SolverBuilder


def _few_shot(llm: LLM, sandbox: Sandbox, examples: Sequence[Puzzle], config: SolverConfig, _) -> Solver:
    return FewShotSolver(llm, sandbox, examples, config)


def _search(method: str) -> SolverBuilder:
    search = SEARCHES[method]

    def build(llm: LLM, sandbox: Sandbox, _, config: SolverConfig, generator: torch.Generator) -> Solver:
        return SearchSolver(llm, sandbox, config, generator, search)

    return build


STRATEGIES: dict[str, Strategy] = {
    # continues `def g():` after the few-shot block and stops where the pattern goes on
    "few-shot": Strategy(SOLVER_STOP, chat=False, build=_few_shot),
    # a search's answers (prose, then a fenced program) run to eos
    "gif-mcts": Strategy((), chat=None, build=_search("gif-mcts")),
    "worldcoder": Strategy((), chat=None, build=_search("worldcoder")),
}


def solver_sampling(config: SolverConfig) -> SamplingConfig:
    """How the Solver's LLM samples."""
    return SamplingConfig(
        config.max_new_tokens, config.temperature, config.top_p, STRATEGIES[config.strategy].stop_strings
    )
