"""One PPO iteration's data, as plain functions (the Lightning callback only calls them):

    setter_sampling_prompt  the Setter prompt as the streams continue it
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

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from codeplay_lightning.archive import NoveltyArchive, embed, reference_mean_distance
from codeplay_lightning.config import RewardConfig, TrainConfig
from codeplay_lightning.corpus import reference_puzzles
from codeplay_lightning.models import SamplingConfig, sample_streams, token_consistent_prompt
from codeplay_lightning.ppo import explained_variance, gae, kl_penalty, masked_mean, token_rewards, whiten
from codeplay_lightning.puzzles import (
    SETTER_STOP,
    Puzzle,
    PuzzleCheck,
    check_puzzle,
    in_classes,
    load_p3,
    load_p3_split,
    setter_prompt,
)
from codeplay_lightning.rewards import difficulty_reward, novelty_reward, total_reward
from codeplay_lightning.setter.module import SetterPPOModule
from codeplay_lightning.solver import Solver, SolverResult

log = logging.getLogger(__name__)
Judged = tuple[PuzzleCheck, SolverResult | None]  # the Solver's result is None for an invalid puzzle


def setter_sampling_prompt(tokenizer, examples: Sequence[Puzzle]) -> str:
    """The Setter prompt of `examples` as it is sampled from: it ends where a blank line ends inside the few-shot
    block, before the next `def f` (`token_consistent_prompt`)."""
    return token_consistent_prompt(tokenizer, setter_prompt(examples), examples[0].f)


@dataclass(frozen=True)
class Episode:
    """One generated puzzle: its text (cut before the stop), the tokens the Setter emitted and their log-probs
    as the sampler computed them (the behaviour policy's, at the sampling temperature)."""

    text: str
    token_ids: torch.Tensor  # (T,) int64, up to and including the token that completed the stop
    logprobs: torch.Tensor  # (T,) float32


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


def generate_episodes(
    model,
    tokenizer,
    prompt: str,
    n_envs: int,
    n_steps: int,
    temperature: float,
    generator: torch.Generator,
) -> tuple[list[Episode], int]:
    """Finished puzzles from `n_envs` streams of `n_steps` tokens each, sampled at `temperature` over the whole
    vocabulary (PPO's old log-probs are), and how many were cut. Each stream samples from a generator of its own,
    seeded from `generator`."""
    stream_generators = [
        torch.Generator().manual_seed(int(seed)) for seed in torch.randint(0, 2**62, (n_envs,), generator=generator)
    ]
    samples = sample_streams(
        model,
        tokenizer,
        prompt,
        n_steps,
        SamplingConfig(n_steps, temperature, stop_strings=SETTER_STOP),
        stream_generators,
    )
    # a newline the token-consistent prompt left to the model is not the puzzle's
    episodes = [
        Episode(text.lstrip("\n"), token_ids, logprobs)
        for text, token_ids, logprobs, finished in zip(
            samples.texts, samples.token_ids, samples.logprobs, samples.finished
        )
        if finished
    ]
    return episodes, samples.finished.count(False)


def judge_puzzles(texts: Sequence[str], solver: Solver) -> list[Judged]:
    """(validity check, the Solver's result or None when invalid) per puzzle."""
    checks = [check_puzzle(text) for text in texts]
    valid = [check.puzzle for check in checks if check.valid]
    solved = iter(solver.solve(valid) if valid else [])
    return [(check, next(solved) if check.valid else None) for check in checks]


def judged_by_the_sandbox(judged: list[Judged], *others: Sequence) -> tuple[list[int], list[list]]:
    """The puzzles whose attempts the sandbox judged, and `judged` and each of `others` (lists in the same order)
    cut to them: a puzzle on which the sandbox failed (a judge fault on some attempt) is left out of the reward,
    not scored as unsolvable. Also the indices of those left out."""
    faulty = [index for index, (_, result) in enumerate(judged) if result is not None and result.judge_faults]
    return faulty, [[item for index, item in enumerate(items) if index not in faulty] for items in (judged, *others)]


def novelty_distances(texts: Sequence[str], archive: NoveltyArchive, embedder, gather=None) -> list[np.ndarray]:
    """Distances to each puzzle's nearest predecessors, archiving the puzzles. Invalid puzzles are
    archived too: novelty is about what the Setter writes. Under DDP, `gather(texts, embeddings) ->
    (all_texts, all_embeddings, offset)` hands every rank all ranks' puzzles in rank order: each
    archive adds them all (they stay identical) and each rank keeps its own rows' distances."""
    embeddings = embed(embedder, list(texts))  # (N, D)
    all_texts, all_embeddings, offset = (texts, embeddings, 0) if gather is None else gather(texts, embeddings)
    return archive.score_and_add(list(all_texts), all_embeddings)[offset : offset + len(texts)]


def reference_set(embedder, reward: RewardConfig) -> tuple[np.ndarray, float]:
    """The reference set's embeddings and what R_n's distances are normalised by, their mean pairwise distance: P3's
    train split when `reward.reference` gives P3's puzzles.json, else our corpus's training families."""
    if reward.reference is None:
        reference = reference_puzzles()
        name = "our corpus's training families; reward.reference=P3's puzzles.json for P3's"
    else:
        split = load_p3_split(reward.reference_split)
        reference = in_classes(load_p3(reward.reference), split["train"])
        name = f"P3's train split of {reward.reference}"
    embeddings = embed(embedder, [p.f for p in reference])
    distance = reference_mean_distance(embeddings)
    log.info("novelty normaliser: mean pairwise distance %.4f over %d puzzles (%s)", distance, len(reference), name)
    return embeddings, distance


def reward_puzzles(
    texts: Sequence[str],
    judged: list[Judged],
    distances: list[np.ndarray],
    reference_distance: float,
    reward: RewardConfig,
) -> list[ScoredPuzzle]:
    scored = []
    for text, (check, result), neighbours in zip(texts, judged, distances):
        d = result.difficulty if result is not None else math.inf
        r_d = difficulty_reward(d, check.valid, reward.difficulty)
        r_n = novelty_reward(neighbours.tolist(), reference_distance)
        scored.append(
            ScoredPuzzle(
                text=text,
                valid=check.valid,
                reason=check.reason or "",
                passes=result.passes if result else 0,
                difficulty=d,
                r_difficulty=r_d,
                r_novelty=r_n,
                reward=total_reward(r_d, r_n, reward.w_difficulty, reward.w_novelty, reward.combine),
            )
        )
    return scored


@dataclass
class PPOBuffer:
    """One iteration's sequences: the shared prompt and right-padded actions. Row i has
    `mask[i].sum()` real action tokens; `old_values[:, t]` is V(s_t), the value before action t.
    `first_epoch_minibatches` is the first PPO epoch's minibatches, the old log-probs and values were scored in."""

    prompt_ids: torch.Tensor  # (P,)
    action_ids: torch.Tensor  # (N, T)
    mask: torch.Tensor  # (N, T) float
    old_logprobs: torch.Tensor  # (N, T)
    old_values: torch.Tensor  # (N, T)
    advantages: torch.Tensor  # (N, T)
    returns: torch.Tensor  # (N, T)
    first_epoch_minibatches: list[torch.Tensor]  # (rows,) int64 each, in training order

    def __len__(self) -> int:
        return len(self.action_ids)

    def minibatch(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Rows `rows`, trimmed to their longest sequence, and the shared prompt."""
        length = longest(self.mask[rows])
        take = {
            name: getattr(self, name)[rows, :length]
            for name in ("action_ids", "mask", "old_logprobs", "old_values", "advantages", "returns")
        }
        return {"prompt_ids": self.prompt_ids, **take}


def longest(mask: torch.Tensor) -> int:
    """The most real tokens in a row of the (B, T) mask: where a minibatch is trimmed (0 without rows)."""
    return int(mask.sum(dim=1).max()) if len(mask) else 0


def pad_actions(episodes: Sequence[Episode]) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, T) right-padded action ids (pad id 0, masked) and their (N, T) float mask."""
    length = max((len(e.token_ids) for e in episodes), default=0)
    ids = torch.zeros(len(episodes), length, dtype=torch.long)
    mask = torch.zeros(len(episodes), length)
    for row, episode in enumerate(episodes):
        ids[row, : len(episode.token_ids)] = episode.token_ids
        mask[row, : len(episode.token_ids)] = 1
    return ids, mask


def build_buffer(
    module: SetterPPOModule,
    prompt_ids: torch.Tensor,
    episodes: Sequence[Episode],
    scored: list[ScoredPuzzle],
    config: TrainConfig,
    first_epoch_minibatches: list[torch.Tensor],
) -> tuple[PPOBuffer, dict[str, float]]:
    """The iteration's PPO buffer, and the metrics to log: `ppo/kl_ref` (this rank's) and
    `ppo/explained_variance` (of the old values, over every rank's tokens). Every rank must call it.

    Old log-probs and values come from the forward training uses, run on exactly the first PPO epoch's
    minibatches (`first_epoch_minibatches`: buffer rows, in training order): under bf16 the same rows packed
    otherwise get other log-probs (on the warm start, about 1% of tokens beyond the clip range before
    any update), where these make the first minibatch's ratio exactly 1. Then rewards (the puzzle's R on
    its last token, minus the per-token KL penalty), GAE and whitening with the moments of all ranks'
    tokens together (`module.sum_over_ranks`), as one process holding them all would whiten.

    The `none` preset (`module.rewarded` False) never trains on the buffer: it is left unscored, and
    kl_ref is 0, as the policy it never updates is the reference."""
    ppo = config.ppo
    action_ids, mask = pad_actions(episodes)  # (N, T)
    zeros = torch.zeros_like(mask)
    if not module.rewarded:
        return PPOBuffer(prompt_ids, action_ids, mask, zeros, zeros, zeros, zeros, first_epoch_minibatches), {
            "ppo/kl_ref": 0.0
        }
    logprobs, values, reference = _old_logprobs_and_values(
        module, prompt_ids, action_ids, mask, first_epoch_minibatches, with_reference=ppo.kl_coef != 0
    )
    advantages, returns = zeros, zeros  # every stream's puzzle was cut: the iteration trains on nothing
    if episodes:
        scores = torch.tensor([puzzle.reward for puzzle in scored], dtype=torch.float32)
        rewards = token_rewards(scores, logprobs, reference, mask, ppo.kl_coef, ppo.kl_estimator)  # (N, T)
        advantages, returns = gae(rewards, values, mask, ppo.gamma, ppo.lam)
    if ppo.whiten_advantages:
        advantages = whiten(advantages, mask, sum_over_ranks=module.sum_over_ranks)
    metrics = {
        "ppo/kl_ref": float(masked_mean(kl_penalty(logprobs, reference, ppo.kl_estimator), mask)),
        "ppo/explained_variance": float(explained_variance(values, returns, mask, module.sum_over_ranks)),
        "rollout/sampler_logprob_gap": sampler_logprob_gap(episodes, logprobs, mask),
    }
    return PPOBuffer(
        prompt_ids, action_ids, mask, logprobs, values, advantages, returns, first_epoch_minibatches
    ), metrics


def sampler_logprob_gap(episodes: Sequence[Episode], logprobs: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean |sampler's log-prob - scoring's| over the real tokens: the same weights must give the same tokens the
    same log-probs, whichever path computed them. 1e-6 in fp32; bf16's rounding in bf16; a sampler that lost
    the prompt, or a window counted in the wrong slots, shows as nats."""
    behaviour = torch.zeros_like(logprobs)  # (N, T)
    for row, episode in enumerate(episodes):
        behaviour[row, : len(episode.logprobs)] = episode.logprobs
    return float(masked_mean((logprobs - behaviour).abs(), mask))


def _old_logprobs_and_values(
    module: SetterPPOModule,
    prompt_ids: torch.Tensor,
    action_ids: torch.Tensor,
    mask: torch.Tensor,
    minibatches: list[torch.Tensor],
    with_reference: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probs, values and the reference's log-probs, each (N, T) and 0 at padding, scored minibatch by
    minibatch on the inputs `PPOBuffer.minibatch` will give training. Without a reference (no KL penalty),
    the policy's own log-probs stand for it."""
    logprobs, values, reference = (torch.zeros_like(mask) for _ in range(3))
    for rows in minibatches:
        if not len(rows):  # more minibatches than puzzles
            continue
        length = longest(mask[rows])
        inputs = [x.to(module.device) for x in (prompt_ids, action_ids[rows, :length], mask[rows, :length])]
        rows_logprobs, rows_values, _ = module.score(*inputs)  # values in bf16 under bf16 autocast
        logprobs[rows, :length], values[rows, :length] = (x.to("cpu", mask.dtype) for x in (rows_logprobs, rows_values))
        if with_reference:
            with module.frozen_weights() as reference_model:
                reference[rows, :length] = module.score(*inputs, model=reference_model)[0].cpu()
    return logprobs, values, reference if with_reference else logprobs


def rank_share(total: int, rank: int, world_size: int) -> int:
    """This rank's part of `total` Setter streams: `rollout.n_envs` counts them across all devices,
    as the paper's 64 do, so adding devices does not change the buffer."""
    return total // world_size + (rank < total % world_size)
