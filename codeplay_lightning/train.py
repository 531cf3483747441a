"""`train(config)`: build the parts a config names, log what was built, and call `Trainer.fit`."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.strategies import DDPStrategy
from torch import nn

from codeplay_lightning.archive import NoveltyArchive, load_embedder
from codeplay_lightning.config import (
    ConfigError,
    TrainConfig,
    run_identity,
    run_version,
    to_yaml,
)
from codeplay_lightning.devices import check_devices, host_record, judge_workers, resolved_precision, usable_cores
from codeplay_lightning.execution import IsolationError, Sandbox
from codeplay_lightning.execution.ray_backend import RaySandbox
from codeplay_lightning.llm import HFLLM, LLM, load_llm
from codeplay_lightning.llm.interface import LLMUsage
from codeplay_lightning.models.loading import load_causal_lm, with_lora
from codeplay_lightning.puzzles import Puzzle, fewshot_puzzles
from codeplay_lightning.puzzles.files import puzzles_to_solve
from codeplay_lightning.setter import BufferDataModule, RolloutCallback, SetterPPOModule
from codeplay_lightning.setter.checkpoint import IterationCheckpoint, StreamingCheckpointIO, find_checkpoint
from codeplay_lightning.setter.evaluation_callback import SetterEvaluation
from codeplay_lightning.setter.progress import Progress
from codeplay_lightning.setter.ranks import RankLost, distributed, peer_lost
from codeplay_lightning.setter.records import RunRecords
from codeplay_lightning.setter.rollout import reference_set, setter_sampling_prompt
from codeplay_lightning.setter.rollout_callback import Novelty, RewardSolver
from codeplay_lightning.setter.selfplay import SelfPlay
from codeplay_lightning.solver import STRATEGIES, Solver, solver_sampling
from codeplay_lightning.solver.learning import SolverLearner, selfplay_corpus, sharing_copy

log = logging.getLogger("codeplay_lightning")


def train(
    config: TrainConfig, resume: str | None = None, policy=None, tokenizer=None, callbacks: Sequence[L.Callback] = ()
) -> Path:
    """Train the Setter; returns the run directory. `resume` is a checkpoint path or "auto" (the
    newest `last.ckpt` of this config's runs). `policy`/`tokenizer` replace loading `model.name`
    (tests pass tiny models built in code); `callbacks` are extra Lightning callbacks (for tests
    and tools that observe a run)."""
    check_devices(config.trainer)
    config = replace(
        config,
        trainer=replace(config.trainer, precision=resolved_precision(config.trainer)),
        sandbox=replace(config.sandbox, workers=judge_workers(config.sandbox.workers, config.trainer)),
    )
    checkpoint, finished = find_checkpoint(config, resume) if resume else (None, 0)
    if checkpoint and finished >= config.trainer.iterations:
        log.info(
            "%s finished its %d iterations: nothing to train (resume with trainer.iterations=N, N > %d, to train on)",
            checkpoint,
            finished,
            finished,
        )
        return Path(checkpoint).parents[1]
    if checkpoint:
        log.info(
            "resuming %s at iteration %d of %d", Path(checkpoint).parents[1], finished + 1, config.trainer.iterations
        )
    L.seed_everything(config.trainer.seed, workers=True, verbose=False)
    nodes = f" on each of {config.trainer.num_nodes} nodes" if config.trainer.num_nodes > 1 else ""
    log.info(
        "training on %s, %d device(s)%s, precision %s",
        config.trainer.accelerator,
        config.trainer.devices,
        nodes,
        config.trainer.precision,
    )
    with _sandbox(config) as sandbox:  # refused in one line before any model loads
        if policy is None:
            policy, tokenizer = load_causal_lm(config.model.name)
        log.info("policy: %s (%.1fM parameters)", config.model.name, sum(p.numel() for p in policy.parameters()) / 1e6)
        policy, frozen, initial = _policy_frozen_initial(policy, config)
        examples = fewshot_puzzles()[: config.rollout.fewshot]
        embedder = load_embedder(config.reward.embedder)
        reference, reference_distance = reference_set(embedder, config.reward)
        logger = TensorBoardLogger(
            config.trainer.run_root,
            name=config.name,
            version=run_version(checkpoint) if checkpoint else None,
            default_hp_metric=False,
        )
        loggers = [logger, *(_other_logger(name, config, logger) for name in config.trainer.loggers)]
        records = RunRecords(loggers)
        generator = torch.Generator().manual_seed(config.trainer.seed)  # reseeded per rank by RolloutCallback.setup
        # with LoRA the initial Solver's model is the policy, which the rollout runs with its adapters off
        initial_llm, solver_model = _solver_llm(config, frozen if frozen is not None else policy, tokenizer, generator)
        initial_solver = _solver(config, initial_llm, sandbox, examples, generator)
        selfplay, solver, solver_llm = None, initial_solver, initial_llm
        if config.selfplay.learns:  # the learning Solver rewards the puzzles
            selfplay = _selfplay(config, initial, tokenizer, examples, sandbox, initial_solver)
            solver_llm = selfplay.llm(generator)
            solver = _solver(config, solver_llm, sandbox, examples, generator)
        rollout = RolloutCallback(
            config=config,
            tokenizer=tokenizer,
            setter_prompt=setter_sampling_prompt(tokenizer, examples),
            reward=RewardSolver(
                solver,
                sandbox,
                solver_llm.usage,
                solver_model,
                on_frozen_weights=config.solver.llm == "frozen" and selfplay is None,
            ),
            novelty=Novelty(embedder, NoveltyArchive(embedder.get_embedding_dimension()), reference_distance),
            generator=generator,
            records=records,
            progress=Progress(config.trainer.iterations),
            selfplay=selfplay,
        )
        evaluation = _evaluation(
            config, tokenizer, examples, initial_llm, sandbox, embedder, reference, reference_distance, records
        )
        module = SetterPPOModule(
            policy=policy,
            frozen=frozen,
            ppo=config.ppo,
            temperature=config.rollout.temperature,
            value_hidden=config.model.value_hidden,
            detach_value_trunk=config.model.detach_value_trunk,
            identity=run_identity(config),
            rewarded=config.reward.w_difficulty != 0 or config.reward.w_novelty != 0,
            recompute_activations=config.trainer.recompute_activations,
        )
        trainer = _trainer(config, loggers, [rollout, evaluation, *callbacks])
        if trainer.global_rank == 0:  # the first config.yaml stays: a resume writes its own beside it
            Path(logger.log_dir).mkdir(parents=True, exist_ok=True)
            written = f".resumed-{finished}" if checkpoint else ""
            (Path(logger.log_dir) / f"config{written}.yaml").write_text(to_yaml(config))
            (Path(logger.log_dir) / f"host{written}.json").write_text(json.dumps(host_record(), indent=1) + "\n")
        try:
            trainer.fit(
                module, datamodule=BufferDataModule(ppo=config.ppo, seed=config.trainer.seed), ckpt_path=checkpoint
            )
        except Exception as error:
            if trainer.world_size > 1 and peer_lost(error):
                raise RankLost(
                    f"rank {trainer.global_rank} of {trainer.world_size} lost another rank "
                    f"({str(error).strip().splitlines()[0][:300]}): the run stops; its last finished iteration's "
                    f"checkpoint stands: resume it on every node with --resume {Path(logger.log_dir)}"
                ) from error
            raise
    # rank 0's, on every rank: another rank's own logger, never written, counts the folder rank 0 made as taken
    run_dir = Path(trainer.log_dir)  # a broadcast: the run's last collective
    if distributed():
        # Lightning leaves a gloo group to the interpreter's exit, where its worker threads can abort a finished
        # rank (SIGABRT), and torchrun counts that node as failed. Only here, after a finished run: destroying a
        # group while another rank is still in a collective can hang.
        torch.distributed.destroy_process_group()
    return run_dir


def _sandbox(config: TrainConfig) -> Sandbox | RaySandbox:
    """The Solvers' sandbox, on this machine or on a Ray cluster (`sandbox.backend`); one that isolates programs
    less than fully is refused in one line unless `sandbox.allow_partial_isolation`."""
    settings = dict(
        workers=config.sandbox.workers,
        timeout=config.sandbox.timeout,
        require_isolation=not config.sandbox.allow_partial_isolation,
    )
    if config.sandbox.backend == "ray":
        sandbox = RaySandbox(**settings, address=config.sandbox.ray_address)
        where = "Ray actor(s) per rank"
    else:
        sandbox = Sandbox(**settings)
        where = f"worker(s) per rank, {usable_cores()} usable core(s)"
    try:
        log.info("sandbox: %d %s; isolation: %s", config.sandbox.workers, where, sandbox.isolation)
    except BaseException as error:
        sandbox.close()
        if isinstance(error, IsolationError):
            raise ConfigError(f"{error}; sandbox.allow_partial_isolation=true trains anyway") from None
        raise
    return sandbox


# each of trainer.loggers' names (config.LOGGERS) in one row: (the run's folder, its name) -> the logger
OTHER_LOGGERS: dict[str, Callable[[str, str], Logger]] = {
    "csv": lambda folder, _: CSVLogger(folder, name="", version="csv"),
    "wandb": lambda _, name: WandbLogger(project="codeplay_lightning", name=name),
    "mlflow": lambda _, name: MLFlowLogger(experiment_name="codeplay_lightning", run_name=name),
}


def _other_logger(name: str, config: TrainConfig, tensorboard: TensorBoardLogger) -> Logger:
    """A `trainer.loggers` logger, naming the run as its folder does (runs/<name>/version_N)."""
    return OTHER_LOGGERS[name](tensorboard.log_dir, f"{config.name}/{Path(tensorboard.log_dir).name}")


def _trainer(config: TrainConfig, loggers: list[Logger], callbacks: Sequence[L.Callback]) -> L.Trainer:
    """One Lightning epoch per PPO iteration, its steps the PPO minibatches, checkpointed after each iteration."""
    return L.Trainer(
        max_epochs=config.trainer.iterations,
        precision=config.trainer.precision,
        accelerator=config.trainer.accelerator,
        devices=config.trainer.devices,
        num_nodes=config.trainer.num_nodes,
        strategy=(
            DDPStrategy(timeout=timedelta(seconds=config.trainer.collective_timeout))
            if config.trainer.strategy == "ddp"
            else config.trainer.strategy
        ),
        logger=loggers,
        log_every_n_steps=1,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        gradient_clip_val=config.ppo.max_grad_norm,
        accumulate_grad_batches=config.ppo.accumulate_grad_batches,
        plugins=[StreamingCheckpointIO()],
        enable_progress_bar=False,  # the rollout callback's Progress shows the whole iteration, not the PPO steps
        enable_model_summary=False,  # the policy's size is logged as it loads
        callbacks=[
            IterationCheckpoint(Path(loggers[0].log_dir) / "checkpoints" / "last.ckpt", config),
            *callbacks,
        ],
    )


def _policy_frozen_initial(policy, config: TrainConfig):
    """(policy to train, frozen copy or None, the initial weights for a learning Solver or None). With LoRA the
    base weights are the frozen reference and the Solver (adapters disabled), and a learning Solver gets a
    weight-sharing copy of the policy taken before the Setter's adapters go in; otherwise one frozen copy serves
    as all three."""
    if config.model.lora_rank:
        initial = sharing_copy(policy) if config.selfplay.learns else None
        return with_lora(policy, config.model), None, initial
    frozen = copy.deepcopy(policy).requires_grad_(False).eval()
    if config.trainer.precision.startswith("bf16"):
        frozen = frozen.to(torch.bfloat16)  # it only samples and scores: bf16 weights sample fastest
    return policy, frozen, frozen


def _selfplay(
    config: TrainConfig,
    initial: nn.Module,
    tokenizer,
    examples: Sequence[Puzzle],
    sandbox: Sandbox,
    initial_solver: Solver,
) -> SelfPlay:
    """The learning Solver on `initial`'s weights, with our corpus (its training split for replay, its held-out
    families for evaluation; drawn once into the cache, `selfplay_corpus`) and `selfplay.eval_file`."""
    selfplay = config.selfplay
    corpus, heldout = selfplay_corpus(selfplay.eval_heldout, config.sandbox.workers)
    eval_file = puzzles_to_solve(selfplay.eval_file, limit=selfplay.eval_limit) if selfplay.eval_file else []
    evaluated_on = f"{len(heldout)} held-out-family puzzles"
    if selfplay.eval_file:
        evaluated_on += f" and {len(eval_file)} of {selfplay.eval_file}"
    log.info(
        "self-play: BC every %d iterations on %d corpus pairs for replay; evaluated on %s",
        selfplay.learn_every,
        len(corpus),
        evaluated_on,
    )
    bf16 = config.trainer.precision.startswith("bf16")  # fp16 runs BC in fp32: it has no loss scaler
    learner = SolverLearner(
        initial,
        tokenizer,
        examples,
        selfplay,
        corpus,
        config.trainer.seed,
        torch.bfloat16 if bf16 else None,
        recompute_activations=config.trainer.recompute_activations,
    )
    return SelfPlay(
        learner=learner,
        initial_solver=initial_solver,
        heldout=heldout,
        eval_file=eval_file,
        config=selfplay,
        solver=config.solver,
        sandbox=sandbox,
        seed=config.trainer.seed,
    )


def _solver(
    config: TrainConfig, llm: LLM, sandbox: Sandbox, examples: Sequence[Puzzle], generator: torch.Generator
) -> Solver:
    """The Solver of `config.solver` on `llm`; a search's seeds draw from `generator`, the rollout's."""
    solver = config.solver
    log.info("solver: %s, %d attempts, LLM %s", solver.strategy, solver.attempts, solver.llm)
    return STRATEGIES[solver.strategy].build(llm, sandbox, examples, solver, generator)


def _solver_llm(config: TrainConfig, frozen, tokenizer, generator: torch.Generator) -> tuple[LLM, nn.Module | None]:
    """The Solver's LLM, drawing from `generator`: on the frozen weights (`solver.llm=frozen`), or the model or
    server `solver.llm` names; and a local model of its own, which the rollout keeps on the trainer's device
    (None for the frozen weights, which move with the module, and for a server). The few-shot prompt is raw text
    to continue; a search's prompts are instructions, sent as chat where the LLM decides it can take them
    (`load_llm`'s rule)."""
    solver = config.solver
    chat = STRATEGIES[solver.strategy].chat
    if solver.llm == "frozen":
        llm = HFLLM(
            frozen, tokenizer, solver_sampling(solver), chat=chat, batch_size=solver.batch_size, generator=generator
        )
        return llm, None
    dtype = torch.bfloat16 if config.trainer.precision.startswith("bf16") else torch.float32  # as the frozen copy
    llm = load_llm(
        solver.llm, solver_sampling(solver), chat=chat, dtype=dtype, batch_size=solver.batch_size, generator=generator
    )
    return llm, llm.model if isinstance(llm, HFLLM) else None


def _evaluation(
    config: TrainConfig,
    tokenizer,
    examples: Sequence[Puzzle],
    initial_llm: LLM,
    sandbox: Sandbox,
    embedder,
    reference: np.ndarray,
    reference_distance: float,
    records: RunRecords,
) -> SetterEvaluation:
    """The Setter's evaluation, its initial Solver on a copy of the initial Solver's LLM that draws from a generator
    and counts tokens of its own (the rollout's stay as they would be without it)."""
    generator = torch.Generator()
    llm = copy.copy(initial_llm)
    llm.generator, llm.usage = generator, LLMUsage()
    archive = NoveltyArchive(embedder.get_embedding_dimension())
    archive.add([""] * len(reference), reference)  # (only its distances are read)
    return SetterEvaluation(
        config=config,
        tokenizer=tokenizer,
        examples=examples,
        solver=STRATEGIES[config.solver.strategy].build(llm, sandbox, examples, config.solver, generator),
        solver_generator=generator,
        embedder=embedder,
        reference=archive,
        reference_distance=reference_distance,
        records=records,
    )
