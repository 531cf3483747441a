"""`RolloutCallback`: one PPO iteration's data at the start of each Lightning epoch.

Samples puzzles from the Setter, scores them (Solver, sandbox, archive), logs them, and hands the
datamodule a `PPOBuffer` with old log-probs, values, KL-penalised rewards, GAE advantages and
returns. The steps themselves are plain functions in `codeplay_lightning.setter.rollout`; this
callback orders them, times them and logs what they give.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn

from codeplay_lightning.allocator import peak_rss_gib, reset_peak_rss
from codeplay_lightning.config import TrainConfig
from codeplay_lightning.execution import Sandbox
from codeplay_lightning.llm.interface import LLMUsage
from codeplay_lightning.setter.module import SetterPPOModule
from codeplay_lightning.setter.ranks import from_every_rank, rank
from codeplay_lightning.setter.rollout import (
    ScoredPuzzle,
    build_buffer,
    generate_episodes,
    judge_puzzles,
    novelty_distances,
    rank_share,
    reward_puzzles,
)
from codeplay_lightning.setter.selfplay import SelfPlay, initial_difficulties, mean_pass_rate
from codeplay_lightning.solver import Solver

SMOOTHING = 200  # puzzles, as the paper's curves


@dataclass(frozen=True)
class RankRollout:
    """What one rank's rollout gives the iteration's logs, which rank 0 writes for all ranks."""

    scored: list[ScoredPuzzle]
    initial: list[float | None]  # the initial Solver's D per puzzle (`initial_difficulties`)
    truncated: int  # puzzles still open when their stream ran out of steps
    metrics: dict[str, float]  # `build_buffer`'s
    seconds: float  # the rollout's wall time


@dataclass(frozen=True)
class RankPuzzles:
    """One rank's puzzles and their embeddings, which every rank archives."""

    texts: list[str]
    embeddings: np.ndarray  # (N, D)


