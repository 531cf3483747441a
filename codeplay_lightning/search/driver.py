"""Many searches at once against one LLM: every round, each unfinished search asks for its next
completions and all of them go to the LLM in one `complete` batch (a local model samples them
together; a server gets them concurrently). A search's calls are the same as when run alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from codeplay_lightning.search.baselines import PlainSampling, WorldCoder
from codeplay_lightning.search.gif_mcts import GifMcts, GifMctsConfig, SearchResult
from codeplay_lightning.search.tasks import Task

if TYPE_CHECKING:  # the LLM package loads torch: `codeplay synthesize` checks its --method before that
    from codeplay_lightning.llm.interface import LLM


class Search(Protocol):
    task: Task
    calls: int

    @property
    def finished(self) -> bool: ...

    def prompts(self) -> list[str]:
        """The prompts whose completions the search needs next; [] once it is finished."""
        ...

    def receive(self, completions: list[str]) -> object:
        """Takes the completions of `prompts()`, in order; evaluates what they make."""
        ...

    def result(self) -> SearchResult: ...

    def to_json(self) -> str: ...


def _without(action: str) -> Callable[[Task, int, int], Search]:
    actions = tuple(kind for kind in GifMctsConfig.actions if kind != action)
    return lambda task, budget, seed: GifMcts(task, GifMctsConfig(budget=budget, actions=actions), seed=seed)


# Each search method in one row: (task, budget of LLM calls, seed) -> the search. The paper's method, its baselines
# (§5.1) and its ablations, each without one action type (app. B, table 6).
SEARCHES: dict[str, Callable[[Task, int, int], Search]] = {
    "gif-mcts": lambda task, budget, seed: GifMcts(task, GifMctsConfig(budget=budget), seed=seed),
    "worldcoder": lambda task, budget, seed: WorldCoder(task, budget=budget, seed=seed),
    "sample": lambda task, budget, seed: PlainSampling(task, budget),
    **{f"gif-mcts-no-{action}": _without(action) for action in GifMctsConfig.actions},
}
METHODS = tuple(SEARCHES)


def make_search(method: str, task: Task, budget: int, seed: int = 0) -> Search:
    """A search of `method` (one of METHODS) on `task` with a budget of `budget` LLM calls."""
    if method not in SEARCHES:
        raise ValueError(f"unknown search method {method!r}; choose one of {', '.join(METHODS)}")
    return SEARCHES[method](task, budget, seed)


def run_searches(
    searches: Sequence[Search], llm: LLM, on_round: Callable[[Sequence[Search]], None] | None = None
) -> list[SearchResult]:
    """Run every search to its end; `on_round(searches)` after each round (for progress)."""
    while requests := [(search, search.prompts()) for search in searches if not search.finished]:
        completions = iter(llm.complete([prompt for _, prompts in requests for prompt in prompts]))
        for search, prompts in requests:
            search.receive([next(completions) for _ in prompts])
        if on_round is not None:
            on_round(searches)
    return [search.result() for search in searches]
