"""Codeplay's rewards as reward functions of other trainers: TRL's `GRPOTrainer` and `RLOOTrainer` call them as
`reward(prompts=..., completions=..., **columns) -> list[float]`, a dataset's other columns passed by name, and
a veRL or OpenRLHF reward function can call them the same way. Nothing of TRL is imported here.

- `P3Reward`: the sandbox's P3 verdict of a Solver's completion `g` against the row's puzzle `f`: 1.0 or 0.0.
- `SetterReward`: a Setter's completion (a puzzle) rewarded as training rewards it: R of R_d (a frozen Solver's
  N_a attempts, judged in the sandbox) and R_n (against an archive of every puzzle rewarded so far).

Completions are text that continues the prompt (a standard dataset, not a conversational one), cut where the
project's sampler cuts them: a Solver's at `SOLVER_STOP`, a Setter's at `SETTER_STOP` (TRL samples on to
`max_completion_length` or eos).

Both judge programs in a `Sandbox` of their own: close it (`close()`, or use the reward as a context manager).
As training does, they refuse, when built, a sandbox that isolates programs less than fully (no user namespaces:
`docs/sandbox.md` says what a program can then do), unless `allow_partial_isolation=True`.
"""

from __future__ import annotations

from collections.abc import Sequence

from codeplay_lightning.archive import NoveltyArchive, load_embedder
from codeplay_lightning.config import RewardConfig, RolloutConfig, SolverConfig
from codeplay_lightning.execution import IsolationError, Sandbox
from codeplay_lightning.llm import LLM
from codeplay_lightning.puzzles import SETTER_STOP, SOLVER_STOP, Puzzle, fewshot_puzzles
from codeplay_lightning.rewards import Combine, total_reward
from codeplay_lightning.setter.rollout import judge_puzzles, novelty_distances, reference_set, reward_puzzles
from codeplay_lightning.solver import FewShotSolver, candidate_program


class _SandboxedReward:
    """A reward that owns a sandbox of `workers` wardens, `timeout` seconds per program, fully isolated unless
    `allow_partial_isolation`."""

    def __init__(self, workers: int = 2, timeout: float = 1.0, allow_partial_isolation: bool = False) -> None:
        self.sandbox = Sandbox(workers=workers, timeout=timeout, require_isolation=not allow_partial_isolation)
        try:
            _ = self.sandbox.isolation  # starts every warden: less than full isolation is refused here
        except BaseException as error:
            self.sandbox.close()
            if isinstance(error, IsolationError):
                raise IsolationError(f"{error}; allow_partial_isolation=True judges anyway") from None
            raise

    def close(self) -> None:
        self.sandbox.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class P3Reward(_SandboxedReward):
    r"""1.0 when a completion's `g` solves its row's puzzle (P3's verdict: `f(g())` is True, the answer of f's
    type), 0.0 when not, and None when the sandbox itself failed to judge it (`Verdict.judge_fault`: it says
    nothing of the program; TRL leaves None out of the reward and its mean).

    The dataset's column `puzzle` holds each row's `f`; its prompt ends in `def g():`, as the Solver's prompt
    (`solver_prompt`) does. A completion is cut at the Solver's stop strings and parsed as the few-shot Solver
    parses its samples (`candidate_program`); a call's rows are judged in one batch.

    >>> seven = "def f(x: int):\n    return x == 7"
    >>> with P3Reward(workers=1) as reward:
    ...     reward(["def g():"] * 2, ["\n    return 7\nassert f(g())", "\n    return 8\n"], puzzle=[seven] * 2)
    [1.0, 0.0]
    """

    def __call__(self, prompts: Sequence, completions: Sequence, **columns) -> list[float | None]:
        texts = _texts(completions, "P3Reward")
        puzzles = columns.get("puzzle")
        if puzzles is None:
            raise ValueError("P3Reward reads each row's f from a dataset column 'puzzle', and there is none")
        if len(puzzles) != len(texts) or not all(isinstance(f, str) for f in puzzles):
            raise ValueError(f"P3Reward needs one f (a str) in 'puzzle' per completion: {len(texts)} completions")
        programs = [candidate_program(Puzzle("", f), _cut(text, SOLVER_STOP)) for f, text in zip(puzzles, texts)]
        return [None if verdict.judge_fault else float(verdict.passed) for verdict in self.sandbox.verify(programs)]