class RolloutCallback(L.Callback):
    """`generator` drives the iteration's sampling: the Setter's streams here, and the Solver, whose LLM
    (and search seeds) draw from the same generator object; it is seeded per rank and checkpointed here.
    `sandbox` is the Solver's, whose busy time the iteration's record counts apart from the models'; `solver_usage`
    its LLM's counters, whose tokens the record counts.
    `solver_model` is a local Solver LM of its own, moved to the trainer's device (None when the Solver
    samples from the module's frozen weights, which move with the module, or from a server).
    `selfplay` (None: the Solver stays the initial one) holds the learning Solver, which `solver` samples
    from, and the initial Solver; the callback re-judges, collects, learns and checkpoints through it."""

    def __init__(
        self,
        *,
        config: TrainConfig,
        tokenizer,
        setter_prompt: str,
        solver: Solver,
        sandbox: Sandbox,
        solver_usage: LLMUsage,
        solver_model: nn.Module | None,
        embedder,
        reference_distance: float,
        generator: torch.Generator,
        selfplay: SelfPlay | None = None,
    ):
        self.config, self.tokenizer, self.setter_prompt = config, tokenizer, setter_prompt
        self.solver, self.sandbox, self.solver_model = solver, sandbox, solver_model
        self.solver_usage = solver_usage
        self.embedder, self.reference_distance = embedder, reference_distance
        self.prompt_ids = torch.tensor(tokenizer(setter_prompt)["input_ids"])
        self.generator = generator
        self.selfplay = selfplay
        self.puzzles_generated = 0  # over all ranks
        self.recent = {name: deque(maxlen=SMOOTHING) for name in ("difficulty", "novelty", "total")}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # every rank samples different puzzles from the same seed
        self.generator.manual_seed(self.config.trainer.seed * 1000 + trainer.global_rank)
        if self.solver_model is not None:
            self.solver_model.to(trainer.strategy.root_device)
        if self.selfplay is not None:
            self.selfplay.learner.to(trainer.strategy.root_device)

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        """On resuming after a crash, forget the logs of the iteration that did not finish: the
        checkpoint is from the end of the one before, and the unfinished one is sampled again."""
        if trainer.global_rank == 0:
            run_dir = Path(trainer.logger.log_dir)
            _keep_records(run_dir / "puzzles.jsonl", lambda record: record["index"] <= self.puzzles_generated)
            for name in ("iterations.jsonl", "solver.jsonl"):
                _keep_records(run_dir / name, lambda record: record["iteration"] < trainer.current_epoch)

    def on_train_epoch_start(self, trainer: L.Trainer, module: SetterPPOModule) -> None:
        reset_peak_rss()
        if module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(module.device)
        clock = _Clock()
        sandbox_before = self.sandbox.busy_seconds
        solver_tokens_before = (self.solver_usage.prompt_tokens, self.solver_usage.completion_tokens)
        rollout = self.config.rollout
        with torch.no_grad(), rollout_precision(trainer.precision_plugin):
            streams = rank_share(rollout.n_envs, trainer.global_rank, trainer.world_size)
            episodes, truncated = generate_episodes(
                module.policy,
                self.tokenizer,
                self.setter_prompt,
                streams,
                rollout.n_steps,
                rollout.temperature,
                rollout.top_p,
                self.generator,
            )
            clock.lap("setter_sampling")
            texts = [episode.text for episode in episodes]
            # a Solver sampling from the frozen weights holds their model: with LoRA, the adapters go off
            on_frozen = self.config.solver.llm == "frozen" and self.selfplay is None
            with module.frozen_weights() if on_frozen else contextlib.nullcontext():
                judged = judge_puzzles(texts, self.solver)
            clock.lap("solver")  # the Solver's sampling and the sandbox
            results = [result for _, result in judged]
            initial = initial_difficulties(
                results,
                None if self.selfplay is None else self.selfplay.initial_solver,
                self.config.solver.rejudge_share,
                self.generator,
                module.frozen_weights,
            )
            if self.selfplay is not None:
                self.selfplay.collect([result for result in results if result is not None])
            clock.lap("initial_solver")
            distances = novelty_distances(
                texts,
                trainer.datamodule.archive,
                self.embedder,
                gather=_gather_puzzles if trainer.world_size > 1 else None,
            )
            scored = reward_puzzles(texts, judged, distances, self.reference_distance, self.config.reward)
            clock.lap("novelty")
            first_epoch = trainer.datamodule.draw_epoch(len(episodes))  # drawn now: the buffer is scored in it
            buffer, metrics = build_buffer(module, self.prompt_ids, episodes, scored, self.config, first_epoch)
            clock.lap("old_logprobs_and_values")
        trainer.datamodule.set_buffer(buffer)
        self.sandbox_before = sandbox_before
        self.clock = clock
        self.work = {  # this rank's
            "puzzles": len(episodes),
            "action_tokens": int(buffer.mask.sum()),
            "solver_prompt_tokens": self.solver_usage.prompt_tokens - solver_tokens_before[0],
            "solver_completion_tokens": self.solver_usage.completion_tokens - solver_tokens_before[1],
        }
        self._log(trainer, RankRollout(scored, initial, truncated, metrics, clock.total()))

    def on_train_epoch_end(self, trainer: L.Trainer, module: SetterPPOModule) -> None:
        """The Solver's BC phase when one is due (every rank), then where the iteration's time went, appended to
        iterations.jsonl (rank 0)."""
        self.clock.lap("ppo_update")
        if self.selfplay is not None and self.selfplay.due(trainer.current_epoch):
            phase = self.selfplay.learn(
                module.sum_over_ranks,
                trainer.global_rank,
                trainer.world_size,
                lambda: sampling_context(trainer.precision_plugin),
            )
            self.clock.lap("solver_learning")  # the BC phase and the evaluations
            if trainer.global_rank == 0:
                self._log_phase(trainer, phase)
        self.clock.laps["sandbox"] = self.sandbox.busy_seconds - self.sandbox_before
        if trainer.global_rank != 0:
            return
        laps = self.clock.laps
        model = laps["setter_sampling"] + laps["old_logprobs_and_values"] + laps["ppo_update"]
        model += laps["solver"] + laps["initial_solver"] + laps.get("solver_learning", 0)
        model -= laps["sandbox"]  # the Solvers' sampling, without their programs' runs
        record = {
            "iteration": trainer.current_epoch,
            "seconds": self.clock.total(),
            **self.work,
            **{f"{name}_seconds": value for name, value in laps.items()},
            "outside_models_frac": 1 - model / self.clock.total(),
            "peak_rss_gib": peak_rss_gib(),  # this rank's process, over this iteration
        }
        if module.device.type == "cuda":  # what this rank's tensors held at most (the caching allocator keeps more)
            record["peak_gpu_gib"] = torch.cuda.max_memory_allocated(module.device) / 2**30
        with (Path(trainer.logger.log_dir) / "iterations.jsonl").open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        trainer.logger.log_metrics(
            {
                "time/iteration_s": record["seconds"],
                "time/outside_models_frac": record["outside_models_frac"],
                "memory/peak_rss_gib": record["peak_rss_gib"],
                **({"memory/peak_gpu_gib": record["peak_gpu_gib"]} if "peak_gpu_gib" in record else {}),
            },
            step=trainer.global_step,
        )

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        """A learning Solver's weights as a model directory, `solver/` in the run's folder (rank 0): what
        `codeplay evaluate --llm` takes."""
        if self.selfplay is not None and trainer.global_rank == 0:
            directory = Path(trainer.logger.log_dir) / "solver"
            self.selfplay.learner.exported().save_pretrained(directory)
            self.tokenizer.save_pretrained(directory)

    def _log(self, trainer: L.Trainer, own: RankRollout) -> None:
        """Every rank's rollout, logged by rank 0; `build_buffer`'s metrics as their mean over the ranks (the
        explained variance is already every rank's alike)."""
        everyone: list[RankRollout] = from_every_rank(own)
        if trainer.global_rank != 0:
            self.puzzles_generated += sum(len(rollout.scored) for rollout in everyone)
            return
        writer = trainer.logger.experiment
        iteration = trainer.current_epoch
        run_dir = Path(trainer.logger.log_dir)
        all_scored = [puzzle for rollout in everyone for puzzle in rollout.scored]
        all_initial = [difficulty for rollout in everyone for difficulty in rollout.initial]
        with (run_dir / "puzzles.jsonl").open("a") as handle:
            for puzzle, initial in zip(all_scored, all_initial, strict=True):
                self.puzzles_generated += 1
                for name, value in (
                    ("difficulty", puzzle.r_difficulty),
                    ("novelty", puzzle.r_novelty),
                    ("total", puzzle.reward),
                ):
                    self.recent[name].append(value)
                    writer.add_scalar(f"reward/{name}", value, self.puzzles_generated)
                    writer.add_scalar(
                        f"reward/{name}_smoothed", float(np.mean(self.recent[name])), self.puzzles_generated
                    )
                handle.write(
                    json.dumps(
                        {
                            "iteration": iteration,
                            "index": self.puzzles_generated,
                            "puzzle": puzzle.text,
                            "valid": puzzle.valid,
                            "reason": puzzle.reason,
                            "D": None if np.isinf(puzzle.difficulty) else puzzle.difficulty,
                            "initial_attempted": initial is not None,  # D_initial is None when unsolved
                            "D_initial": None if initial is None or np.isinf(initial) else initial,
                            "R_d": puzzle.r_difficulty,
                            "R_n": puzzle.r_novelty,
                            "R": puzzle.reward,
                        }
                    )
                    + "\n"
                )
        count = max(len(all_scored), 1)
        both = [(p.difficulty, initial) for p, initial in zip(all_scored, all_initial) if initial is not None]
        trainer.logger.log_metrics(
            {
                "rollout/puzzles": len(all_scored),
                "rollout/valid_frac": sum(p.valid for p in all_scored) / count,
                "rollout/solved_frac": sum(p.passes > 0 for p in all_scored) / count,
                "rollout/truncated": sum(rollout.truncated for rollout in everyone),
                "rollout/puzzles_per_s": len(all_scored) / max(max(rollout.seconds for rollout in everyone), 1e-9),
                "rollout/archive_size": len(trainer.datamodule.archive),
                # 1/D of the same puzzles for the Solver rewarding them and the initial one (docs/selfplay.md)
                "solver/pass_rate_current": mean_pass_rate([current for current, _ in both]),
                "solver/pass_rate_initial": mean_pass_rate([initial for _, initial in both]),
                **{name: float(np.mean([rollout.metrics[name] for rollout in everyone])) for name in own.metrics},
            },
            step=trainer.global_step,
        )
        recent = "\n\n".join(
            f"R={p.reward:.2f} R_d={p.r_difficulty:.2f} R_n={p.r_novelty:.2f}\n\n    " + p.text.replace("\n", "\n    ")
            for p in all_scored[-5:]
        )
        writer.add_text("puzzles/recent", recent, trainer.global_step)

    def _log_phase(self, trainer: L.Trainer, phase: dict) -> None:
        """A BC phase's record, appended to solver.jsonl; its loss and pass rates in TensorBoard, the initial
        Solver's (measured before the first phase) at step 0 of the same curves."""
        with (Path(trainer.logger.log_dir) / "solver.jsonl").open("a") as handle:
            handle.write(json.dumps({"iteration": trainer.current_epoch, **phase}) + "\n")
        if "initial" in phase:
            trainer.logger.log_metrics(_pass_metrics(phase["initial"]), step=0)
        bc = {f"solver/bc_{key}": value for key, value in phase["bc"].items()}
        trainer.logger.log_metrics(bc | _pass_metrics(phase["learned"]), step=trainer.global_step)

    def state_dict(self) -> dict:
        # every rank's generator in rank order (Lightning calls this on every rank, saves rank 0's dict):
        # each rank resumes its own stream, not rank 0's (the ranks would then sample the same puzzles)
        return {
            "generators": from_every_rank(self.generator.get_state()),
            "puzzles_generated": self.puzzles_generated,
            "recent": {name: list(values) for name, values in self.recent.items()},
            **({"selfplay": self.selfplay.state_dict()} if self.selfplay is not None else {}),
        }

    def load_state_dict(self, state: dict) -> None:
        if rank() < len(state["generators"]):  # a rank the checkpoint did not have keeps its seed from `setup`
            self.generator.set_state(state["generators"][rank()])
        self.puzzles_generated = state["puzzles_generated"]
        for name, values in state["recent"].items():
            self.recent[name].extend(values)
        if (self.selfplay is None) != ("selfplay" not in state):
            raise ValueError("the checkpoint's Solver learned and this run's does not, or the other way round")
        if self.selfplay is not None:
            self.selfplay.load_state_dict(state["selfplay"])


