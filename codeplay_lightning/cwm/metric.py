"""CWM accuracy: a model's predictions scored against recorded transitions, per transition and overall.

Two metrics, both reported:

- `official_scores` / `official_accuracy` reproduce the official implementation's metric exactly
  (research notes §3): a transition recorded as done scores ½·[r̂ = r] + ½·[d̂ = d] and ignores the
  next state; any other scores ⅓·(share of next-state dimensions matched) + ⅓·[r̂ = r] + ⅓·[d̂ = d];
  dimensions match exactly for int and tuple observations, within rtol = atol = 1e-5 otherwise;
  rewards must be *exactly* equal to the recorded (often float32) value; `done` is terminated or
  truncated; the mean weights every distinct reward value equally. So the true environment itself
  scores 0.667 on Pendulum and 0.9986 on Taxi.
- `scores` / `accuracy` are ours, the paper's formula with its flaws removed: ⅓·[ŝ' ≈ s'] + ⅓·[r̂ ≈ r]
  + ⅓·[d̂ = terminated] (whole next state, rewards within the same tolerance, a time limit is not
  the model's to predict), a plain mean, and transitions marked `unpredictable` left out. Under it
  the true environment scores 1.0 wherever the observation holds the whole state (12 of the 18
  environments; the others, and why, are in oracle.py).

Predictions come from `harness.py`, which has already refused malformed ones (a next state of
the wrong size, a reward that is not a number): a model that returns them has a bug, not a score.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codeplay_lightning.cwm.transitions import Transitions

TOLERANCE = 1e-5  # rtol and atol of every approximate comparison, the official one's for states


@dataclass
class Predictions:
    """A model's outputs for every transition of a `Transitions`, in the same order."""

    next_observations: np.ndarray  # (N, D) float64
    rewards: np.ndarray  # (N,) float64
    dones: np.ndarray  # (N,) bool

    def __post_init__(self) -> None:
        n = len(self.rewards)
        if self.next_observations.ndim != 2 or len(self.next_observations) != n or self.dones.shape != (n,):
            raise ValueError("predictions need a next observation, a reward and a done flag per transition")


def official_scores(transitions: Transitions, predictions: Predictions) -> np.ndarray:
    """The official per-transition score: partial credit per next-state dimension, exact rewards."""
    _check(transitions, predictions)
    exact_states = transitions.observation_kind in ("int", "tuple")
    if exact_states:
        dimension_match = predictions.next_observations == transitions.next_observations
    else:
        dimension_match = _close(predictions.next_observations, transitions.next_observations)
    reward_match = predictions.rewards == transitions.rewards.astype(np.float64)  # float32 widened exactly
    done_match = predictions.dones == transitions.done
    terminal = 0.5 * reward_match + 0.5 * done_match
    ongoing = (dimension_match.mean(axis=1) + reward_match + done_match) / 3
    return np.where(transitions.done, terminal, ongoing)


def official_accuracy(transitions: Transitions, predictions: Predictions) -> float:
    """The official mean: every distinct recorded reward value carries the same total weight."""
    values, inverse, counts = np.unique(transitions.rewards, return_inverse=True, return_counts=True)
    weights = 1.0 / counts[inverse]
    return float(np.average(official_scores(transitions, predictions), weights=weights))


def transition_correct(transitions: Transitions, predictions: Predictions) -> np.ndarray:
    """(N, 3) bool: next state, reward and termination each right, under our metric."""
    _check(transitions, predictions)
    if transitions.observation_kind in ("int", "tuple"):
        state = (predictions.next_observations == transitions.next_observations).all(axis=1)
    else:
        state = _close(predictions.next_observations, transitions.next_observations).all(axis=1)
    reward = _close(predictions.rewards, transitions.rewards.astype(np.float64))
    done = predictions.dones == transitions.terminated
    return np.stack([state, reward, done], axis=1)


def scores(transitions: Transitions, predictions: Predictions) -> np.ndarray:
    """Our per-transition score (⅓ per right component); NaN for an unpredictable transition."""
    return np.where(transitions.unpredictable, np.nan, transition_correct(transitions, predictions).mean(axis=1))


def accuracy(transitions: Transitions, predictions: Predictions) -> float:
    """Our mean over the predictable transitions (NaN when there are none)."""
    per_transition = scores(transitions, predictions)
    predictable = per_transition[~np.isnan(per_transition)]
    return float(predictable.mean()) if len(predictable) else float("nan")


def first_wrong(transitions: Transitions, predictions: Predictions) -> int | None:
    """The first predictable transition, in recording order, the model gets wrong in any component."""
    wrong = ~transition_correct(transitions, predictions).all(axis=1) & ~transitions.unpredictable
    return int(np.argmax(wrong)) if wrong.any() else None


def _close(predicted: np.ndarray, recorded: np.ndarray) -> np.ndarray:
    return np.isclose(predicted, recorded, rtol=TOLERANCE, atol=TOLERANCE)  # NaN is never close


def _check(transitions: Transitions, predictions: Predictions) -> None:
    if predictions.next_observations.shape != transitions.next_observations.shape:
        raise ValueError(
            f"{len(predictions.rewards)} predictions of {predictions.next_observations.shape[1:]} "
            f"for {len(transitions)} transitions of {transitions.next_observations.shape[1:]}"
        )
