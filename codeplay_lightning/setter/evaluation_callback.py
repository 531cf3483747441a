"""`SetterEvaluation`: a curve of the Setter's quality that does not use the training reward.

Every `evaluation.every` iterations, after the PPO update, the current policy writes `evaluation.puzzles` puzzles
from the Setter prompt, always from the same sampling seed; the frozen initial Solver judges them, always from the
same seed too; and each puzzle's R_n is taken against a fixed reference set (the novelty normaliser's), not the
run's archive. So two evaluations differ only by the policy: a reward that rises while these shares fall is caught.
The evaluation draws from generators of its own and changes nothing the run trains on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import lightning as L
import torch

from codeplay_lightning.archive import NoveltyArchive, embed
from codeplay_lightning.config import TrainConfig
from codeplay_lightning.llm import HFLLM
from codeplay_lightning.models import SamplingConfig
from codeplay_lightning.puzzles import Puzzle
from codeplay_lightning.rewards import novelty_reward
from codeplay_lightning.setter.evaluation import evaluation_summary, sample_setter_puzzles
from codeplay_lightning.setter.module import SetterPPOModule
from codeplay_lightning.setter.records import RunRecords, json_difficulty
from codeplay_lightning.setter.rollout import judge_puzzles
from codeplay_lightning.setter.rollout_callback import sampling_context
from codeplay_lightning.solver import Solver

SETTER_SEED, SOLVER_SEED = 0, 1  # the same draws at every evaluation, in every run


class SetterEvaluation(L.Callback):
    """`solver` is the initial Solver on an LLM of its own drawing from `solver_generator` (reseeded before each
    evaluation); `reference` holds the reference set's embeddings, `reference_distance` their mean pairwise
    distance. Rank 0 evaluates and writes through `records`; the other ranks wait at the next collective."""

    def __init__(
        self,
        *,
        config: TrainConfig,
        tokenizer,
        examples: Sequence[Puzzle],
        solver: Solver,
        solver_generator: torch.Generator,
        embedder,
        reference: NoveltyArchive,
        reference_distance: float,
        records: RunRecords,
    ):
        self.config, self.tokenizer, self.examples = config, tokenizer, examples
        self.solver, self.solver_generator = solver, solver_generator
        self.embedder, self.reference, self.reference_distance = embedder, reference, reference_distance
        self.records = records

    def on_train_epoch_end(self, trainer: L.Trainer, module: SetterPPOModule) -> None:
        every, iteration = self.config.evaluation.every, trainer.current_epoch
        if every == 0 or (iteration + 1) % every != 0 or trainer.global_rank != 0:
            return
        started = time.perf_counter()
        rollout = self.config.rollout
        setter = HFLLM(
            module.policy,
            self.tokenizer,
            SamplingConfig(rollout.n_steps, rollout.temperature),
            chat=False,
            batch_size=self.config.evaluation.puzzles,
            generator=torch.Generator().manual_seed(SETTER_SEED),
        )
        self.solver_generator.manual_seed(SOLVER_SEED)
        with sampling_context(trainer.precision_plugin):
            texts = sample_setter_puzzles(setter, self.examples, self.config.evaluation.puzzles)
            # the initial Solver's weights: with LoRA, the policy with its adapters off
            with module.frozen_weights():
                judged = judge_puzzles(texts, self.solver)
        neighbours = self.reference.nearest(embed(self.embedder, texts))
        novelty = [novelty_reward(distances.tolist(), self.reference_distance) for distances in neighbours]
        difficulty = [json_difficulty(None if result is None else result.difficulty) for _, result in judged]
        self.records.evaluation(
            {
                "iteration": iteration,
                "summary": evaluation_summary(texts, judged, novelty),
                "seconds": time.perf_counter() - started,
                "puzzles": [
                    {"puzzle": text, "valid": check.valid, "D": d, "R_n": r_n}
                    for text, (check, _), d, r_n in zip(texts, judged, difficulty, novelty, strict=True)
                ],
            }
        )
