"""Collecting the CWMB transitions: seeded, split by episode, truncation apart from termination, and a
better-than-random policy that really is better."""

from __future__ import annotations

import numpy as np
import pytest

from codeplay_lightning.cwm.collect import build, collect, episode_returns
from codeplay_lightning.cwm.envs import ENVS
from codeplay_lightning.cwm.transitions import Transitions

pytest.importorskip("gymnasium")


@pytest.fixture(scope="module")
def collected() -> dict[str, Transitions]:
    return {env_id: collect(env_id, seed=0) for env_id in ("CartPole-v1", "MountainCar-v0", "Pendulum-v1", "Taxi-v3")}


@pytest.mark.parametrize("env_id", ["CartPole-v1", "MountainCar-v0", "Pendulum-v1", "Taxi-v3"])
def test_the_better_policy_beats_the_random_one(collected, env_id):
    returns = episode_returns(collected[env_id])
    assert len(returns) == 10 and returns[5:].mean() > returns[:5].mean()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "MountainCar-v0", "Pendulum-v1", "Taxi-v3"])
def test_episodes_splits_and_flags(collected, env_id):
    data, spec = collected[env_id], ENVS[env_id]
    cap = spec.max_steps if spec.discrete_actions else 100
    assert np.array_equal(np.unique(data.episodes), np.arange(10))
    assert np.all(np.diff(data.episodes) >= 0)
    heldout = np.unique(data.episodes[data.split == "heldout"]).tolist()
    assert heldout == [4, 9] and set(data.split.tolist()) == {"search", "heldout"}
    assert data.rewards.dtype == np.float64 and data.observations.dtype == np.float64
    assert data.actions.dtype == (np.int64 if spec.discrete_actions else np.float64)
    same_episode = data.episodes[1:] == data.episodes[:-1]
    assert np.array_equal(data.next_observations[:-1][same_episode], data.observations[1:][same_episode])
    ends = np.append(~same_episode, True)
    assert np.array_equal(data.done, ends)  # every episode ends once, at its last transition
    lengths = np.bincount(data.episodes)
    assert not (data.terminated & data.truncated).any()
    assert np.array_equal(data.truncated, ends & (lengths[data.episodes] == cap) & ~data.terminated)
    assert (lengths <= cap).all() and not data.unpredictable.any()


def test_collection_is_a_function_of_the_seed():
    first, again, other = (collect("MountainCar-v0", seed) for seed in (3, 3, 4))
    assert np.array_equal(first.observations, again.observations) and np.array_equal(first.actions, again.actions)
    assert not np.array_equal(first.observations[0], other.observations[0])


def test_pendulum_transitions_are_the_true_environments(collected):
    from codeplay_lightning.cwm.oracle import true_predictions

    data = collected["Pendulum-v1"]
    predictions = true_predictions(data)
    np.testing.assert_allclose(predictions.next_observations, data.next_observations, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(predictions.rewards, data.rewards, rtol=1e-6, atol=1e-6)


def test_build_writes_each_environment_and_a_summary_row(tmp_path):
    rows = build(tmp_path / "data", ["Blackjack-v1", "CliffWalking-v0"], seed=0)
    assert [row["env"] for row in rows] == ["Blackjack-v1", "CliffWalking-v0"]
    for row in rows:
        data = Transitions.load(tmp_path / "data" / f"{row['env']}.npz")
        assert row["transitions"] == len(data) == row["search"] + row["heldout"] and row["episodes"] == 10
        returns = episode_returns(data)
        assert row["random_return"] == pytest.approx(returns[:5].mean())
        assert row["better_return"] == pytest.approx(returns[5:].mean()) and row["seconds"] >= 0
    cliff = Transitions.load(tmp_path / "data" / "CliffWalking-v0.npz")
    assert cliff.terminated[cliff.episodes >= 5].sum() == 5  # the shortest-path policy reaches the goal every time
