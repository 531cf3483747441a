"""How well a model sets puzzles: N puzzles sampled from the Setter prompt, then the share that is valid, solved
by the same model as Solver, distinct, and their mean novelty R_n (each puzzle against the ones sampled before it,
normalised like the training reward). The puzzles are judged and scored by the rollout's own functions."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import replace

from codeplay_lightning.archive import NoveltyArchive, load_embedder
from codeplay_lightning.config import RewardConfig
from codeplay_lightning.llm import HFLLM, OpenAILLM
from codeplay_lightning.puzzles import SETTER_STOP, Puzzle, setter_prompt
from codeplay_lightning.setter.rollout import (
    Judged,
    judge_puzzles,
    novelty_distances,
    reference_set,
    reward_puzzles,
    setter_sampling_prompt,
)
from codeplay_lightning.solver import Solver


def sample_setter_puzzles(llm: HFLLM | OpenAILLM, examples: Sequence[Puzzle], n: int) -> list[str]:
    """`n` texts sampled as `llm` samples, from the Setter prompt of `examples` that training samples from, each
    ending where a puzzle ends."""
    setter_llm = copy.copy(llm)
    setter_llm.sampling = replace(llm.sampling, stop_strings=SETTER_STOP)
    # a server's tokenizer is not ours to check
    prompt = setter_sampling_prompt(llm.tokenizer, examples) if isinstance(llm, HFLLM) else setter_prompt(examples)
    # a newline the token-consistent prompt left to the model is not the puzzle's, as in training
    return [text.lstrip("\n").rstrip() for text in setter_llm.complete([prompt] * n)]


def evaluate_setter(texts: Sequence[str], solver: Solver) -> tuple[dict, list[dict]]:
    """`texts` judged, solved and scored as a training run with the default reward scores its puzzles (novelty
    against an archive filled in sampling order, normalised by our corpus): `setter_summary` and a row per text."""
    reward = RewardConfig()
    embedder = load_embedder(reward.embedder)
    _, reference_distance = reference_set(embedder, reward)
    judged = judge_puzzles(texts, solver)
    distances = novelty_distances(texts, NoveltyArchive(embedder.get_embedding_dimension()), embedder)
    scored = reward_puzzles(texts, judged, distances, reference_distance, reward)
    rows = [
        {"f": p.text, "valid": p.valid, "reason": p.reason, "solved": p.passes > 0, "r_n": p.r_novelty} for p in scored
    ]
    summary = setter_summary(
        texts, [p.valid for p in scored], [p.passes > 0 for p in scored if p.valid], [p.r_novelty for p in scored]
    )
    return summary, rows


def evaluation_summary(texts: Sequence[str], judged: list[Judged], novelty: Sequence[float]) -> dict:
    """`setter_summary` of puzzles judged by a Solver, and the share hard but solvable: solved, but not at once
    (D > 1: some of the Solver's attempts failed, or a search needed more than one call)."""
    results = [result for _, result in judged if result is not None]
    hard = sum(1 < result.difficulty < math.inf for result in results)
    valid = [check.valid for check, _ in judged]
    solved = [result.difficulty < math.inf for result in results]
    return setter_summary(texts, valid, solved, novelty) | {"hard_but_solvable": hard / len(texts)}


def setter_summary(
    texts: Sequence[str], valid: Sequence[bool], solved: Sequence[bool], novelty: Sequence[float]
) -> dict:
    """Shares of the N sampled puzzles that are valid, solved (of all N) and distinct (valid ones whose
    whitespace-normalised text is new), and their mean R_n. `solved` is per valid puzzle, in order."""
    if not texts or len(texts) != len(valid) or len(novelty) != len(texts) or len(solved) != sum(valid):
        raise ValueError("setter_summary needs one valid flag and one R_n per text, one solved flag per valid one")
    distinct = {" ".join(text.split()) for text, ok in zip(texts, valid, strict=True) if ok}
    n = len(texts)
    return {
        "puzzles": n,
        "valid": sum(valid) / n,
        "solved": sum(solved) / n,
        "solved_of_valid": sum(solved) / sum(valid) if any(valid) else 0.0,
        "distinct": len(distinct) / n,
        "mean_r_n": sum(novelty) / n,
    }
