"""The two CWM metrics against naive per-transition loops written from their definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from codeplay_lightning.cwm.metric import Predictions, accuracy, first_wrong, official_accuracy, official_scores, scores
from codeplay_lightning.cwm.transitions import Transitions


def transitions(kind: str, n: int = 40, dimension: int = 3, seed: int = 0) -> Transitions:
    rng = np.random.default_rng(seed)
    integer = kind in ("int", "tuple")
    observations = rng.integers(0, 9, (n, dimension)) if integer else rng.normal(size=(n, dimension))
    next_observations = rng.integers(0, 9, (n, dimension)) if integer else rng.normal(size=(n, dimension))
    terminated, truncated = rng.random(n) < 0.15, rng.random(n) < 0.1
    return Transitions(
        "Test-v0",
        kind,
        True,
        observations.astype(np.float64),
        rng.integers(0, 2, n),
        next_observations.astype(np.float64),
        rng.choice([-1.0, 0.0, 20.0], n).astype(np.float32),
        terminated,
        truncated & ~terminated,
        np.arange(n) // 10,
        np.full(n, "search"),
        rng.random(n) < 0.1,
    )


def perturbed(data: Transitions, seed: int = 1) -> Predictions:
    """Predictions right about half the time in each component, wrong by more or less than 1e-5."""
    rng = np.random.default_rng(seed)
    n = len(data)
    next_observations = data.next_observations + rng.choice([0.0, 5e-7, 1e-3, 2.0], data.next_observations.shape)
    rewards = data.rewards.astype(np.float64) + rng.choice([0.0, 3e-6, 0.5], n)
    dones = np.where(rng.random(n) < 0.5, data.done, rng.random(n) < 0.5)
    return Predictions(next_observations, rewards, dones)


def naive_official(data: Transitions, predictions: Predictions) -> float:
    """The official metric as its notes state it, one transition at a time."""
    exact = data.observation_kind in ("int", "tuple")
    per_transition, weights = [], []
    for i in range(len(data)):
        recorded_reward = float(data.rewards[i])
        reward_right = int(predictions.rewards[i] == recorded_reward)
        done_right = int(bool(predictions.dones[i]) == bool(data.terminated[i] or data.truncated[i]))
        if data.terminated[i] or data.truncated[i]:
            score = 0.5 * reward_right + 0.5 * done_right
        else:
            matched = 0
            for predicted, recorded in zip(predictions.next_observations[i], data.next_observations[i]):
                close = abs(predicted - recorded) <= 1e-5 + 1e-5 * abs(recorded)
                matched += int(predicted == recorded) if exact else int(close)
            score = matched / data.next_observations.shape[1] / 3 + reward_right / 3 + done_right / 3
        per_transition.append(score)
        weights.append(1 / sum(float(r) == recorded_reward for r in data.rewards))
    return sum(w * s for w, s in zip(weights, per_transition)) / sum(weights)


def naive_ours(data: Transitions, predictions: Predictions) -> float:
    exact = data.observation_kind in ("int", "tuple")
    total, counted = 0.0, 0
    for i in range(len(data)):
        if data.unpredictable[i]:
            continue
        pairs = zip(predictions.next_observations[i], data.next_observations[i])
        state = all(p == r if exact else math.isclose(p, r, rel_tol=0, abs_tol=1e-5 + 1e-5 * abs(r)) for p, r in pairs)
        reward = abs(predictions.rewards[i] - float(data.rewards[i])) <= 1e-5 + 1e-5 * abs(float(data.rewards[i]))
        done = bool(predictions.dones[i]) == bool(data.terminated[i])
        total, counted = total + (int(state) + int(reward) + int(done)) / 3, counted + 1
    return total / counted


@pytest.mark.parametrize("kind", ["int", "tuple", "float32", "float64"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_match_naive_loops(kind, seed):
    data = transitions(kind, dimension=1 if kind == "int" else 3, seed=seed)
    predictions = perturbed(data, seed=seed + 10)
    assert official_accuracy(data, predictions) == pytest.approx(naive_official(data, predictions), abs=1e-12)
    assert accuracy(data, predictions) == pytest.approx(naive_ours(data, predictions), abs=1e-12)
    assert 0.2 < accuracy(data, predictions) < 0.9  # the perturbation really is partial


def test_a_perfect_model():
    data = transitions("float32")
    exact = Predictions(data.next_observations.copy(), data.rewards.astype(np.float64), data.terminated.copy())
    assert accuracy(data, exact) == 1.0 and first_wrong(data, exact) is None
    # the official metric wants the time-limit dones predicted too
    assert official_accuracy(data, exact) < 1.0
    assert official_accuracy(data, Predictions(exact.next_observations, exact.rewards, data.done.copy())) == 1.0


def test_float32_rewards_cap_the_official_metric_at_two_thirds():
    """Pendulum's case: rewards recorded as float32, a model computing them in float64, no dones."""
    rng = np.random.default_rng(0)
    true_rewards = -rng.random(200) * 16
    data = transitions("float32", n=200)
    data.rewards, data.terminated, data.truncated = (
        true_rewards.astype(np.float32),
        np.zeros(200, bool),
        np.zeros(200, bool),
    )
    model = Predictions(data.next_observations.copy(), true_rewards, np.zeros(200, bool))
    assert official_accuracy(data, model) == pytest.approx(2 / 3)
    data.unpredictable[:] = False
    assert accuracy(data, model) == 1.0


def test_rare_rewards_weigh_as_much_as_common_ones():
    data = transitions("int", n=100, dimension=1)
    data.rewards = np.where(np.arange(100) < 5, 20.0, -1.0).astype(np.float32)
    right = Predictions(data.next_observations.copy(), data.rewards.astype(np.float64), data.done.copy())
    wrong_on_rare = Predictions(right.next_observations, np.where(np.arange(100) < 5, 0.0, right.rewards), right.dones)
    scores_rare = official_scores(data, wrong_on_rare)[:5]
    assert official_accuracy(data, wrong_on_rare) == pytest.approx((scores_rare.mean() + 1.0) / 2)


def test_unpredictable_transitions_are_left_out_and_never_the_first_wrong():
    data = transitions("float64")
    data.unpredictable[:] = False
    data.unpredictable[0] = True
    predictions = Predictions(data.next_observations.copy(), data.rewards.astype(np.float64), data.terminated.copy())
    predictions.next_observations[0] += 1.0
    predictions.rewards[7] += 1.0
    assert math.isnan(scores(data, predictions)[0]) and first_wrong(data, predictions) == 7
    assert accuracy(data, predictions) == pytest.approx(1 - 1 / 3 / (len(data) - 1))


def test_predictions_of_the_wrong_shape_are_refused():
    data = transitions("float64")
    with pytest.raises(ValueError, match="predictions"):
        official_accuracy(data, Predictions(np.zeros((len(data), 2)), np.zeros(len(data)), np.zeros(len(data), bool)))
