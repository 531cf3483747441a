"""`Transitions`: one environment's recorded transitions, in recording order, as plain arrays.

Observations are stored as rows of numbers whatever the environment's own format (an int, a tuple
of ints, a float32 or float64 vector); `observation_kind` says how to turn a row back into that
format, which is what a Code World Model's `set_state` receives and what its `step` must return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

OBSERVATION_KINDS = ("int", "tuple", "float32", "float64")
SPLITS = ("search", "heldout")


@dataclass
class Transitions:
    env_id: str
    observation_kind: str  # one of OBSERVATION_KINDS
    discrete_actions: bool
    observations: np.ndarray  # (N, D): a row per transition; D = 1 for an int observation
    actions: np.ndarray  # (N,) int64 for discrete actions, else (N, A) float64
    next_observations: np.ndarray  # (N, D)
    rewards: np.ndarray  # (N,) in the dtype they were recorded in (the official buffers: float32)
    terminated: np.ndarray  # (N,) bool: the episode ended by the environment's own rule
    truncated: np.ndarray  # (N,) bool: ended by a time limit (or the collector): no (s, a) function predicts it
    episodes: np.ndarray  # (N,) int64: the trajectory each transition belongs to, numbered from 0
    split: np.ndarray  # (N,) str: "search" (shown to the LLM, used to choose programs) or "heldout"
    unpredictable: np.ndarray = field(default=None)  # (N,) bool: transitions no model of (s, a) can reproduce

    def __post_init__(self) -> None:
        if self.unpredictable is None:
            self.unpredictable = np.zeros(len(self.rewards), dtype=bool)

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def done(self) -> np.ndarray:
        """What the official buffers record as `done`: terminated or truncated."""
        return self.terminated | self.truncated

    def select(self, mask: np.ndarray) -> Transitions:
        """The transitions where `mask` holds, in order."""
        return Transitions(
            self.env_id, self.observation_kind, self.discrete_actions, *(getattr(self, name)[mask] for name in _ARRAYS)
        )

    def of_split(self, split: str) -> Transitions:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        return self.select(self.split == split)

    def save(self, path: Path) -> None:
        np.savez_compressed(
            path,
            env_id=self.env_id,
            observation_kind=self.observation_kind,
            discrete_actions=self.discrete_actions,
            **{name: getattr(self, name) for name in _ARRAYS},
        )

    @classmethod
    def load(cls, path: Path) -> Transitions:
        with np.load(path, allow_pickle=False) as data:
            return cls(
                str(data["env_id"]),
                str(data["observation_kind"]),
                bool(data["discrete_actions"]),
                *(data[name] for name in _ARRAYS),
            )


def observation_row(observation) -> np.ndarray:
    """An observation in any of the environments' formats as a row of float64 (`Transitions`' form)."""
    return np.asarray(observation, dtype=np.float64).ravel()


def play(env, plan_from: Callable[[object, np.ndarray, int], list], reset_seed: int, max_steps: int) -> Iterator[tuple]:
    """The steps of one episode from `env.reset(seed=reset_seed)` as (observation row, action, next
    observation row, reward, terminated, truncated), to termination, truncation or `max_steps`.
    `plan_from(env, observation row, step)` gives actions, each plan played out before the next is asked."""
    observation, _ = env.reset(seed=reset_seed)
    plan: list = []
    for step in range(max_steps):
        row = observation_row(observation)
        if not plan:
            plan = plan_from(env, row, step)
        action = plan.pop(0)
        observation, reward, terminated, truncated, _ = env.step(action)
        yield row, action, observation_row(observation), float(reward), terminated, truncated
        if terminated or truncated:
            return


_ARRAYS = (
    "observations",
    "actions",
    "next_observations",
    "rewards",
    "terminated",
    "truncated",
    "episodes",
    "split",
    "unpredictable",
)
