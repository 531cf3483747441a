"""Planning with models: the sandboxed planning entry, episodes in the real environment, and R."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cwm_support import CARTPOLE_MODEL

from codeplay_lightning.cwm.plan import (
    CPU,
    PLAN_ENTRY,
    PlanningSettings,
    evaluate_planning,
    model_policy,
    normalised_return,
    plan_program,
    true_model_policy,
)
from codeplay_lightning.execution import Call

pytest.importorskip("gymnasium")


def test_normalised_return_against_its_definition():
    random_returns, true_returns, model_returns = [1.0, 3.0], [10.0, 12.0], [6.0, 7.0]
    value, error = normalised_return(random_returns, true_returns, model_returns, seed=0)
    assert value == pytest.approx((6.5 - 2.0) / (11.0 - 2.0))
    rng = np.random.default_rng(0)  # the same resampling, written out
    resampled = []
    means = [
        np.asarray(group)[rng.integers(2, size=(1000, 2))].mean(axis=1)
        for group in (random_returns, true_returns, model_returns)
    ]
    for r, t, m in zip(*means):
        resampled.append(float("nan") if abs(t - r) <= 1e-9 else (m - r) / (t - r))
    assert error == pytest.approx(float(np.nanstd(resampled)))
    assert all(math.isnan(x) for x in normalised_return([2.0, 2.0], [2.0, 2.0], [5.0, 1.0]))


def test_the_sandboxed_planner_pushes_a_falling_pole_back(numpy_sandbox):
    """Pole leaning right and falling right: MCTS on the model pushes the cart right (action 1)."""
    request = {
        "kind": "float32",
        "discrete": True,
        "dimension": 4,
        "observation": [0.0, 0.0, 0.1, 0.5],
        "seed": 0,
        "n_actions": 2,
        "settings": CPU.mcts(),
    }
    (verdict,) = numpy_sandbox.apply([Call(plan_program(CARTPOLE_MODEL), PLAN_ENTRY, request)])
    assert (verdict.status, verdict.value) == ("returned", 1)
    request["observation"] = [0.0, 0.0, -0.1, -0.5]
    (verdict,) = numpy_sandbox.apply([Call(plan_program(CARTPOLE_MODEL), PLAN_ENTRY, request)])
    assert (verdict.status, verdict.value) == ("returned", 0)


def test_planning_with_a_written_model_balances_the_real_cartpole(numpy_sandbox):
    settings = PlanningSettings(episodes=2, max_steps=60, simulations=10, rollout_steps=20)
    policy = model_policy("CartPole-v1", CARTPOLE_MODEL, numpy_sandbox, settings)
    result = evaluate_planning("CartPole-v1", policy, settings)
    assert result.model_bug == "" and len(result.model_returns) == 2
    assert min(result.model_returns) == 60.0 and min(result.true_returns) == 60.0  # never fell within 60 steps
    assert max(result.random_returns) < 60.0


def test_a_crashing_model_scores_as_random_with_its_error(numpy_sandbox):
    settings = PlanningSettings(episodes=1, max_steps=10, simulations=4, rollout_steps=5)
    crashing = CARTPOLE_MODEL.replace("force = self.force if action == 1 else -self.force", "force = self.forces")
    result = evaluate_planning("CartPole-v1", model_policy("CartPole-v1", crashing, numpy_sandbox, settings), settings)
    assert result.model_returns == result.random_returns and "AttributeError" in result.model_bug
    assert result.normalised == pytest.approx(0.0) or math.isnan(result.normalised)


@pytest.mark.parametrize("env_id", ["CliffWalking-v0", "Taxi-v3", "CartPole-v1"])
def test_the_true_environment_as_a_model_plans_as_well_as_the_oracle(env_id):
    settings = PlanningSettings(episodes=2, max_steps=40, simulations=25, rollout_steps=40)
    result = evaluate_planning(env_id, true_model_policy(env_id, settings), settings)
    assert result.model_returns == result.true_returns
