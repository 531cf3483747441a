"""Code search with LLMs: GIF-MCTS (Dainese et al. 2024) and its baselines, over a `Task` (P3 for now)."""

from codeplay_lightning.search.baselines import Candidate, WorldCoder, plain_sampling
from codeplay_lightning.search.gif_mcts import GifMcts, GifMctsConfig, Node, SearchResult
from codeplay_lightning.search.llm import LLM, LLMUsage, ScriptedLLM
from codeplay_lightning.search.tasks import Evaluation, P3Task, Task

__all__ = ["LLM", "Candidate", "Evaluation", "GifMcts", "GifMctsConfig", "LLMUsage", "Node", "P3Task",
           "ScriptedLLM", "SearchResult", "Task", "WorldCoder", "plain_sampling"]
