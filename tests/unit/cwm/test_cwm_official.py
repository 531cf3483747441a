"""The official replay buffers: read without torch or arbitrary code, their contents as the research
notes measured them, and reproduced by the true environment (fixtures: tests/fixtures/cwm_official)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from support import FIXTURES

from codeplay_lightning.cwm.official import read_official_buffer
from codeplay_lightning.cwm.transitions import Transitions

FIXTURES = FIXTURES / "cwm_official"
# env id: (transitions, trajectories, terminated, truncated) per the notes' table (§1.4)
COUNTS = {
    "Blackjack-v1": (15, 10, 10, 0),
    "CartPole-v1": (402, 10, 10, 0),
    "Taxi-v3": (1574, 10, 5, 5),
    "MountainCar-v0": (1777, 10, 5, 5),
    "Pendulum-v1": (1000, 10, 0, 0),
    "HalfCheetah-v4": (1000, 10, 0, 0),
}


def official(env_id: str) -> Transitions:
    return Transitions.load(FIXTURES / f"{env_id}.npz")


@pytest.mark.parametrize("env_id", ["Blackjack-v1", "CartPole-v1"])
def test_the_reader_gives_the_converted_fixture(env_id):
    read, stored = read_official_buffer(FIXTURES / f"{env_id}.pkl", env_id), official(env_id)
    assert (read.env_id, read.observation_kind, read.discrete_actions) == (
        env_id,
        stored.observation_kind,
        stored.discrete_actions,
    )
    for name in (
        "observations",
        "actions",
        "next_observations",
        "rewards",
        "terminated",
        "truncated",
        "episodes",
        "split",
        "unpredictable",
    ):
        assert np.array_equal(getattr(read, name), getattr(stored, name)), name
        assert getattr(read, name).dtype == getattr(stored, name).dtype, name


def test_blackjack_as_recorded():
    data = official("Blackjack-v1")
    assert data.observation_kind == "tuple" and data.observations.shape == (15, 3)
    assert data.rewards.dtype == np.float32 and sorted(set(data.rewards.tolist())) == [-1.0, 0.0, 1.0]
    assert np.bincount(data.episodes).tolist() == [2, 1, 1, 1, 2, 1, 4, 1, 1, 1]


@pytest.mark.parametrize("env_id", list(COUNTS))
def test_counts_contiguity_and_flags(env_id):
    data = official(env_id)
    assert (len(data), data.episodes.max() + 1, data.terminated.sum(), data.truncated.sum()) == COUNTS[env_id]
    same_episode = data.episodes[1:] == data.episodes[:-1]
    assert np.array_equal(data.next_observations[:-1][same_episode], data.observations[1:][same_episode])
    assert not (data.terminated & data.truncated).any() and (data.split == "search").all()
    ends = np.append(~same_episode, True)
    assert not (data.done & ~ends).any()  # a done only ever ends a trajectory
    first = np.insert(~same_episode, 0, True)
    assert np.array_equal(data.unpredictable, first if env_id == "HalfCheetah-v4" else np.zeros(len(data), bool))


def test_truncations_are_the_time_limit_dones():
    for env_id, limit in (("Taxi-v3", 200), ("MountainCar-v0", 200)):
        data = official(env_id)
        lengths = np.bincount(data.episodes)
        assert sorted(lengths[data.episodes[data.truncated]].tolist()) == [limit] * 5
        assert (lengths[data.episodes[data.terminated]] < limit).all()


class _Evil:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


def test_a_pickle_calling_anything_else_is_refused_unrun(tmp_path):
    marker = tmp_path / "ran"
    evil = tmp_path / "train_buffer.pkl"
    evil.write_bytes(pickle.dumps({"idx": 1, "obs": [_Evil(marker)]}))
    with pytest.raises(ValueError, match=r"refers to (posix|os)\.system, which a CWMB replay buffer does not hold"):
        read_official_buffer(evil, "CartPole-v1")
    assert not marker.exists()
    evil.write_bytes(pickle.dumps({"idx": 1, "obs": [np.load]}))
    with pytest.raises(ValueError, match=r"numpy.*load"):
        read_official_buffer(evil, "CartPole-v1")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Taxi-v3", "Pendulum-v1", "HalfCheetah-v4"])
def test_the_true_environment_reproduces_the_official_transitions(env_id):
    """Taxi bit for bit; the float32 classic-control states within a float32 rounding (the real env
    steps from float64 state the observation rounds); HalfCheetah except the first transition of each
    trajectory, which the official collector stepped from the initial pose instead (bug 2)."""
    pytest.importorskip("gymnasium")
    if env_id == "HalfCheetah-v4":
        pytest.importorskip("mujoco")
    from codeplay_lightning.cwm.oracle import true_predictions

    data = official(env_id)
    predictions = true_predictions(data)
    recorded_rewards = data.rewards.astype(np.float64)
    assert np.array_equal(predictions.dones, data.terminated)
    if env_id == "Taxi-v3":
        assert np.array_equal(predictions.next_observations, data.next_observations)
        assert np.array_equal(predictions.rewards, recorded_rewards)
        return
    tolerance = {"CartPole-v1": 1e-6, "Pendulum-v1": 1e-6, "HalfCheetah-v4": 1e-5}[env_id]
    states = np.isclose(predictions.next_observations, data.next_observations, rtol=tolerance, atol=tolerance).all(1)
    rewards = np.isclose(predictions.rewards, recorded_rewards, rtol=1e-5, atol=1e-5)  # recorded as float32
    assert np.array_equal(states & rewards, ~data.unpredictable)


@pytest.mark.parametrize(
    ("env_id", "official_ceiling"),
    [
        ("CartPole-v1", 1.0),
        ("Taxi-v3", 0.9986),
        ("MountainCar-v0", 0.9986),
        ("Pendulum-v1", 0.6667),
        ("HalfCheetah-v4", 0.6633),
    ],
)
def test_the_true_environment_scores_the_official_ceilings_and_one_under_ours(env_id, official_ceiling):
    """The official metric reproduced: the perfect model's scores measured on the official code's own
    metric (truncation dones, exact float32 rewards, corrupted first MuJoCo transitions); ours: 1."""
    pytest.importorskip("mujoco" if env_id == "HalfCheetah-v4" else "gymnasium")
    from codeplay_lightning.cwm import metric
    from codeplay_lightning.cwm.oracle import true_predictions

    data = official(env_id)
    predictions = true_predictions(data)
    assert metric.official_accuracy(data, predictions) == pytest.approx(official_ceiling, abs=5e-5)
    assert metric.accuracy(data, predictions) == 1.0
