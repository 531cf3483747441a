"""Code search with LLMs: GIF-MCTS (Dainese et al. 2024) and its baselines, over a `Task` (P3 puzzle, APPS problem)."""

from codeplay_lightning.search.apps import AppsTask, load_apps
from codeplay_lightning.search.baselines import Candidate, PlainSampling, WorldCoder
from codeplay_lightning.search.driver import METHODS, Search, make_search, run_searches
from codeplay_lightning.search.gif_mcts import GifMcts, GifMctsConfig, Node, SearchResult
from codeplay_lightning.search.tasks import Feedback, P3Task, Task

__all__ = [
    "METHODS",
    "AppsTask",
    "Candidate",
    "Feedback",
    "GifMcts",
    "GifMctsConfig",
    "Node",
    "P3Task",
    "PlainSampling",
    "Search",
    "SearchResult",
    "Task",
    "WorldCoder",
    "load_apps",
    "make_search",
    "run_searches",
]
