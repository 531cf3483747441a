"""The reward functions against hand computations."""

from __future__ import annotations

import doctest
import math
from typing import get_args

import pytest
from support import CONFIGS

from codeplay_lightning.config import ConfigError, load_config
from codeplay_lightning.rewards import DifficultyReward, difficulty_reward, functions, novelty_reward, total_reward


def test_doctests_pass():
    assert doctest.testmod(functions).failed == 0


@pytest.mark.parametrize(
    "difficulty, valid, expected",
    [
        (1.0, True, 0.0),  # solved on every attempt: trivial
        (2.0, True, 0.5),  # ½(1 − cos(π/2))
        (3.0, True, 1.0),  # ½(1 − cos(π))
        (10.0, True, 1.0),  # the ramp is flat from D = 3 on
        (math.inf, True, -1.0),  # parsed but never solved
        (math.inf, False, -1.0),  # invalid
        (1.0, False, -1.0),  # invalid: the difficulty is not read
    ],
)
def test_difficulty_reward_by_hand(difficulty, valid, expected):
    assert difficulty_reward(difficulty, valid) == pytest.approx(expected, abs=1e-12)


def test_difficulty_ramp_is_continuous_and_monotonic():
    grid = [1 + 3 * step / 3000 for step in range(3001)]  # D from 1 to 4
    rewards = [difficulty_reward(difficulty, valid=True) for difficulty in grid]
    assert all(later >= earlier for earlier, later in zip(rewards, rewards[1:]))
    assert max(later - earlier for earlier, later in zip(rewards, rewards[1:])) < 2e-3  # no jump
    assert rewards[0] == 0 and rewards[-1] == 1
    assert difficulty_reward(3 - 1e-9, valid=True) == pytest.approx(1, abs=1e-12)  # continuous at D = 3


@pytest.mark.parametrize("difficulty", [0.5, 0.999, -1.0, math.nan])
def test_difficulty_below_one_is_rejected(difficulty):
    with pytest.raises(ValueError, match="≥ 1 or inf"):
        difficulty_reward(difficulty, valid=True)


def test_novelty_reward_by_hand():
    five = [0.1, 0.2, 0.3, 0.4, 0.5]  # mean 0.3
    assert novelty_reward(five, reference_mean_distance=0.6) == pytest.approx(0.5)
    assert novelty_reward([0.2, 0.4], reference_mean_distance=0.6) == pytest.approx(0.5)  # k = 2 < 5: mean of 2
    assert novelty_reward([0.9], reference_mean_distance=0.6) == pytest.approx(1.5)  # R_n may exceed 1
    assert novelty_reward([], reference_mean_distance=0.6) == 1.0  # empty archive: neutral


@pytest.mark.parametrize("reference", [0.0, -0.5, math.nan])
def test_novelty_rejects_a_non_positive_reference(reference):
    with pytest.raises(ValueError, match="reference_mean_distance must be > 0"):
        novelty_reward([0.3], reference)


def test_total_reward_by_hand():
    assert total_reward(0.5, 0.8, w_d=1, w_n=1, combine="sum") == pytest.approx(1.3)
    assert total_reward(0.5, 0.8, w_d=0.5, w_n=1.5, combine="sum") == pytest.approx(1.45)
    assert total_reward(0.5, 0.8, w_d=0, w_n=0, combine="sum") == 0
    assert total_reward(0.5, 0.8, w_d=1, w_n=1, combine="product") == pytest.approx(0.4)
    assert total_reward(0.0, 0.8, w_d=1, w_n=1, combine="product") == 0  # trivial: no reward for novelty


def test_invalid_puzzles_keep_their_penalty_in_both_combinations():
    r_d = difficulty_reward(math.inf, valid=False)
    assert total_reward(r_d, 0.8, w_d=1, w_n=1, combine="sum") == pytest.approx(-0.2)
    assert total_reward(r_d, 0.8, w_d=1, w_n=1, combine="product") == pytest.approx(-0.8)
    assert total_reward(r_d, 0.0, w_d=1, w_n=1, combine="product") == 0  # an invalid copy of an archived puzzle


def test_total_reward_rejects_bad_settings():
    with pytest.raises(ValueError, match="has no weights"):
        total_reward(0.5, 0.8, w_d=0.5, w_n=1.5, combine="product")
    with pytest.raises(ValueError, match="'sum' or 'product'"):
        total_reward(0.5, 0.8, w_d=1, w_n=1, combine="mean")


def _naive_difficulty_rewards(attempts: int, passes: int) -> dict[str, float]:
    """Each kind from its paper's definition over (N_a, passes), with no use of D."""
    share = passes / attempts
    return {
        "codeplay": -1.0 if passes == 0 else 0.5 * (1 - math.cos(math.pi * min(attempts / passes - 1, 2) / 2)),
        "learnability": 0.0 if passes in (0, attempts) else 1 - share,  # Absolute Zero, eq. 4
        "uncertainty": 1 - 2 * abs(share - 0.5),  # R-Zero
    }


@pytest.mark.parametrize("attempts", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("kind", ["codeplay", "learnability", "uncertainty"])
def test_every_difficulty_kind_against_its_definition(attempts, kind):
    for passes in range(attempts + 1):
        difficulty = attempts / passes if passes else math.inf
        expected = _naive_difficulty_rewards(attempts, passes)[kind]
        assert difficulty_reward(difficulty, valid=True, difficulty=kind) == pytest.approx(expected, abs=1e-12)
        assert difficulty_reward(difficulty, valid=False, difficulty=kind) == -1.0  # invalid: always the worst


def test_learnability_and_uncertainty_by_hand():
    rows = [(4, passes) for passes in range(5)]
    learnability = [difficulty_reward(a / p if p else math.inf, True, "learnability") for a, p in rows]
    uncertainty = [difficulty_reward(a / p if p else math.inf, True, "uncertainty") for a, p in rows]
    assert learnability == pytest.approx([0, 0.75, 0.5, 0.25, 0])
    assert uncertainty == pytest.approx([0, 0.5, 1, 0.5, 0])


def test_a_search_difficulty_is_a_rate_of_one_solution_per_d_calls():
    # a search solved at its 2nd call: s = 1/2, as two samples per solution
    assert difficulty_reward(2.0, True, "uncertainty") == 1.0
    assert difficulty_reward(2.0, True, "learnability") == 0.5
    assert difficulty_reward(1.0, True, "learnability") == 0.0  # solved by the first call: trivial


def test_every_difficulty_kind_the_config_takes_has_a_reward_and_no_other():
    assert set(functions.DIFFICULTY_REWARDS) == set(get_args(DifficultyReward))
    with pytest.raises(ConfigError, match="Invalid value 'hardness'"):
        load_config([CONFIGS / "balanced.yaml"], ["reward.difficulty=hardness"])