def _pass_metrics(summaries: dict[str, dict]) -> dict[str, float]:
    """`solver/<set>_pass@k` of each evaluation set's summary."""
    return {
        f"solver/{name}_{key}": value
        for name, summary in summaries.items()
        for key, value in summary.items()
        if key.startswith("pass@")
    }


def _keep_records(path: Path, keep) -> None:
    """Rewrites the JSON-lines file `path` (if any) with only the records `keep` accepts."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if keep(json.loads(line))]
    if len(kept) < len(lines):
        partial = path.with_suffix(".partial")
        partial.write_text("".join(kept))
        partial.replace(path)


class _Clock:
    """Named laps of wall time since the previous lap."""

    def __init__(self):
        self.started = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self.last
        self.last = now

    def total(self) -> float:
        return self.last - self.started


@contextlib.contextmanager
def sampling_context(plugin):
    """No gradients, at the rollout's precision: how the Solvers sample."""
    with torch.no_grad(), rollout_precision(plugin):
        yield


def rollout_precision(plugin):
    """The trainer's precision for the rollout's forwards, with autocast's cache of cast weights on.
    Lightning turns it off, which is harmless for a training step, but then each of sampling's
    hundreds of one-token forwards casts every weight again, which halved the Setter's tokens/s. The
    cache is emptied when the context exits, before the weights change."""
    if isinstance(plugin, MixedPrecision):
        dtype = torch.bfloat16 if plugin.precision == "bf16-mixed" else torch.float16
        return torch.autocast(plugin.device, dtype=dtype, cache_enabled=True)
    return plugin.forward_context()


def _gather_puzzles(texts: Sequence[str], embeddings: np.ndarray) -> tuple[list[str], np.ndarray, int]:
    """`novelty_distances`'s `gather`: all ranks' puzzles and embeddings in rank order, and where this rank's begin."""
    everyone: list[RankPuzzles] = from_every_rank(RankPuzzles(list(texts), embeddings))
    offset = sum(len(puzzles.texts) for puzzles in everyone[: rank()])
    return (
        [text for puzzles in everyone for text in puzzles.texts],
        np.concatenate([puzzles.embeddings for puzzles in everyone]),
        offset,
    )
