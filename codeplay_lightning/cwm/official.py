"""The official CWMB replay buffers (`data/replay_buffers/gymnasium_envs/<env>/train_buffer.pkl` of
nicoladainese96/code-world-models) as `Transitions`.

A buffer is `pickle.dump(ReplayBuffer.__dict__)` (research notes §1.4): lists of observations and
actions, float32 rewards and `dones` over a `capacity` of which only the first `idx` are valid, and
`traj_starts`. It also pickles a `torch.device` and, in every transition's info, a gymnasium space;
`_BufferUnpickler` replaces those by an inert stub, so neither torch nor gymnasium is needed, and
refuses every other global, so loading a buffer runs no code of its own.

The buffers record `done = terminated or truncated`: a done at the environment's TimeLimit
(`EnvSpec.max_steps`) is read as a truncation. The first transition of every MuJoCo trajectory was
stepped from the env's initial pose instead of its observation (bug 2 of §5.3) and is marked
`unpredictable`. Every transition is in the split "search": the official search scored its
programs on all of them.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from codeplay_lightning.cwm.envs import ENVS
from codeplay_lightning.cwm.transitions import Transitions, observation_row

_NUMPY = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}
_STUBBED = {
    ("torch", "device"),
    ("gymnasium.spaces.discrete", "Discrete"),
    ("gymnasium.spaces.box", "Box"),
    ("numpy.random._pickle", "__generator_ctor"),
    ("numpy.random._pickle", "__bit_generator_ctor"),
}


class _Inert:
    """Stands for a pickled object the buffer's transitions do not need; keeps nothing."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __setstate__(self, state) -> None:
        pass


class _BufferUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _NUMPY:
            return super().find_class(module, name)
        if (module, name) in _STUBBED:
            return _Inert
        raise ValueError(f"the buffer refers to {module}.{name}, which a CWMB replay buffer does not hold")


def read_official_buffer(path: Path, env_id: str) -> Transitions:
    """The valid transitions of an official `train_buffer.pkl` of `env_id`, in buffer order."""
    spec = ENVS[env_id]
    with open(path, "rb") as file:
        buffer = _BufferUnpickler(file).load()
    n = buffer["idx"]
    observations = np.array([observation_row(observation) for observation in buffer["obs"][:n]])
    next_observations = np.array([observation_row(observation) for observation in buffer["next_obs"][:n]])
    actions = np.array(buffer["actions"][:n], dtype=np.int64 if spec.discrete_actions else np.float64)
    dones = np.asarray(buffer["dones"][:n], dtype=bool)
    starts = np.asarray(buffer["traj_starts"][:n], dtype=np.int64)
    position = np.arange(n) - starts  # of each transition in its trajectory
    truncated = dones & (position + 1 == spec.max_steps)  # in the buffers: Taxi, MountainCar, Acrobot, Reacher, Pusher
    first_of_trajectory = position == 0
    return Transitions(
        env_id,
        spec.observation_kind,
        spec.discrete_actions,
        observations,
        actions,
        next_observations,
        np.asarray(buffer["rewards"][:n], dtype=np.float32),
        dones & ~truncated,
        truncated,
        np.unique(starts, return_inverse=True)[1].astype(np.int64),
        np.full(n, "search"),
        first_of_trajectory & spec.mujoco,
    )
