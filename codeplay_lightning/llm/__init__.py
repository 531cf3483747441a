"""LLMs as the searches and the Solver use them: batched text completion with usage counters.

`load_llm(spec, sampling)` gives a local Hugging Face model (`HFLLM`) or any OpenAI-compatible server
(`OpenAILLM`, spec `openai:BASE_URL#MODEL`), and decides once whether prompts go as chat messages.
"""

from codeplay_lightning.llm.backends import HFLLM, OPENAI_PREFIX, OpenAILLM, chat_text, load_llm
from codeplay_lightning.llm.interface import LLM, LLMUsage

__all__ = ["HFLLM", "LLM", "OPENAI_PREFIX", "LLMUsage", "OpenAILLM", "chat_text", "load_llm"]
