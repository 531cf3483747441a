"""One PPO iteration's data, as plain functions (the Lightning callback only calls them):

    generate_episodes   n_envs Setter streams × n_steps token steps; a stream restarts after a puzzle
    judge_puzzles       validity, then the Solver's attempts (samples or a search) in the sandbox → D
    novelty_distances   embeddings against the archive (then archived) → distances to 5-NN
    reward_puzzles      R_d, R_n and R
    build_buffer        old log-probs and values, per-token rewards, GAE, whitening → a PPOBuffer
    rank_share          each device's part of the n_envs streams

A puzzle ends at the blank line after `f` (or the eos token). A puzzle still open when its stream
runs out of steps is dropped: it gets no reward, is not archived and is not trained on (the paper
is silent on it; dropping it keeps every trained sequence a whole puzzle with its real reward).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from codeplay_lightning.archive import NoveltyArchive, embed
from codeplay_lightning.config import RewardConfig, TrainConfig
from codeplay_lightning.models import SamplingConfig, sample_streams
from codeplay_lightning.ppo import gae, kl_penalty, masked_mean, token_rewards, whiten
from codeplay_lightning.puzzles import SETTER_STOP, PuzzleCheck, check_puzzle
from codeplay_lightning.rewards import difficulty_reward, novelty_reward, total_reward
from codeplay_lightning.solver import Solver, SolverResult

SCORING_CHUNK = 16  # sequences per no-grad forward when computing old log-probs and values
Judged = tuple[PuzzleCheck, SolverResult | None]  # the Solver's result is None for an invalid puzzle


@dataclass(frozen=True)
class Episode:
    """One generated puzzle: its text (cut before the stop) and the tokens the Setter emitted."""

    text: str
    token_ids: torch.Tensor  # (T,) int64, up to and including the token that completed the stop


@dataclass(frozen=True)
class ScoredPuzzle:
    text: str
    valid: bool
    reason: str  # why it is invalid, else ""
    passes: int  # the Solver's passing samples; a search's are 1 if it solved the puzzle, else 0
    difficulty: float  # D = N_a / passes, or a search's calls to its first solution; inf: unsolved or invalid
    r_difficulty: float
    r_novelty: float
    reward: float


def generate_episodes(model, tokenizer, prompt: str, n_envs: int, n_steps: int, temperature: float,
                      top_p: float, generator: torch.Generator) -> tuple[list[Episode], int]:
    """Finished puzzles from `n_envs` streams of `n_steps` tokens each, and how many were cut.
    Each stream samples from a generator of its own, seeded from `generator`."""
    stream_generators = [torch.Generator().manual_seed(int(seed)) for seed in
                         torch.randint(0, 2**62, (n_envs,), generator=generator)]
    samples = sample_streams(model, tokenizer, prompt, n_steps,
                             SamplingConfig(n_steps, temperature, top_p, SETTER_STOP), stream_generators)
    # a newline the token-consistent prompt left to the model is not the puzzle's
    episodes = [Episode(text.lstrip("\n"), token_ids)
                for text, token_ids, finished in zip(samples.texts, samples.token_ids, samples.finished) if finished]
    return episodes, samples.finished.count(False)


def judge_puzzles(texts: Sequence[str], solver: Solver) -> list[Judged]:
    """(validity check, the Solver's result or None when invalid) per puzzle."""
    checks = [check_puzzle(text) for text in texts]
    valid = [check.puzzle for check in checks if check.valid]
    solved = iter(solver.solve(valid) if valid else [])
    return [(check, next(solved) if check.valid else None) for check in checks]


def novelty_distances(texts: Sequence[str], archive: NoveltyArchive, embedder, gather=None) -> list[np.ndarray]:
    """Distances to each puzzle's nearest predecessors, archiving the puzzles. Invalid puzzles are
    archived too: novelty is about what the Setter writes. Under DDP, `gather(texts, embeddings) ->
    (all_texts, all_embeddings, offset)` hands every rank all ranks' puzzles in rank order: each
    archive adds them all (they stay identical) and each rank keeps its own rows' distances."""
    embeddings = embed(embedder, list(texts))  # (N, D)
    all_texts, all_embeddings, offset = (texts, embeddings, 0) if gather is None else gather(texts, embeddings)
    return archive.score_and_add(list(all_texts), all_embeddings)[offset:offset + len(texts)]


def reward_puzzles(texts: Sequence[str], judged: list[Judged], distances: list[np.ndarray],
                   reference_distance: float, reward: RewardConfig) -> list[ScoredPuzzle]:
    scored = []
    for text, (check, result), neighbours in zip(texts, judged, distances):
        d = result.difficulty if result is not None else math.inf
        r_d = difficulty_reward(d, check.valid)
        r_n = novelty_reward(neighbours.tolist(), reference_distance)
        scored.append(ScoredPuzzle(text, check.valid, check.reason or "", result.passes if result else 0, d, r_d,
                                   r_n, total_reward(r_d, r_n, reward.w_difficulty, reward.w_novelty, reward.combine)))
    return scored


@dataclass
class PPOBuffer:
    """One iteration's sequences: the shared prompt and right-padded actions. Row i has
    `mask[i].sum()` real action tokens; `old_values[:, t]` is V(s_t), the value before action t."""

    prompt_ids: torch.Tensor  # (P,)
    action_ids: torch.Tensor  # (N, T)
    mask: torch.Tensor  # (N, T) float
    old_logprobs: torch.Tensor  # (N, T)
    old_values: torch.Tensor  # (N, T)
    advantages: torch.Tensor  # (N, T)
    returns: torch.Tensor  # (N, T)

    def __len__(self) -> int:
        return len(self.action_ids)

    def minibatch(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Rows `rows`, trimmed to their longest sequence, and the shared prompt."""
        length = int(self.mask[rows].sum(dim=1).max().item()) if len(rows) else 0
        take = {name: getattr(self, name)[rows, :length] for name in
                ("action_ids", "mask", "old_logprobs", "old_values", "advantages", "returns")}
        return {"prompt_ids": self.prompt_ids, **take}


def pad_actions(episodes: Sequence[Episode]) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, T) right-padded action ids (pad id 0, masked) and their (N, T) float mask."""
    length = max((len(e.token_ids) for e in episodes), default=0)
    ids = torch.zeros(len(episodes), length, dtype=torch.long)
    mask = torch.zeros(len(episodes), length)
    for row, episode in enumerate(episodes):
        ids[row, :len(episode.token_ids)] = episode.token_ids
        mask[row, :len(episode.token_ids)] = 1
    return ids, mask


def build_buffer(module, prompt_ids: torch.Tensor, episodes, scored: list[ScoredPuzzle],
                 config: TrainConfig) -> tuple[PPOBuffer, float]:
    """Old log-probs and values from the same scoring forward that training uses, then rewards
    (the puzzle's R on its last token, minus the per-token KL penalty), GAE and whitening."""
    ppo = config.ppo
    action_ids, mask = pad_actions(episodes)  # (N, T)
    logprobs, values, reference = (torch.zeros_like(mask) for _ in range(3))
    if not episodes:  # every stream's puzzle was cut: the iteration trains on nothing
        return PPOBuffer(prompt_ids, action_ids, mask, logprobs, values, values, values), 0.0
    for start in range(0, len(episodes), SCORING_CHUNK):
        rows = slice(start, start + SCORING_CHUNK)
        length = int(mask[rows].sum(dim=1).max())
        inputs = (prompt_ids.to(module.device), action_ids[rows, :length].to(module.device),
                  mask[rows, :length].to(module.device))
        chunk_logprobs, chunk_values, _ = module.score(*inputs)
        logprobs[rows, :length], values[rows, :length] = chunk_logprobs.cpu(), chunk_values.cpu()
        if ppo.kl_coef:
            with _reference_weights(module) as reference_model:
                reference[rows, :length] = module.score(*inputs, model=reference_model)[0].cpu()
    if not ppo.kl_coef:
        reference = logprobs
    scores = torch.tensor([puzzle.reward for puzzle in scored], dtype=torch.float32)
    rewards = token_rewards(scores, logprobs, reference, mask, ppo.kl_coef, ppo.kl_estimator)
    advantages, returns = gae(rewards.rewards, values * mask, mask, ppo.gamma, ppo.lam)
    if ppo.whiten_advantages and mask.sum() > 1:
        advantages = whiten(advantages, mask)
    kl_ref = float(masked_mean(kl_penalty(logprobs, reference, ppo.kl_estimator), mask))
    return PPOBuffer(prompt_ids, action_ids, mask, logprobs * mask, values * mask, advantages, returns), kl_ref


@contextlib.contextmanager
def _reference_weights(module):
    """The frozen reference: the separate frozen copy, or the LoRA policy with adapters disabled."""
    if module.frozen is not None:
        yield module.frozen
    else:
        with module.policy.disable_adapter():
            yield module.policy


def rank_share(total: int, rank: int, world_size: int) -> int:
    """This rank's part of `total` Setter streams: `rollout.n_envs` counts them across all devices,
    as the paper's 64 do, so adding devices does not change the buffer."""
    return total // world_size + (rank < total % world_size)