class SetterReward(_SandboxedReward):
    """A Setter's completion rewarded as `setter/rollout.py` rewards a puzzle in training (`reward_puzzles`):
    R = w_difficulty·R_d + w_novelty·R_n, or R_d·R_n with `combine="product"` (weights 1).

    - R_d: −1 for an invalid puzzle; else `solver_llm`'s `attempts` few-shot attempts (N_a) at it, judged in the
      sandbox, give D = N_a / passes and the paper's ramp of D (0 when every attempt passes, 1 from D = 3, −1
      unsolved). Build `solver_llm` as training does: `load_llm(spec, solver_sampling(SolverConfig()),
      chat=False)`.
    - R_n: the mean cosine distance to the 5 nearest puzzles of the archive (every puzzle this reward has scored,
      and the call's earlier completions), over the mean pairwise distance of our corpus's reference puzzles, as
      training normalises it. The archive grows with every call, as training's; each process of a multi-process
      run keeps its own.

    A completion is cut at the Setter's stop (the blank line after `f`), as training's sampler cuts a puzzle; a
    completion that never reaches it is scored as it is (training drops such a puzzle)."""

    def __init__(
        self,
        solver_llm: LLM,
        attempts: int = SolverConfig.attempts,
        w_difficulty: float = 1.0,
        w_novelty: float = 1.0,
        combine: Combine = "sum",
        workers: int = 2,
        timeout: float = 1.0,
        allow_partial_isolation: bool = False,
    ) -> None:
        total_reward(0.0, 0.0, w_difficulty, w_novelty, combine)  # refuses a weighted product or another combine now
        self.reward = RewardConfig(w_difficulty=w_difficulty, w_novelty=w_novelty, combine=combine)
        solver_config = SolverConfig(attempts=attempts)
        self.embedder = load_embedder(self.reward.embedder)
        self.archive = NoveltyArchive(self.embedder.get_embedding_dimension())
        _, self.reference_distance = reference_set(self.embedder, self.reward)
        self.last: tuple[Sequence, list] | None = None  # the completions last scored, and their scores
        super().__init__(workers, timeout, allow_partial_isolation)  # the sandbox last: nothing after it can fail
        self.solver = FewShotSolver(solver_llm, self.sandbox, fewshot_puzzles()[: RolloutConfig.fewshot], solver_config)

    def __call__(self, prompts: Sequence, completions: Sequence, **columns) -> list[float]:
        return [puzzle.reward for puzzle in self._scored(completions)]

    def difficulty(self, prompts: Sequence, completions: Sequence, **columns) -> list[float]:
        """R_d of each completion, for TRL to log beside R: pass it after the reward itself with weight 0
        (`reward_funcs=[setter, setter.difficulty, setter.novelty], reward_weights=[1, 0, 0]`); the completions that
        the reward has just scored are not scored again."""
        return [puzzle.r_difficulty for puzzle in self._scored(completions)]

    def novelty(self, prompts: Sequence, completions: Sequence, **columns) -> list[float]:
        """R_n of each completion, for TRL to log beside R (as `difficulty`)."""
        return [puzzle.r_novelty for puzzle in self._scored(completions)]

    def _scored(self, completions: Sequence) -> list:
        """Each completion scored once: TRL hands every reward function of a step the same list of completions, and
        scoring it again would add its puzzles to the archive again."""
        if self.last is not None and self.last[0] is completions:
            return self.last[1]
        texts = [_cut(text, SETTER_STOP).lstrip("\n") for text in _texts(completions, "SetterReward")]
        judged = judge_puzzles(texts, self.solver)
        distances = novelty_distances(texts, self.archive, self.embedder)
        scored = reward_puzzles(texts, judged, distances, self.reference_distance, self.reward)
        self.last = completions, scored  # (the list itself is kept: its id is never another list's meanwhile)
        return scored


def _texts(completions: Sequence, reward: str) -> list[str]:
    if not all(isinstance(completion, str) for completion in completions):
        raise TypeError(f"{reward} takes text completions of prompts the model continues, not chat messages")
    return list(completions)


def _cut(text: str, stop_strings: tuple[str, ...]) -> str:
    """`text` before its earliest stop string, as the sampler cuts a continuation."""
    return text[: min((text.find(stop) for stop in stop_strings if stop in text), default=len(text))]
