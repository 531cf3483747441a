"""The planners on small problems whose best actions are known."""

from __future__ import annotations

import numpy as np

from codeplay_lightning.cwm.planners import _Node, _plan_return, _simulate_once, cem_plan, mcts_action


def corridor(length: int = 6):
    """Walk left (0) or right (1) on 0..length; reaching `length` pays 1 and ends, every step costs 0.01."""

    def simulate(state, action):
        position = min(max(state + (1 if action == 1 else -1), 0), length)
        return position, (1.0 if position == length else -0.01), position == length

    return simulate


def test_mcts_walks_the_corridor_to_its_goal():
    simulate, rng = corridor(), np.random.default_rng(0)
    state, steps = 0, 0
    while state != 6 and steps < 30:
        action = mcts_action(simulate, state, key=lambda s: s, n_actions=2, rng=rng)
        state, _, _ = simulate(state, action)
        steps += 1
    assert state == 6 and steps <= 8


def test_mcts_root_values_are_the_mean_returns_of_its_simulations():
    """A one-step problem (every action ends the episode): Q(a) is exactly the reward of a."""
    rewards = [0.2, 0.9, 0.5]
    root = _Node(0, 3)
    rng = np.random.default_rng(1)
    for _ in range(30):
        _simulate_once(root, lambda s, a: (s, rewards[a], True), lambda s: s, 3, rng, 1.0, 0.99, 100, 1.0)
    assert root.visits.sum() == root.total == 30 and (root.visits > 0).all()
    assert np.allclose(root.values, rewards) and int(np.argmax(root.visits)) == 1


def test_mcts_keeps_the_outcomes_of_a_stochastic_model_apart():
    """A coin that lands 0 or 1: the root's child table holds both outcomes under their keys."""
    rng_model = np.random.default_rng(2)
    root = _Node("start", 1)
    rng = np.random.default_rng(3)

    def simulate(state, action):
        if state == "start":
            return int(rng_model.integers(2)), 0.0, False
        return state, float(state), True

    for _ in range(20):
        _simulate_once(root, simulate, lambda s: s, 1, rng, 1.0, 1.0, 100, 1.0)
    assert set(root.children[0]) == {0, 1}
    assert 0.2 < root.values[0] < 0.8  # the mean of the two outcomes' returns


def test_cem_finds_the_best_open_loop_plan():
    """Reward -(a_t - target_t)^2 per step: the best plan is the target, inside the bounds."""
    target = np.array([[0.5, -1.0], [1.5, 0.0], [-0.25, 1.0]])

    def simulate(state, action):
        return state + 1, -float(np.sum((action - target[state]) ** 2)), False

    plan = cem_plan(
        simulate,
        0,
        low=[-2, -2],
        high=[2, 2],
        rng=np.random.default_rng(0),
        horizon=3,
        iterations=10,
        samples=200,
        elites=20,
    )
    assert plan.shape == (3, 2) and np.abs(plan - target).max() < 0.1


def test_cem_stays_within_the_bounds_and_stops_scoring_at_done():
    """A step above 0.9 ends the episode paying 5, any other pays 0.1: rewards after the end do not
    count, so the best of 10 steps ends at the last one (0.9 + 5), never earlier."""

    def simulate(state, action):
        return state, (5.0 if action[0] > 0.9 else 0.1), bool(action[0] > 0.9)

    assert _plan_return(simulate, 0, np.array([[0.5], [0.95], [0.95]])) == 5.1
    plan = cem_plan(
        simulate,
        0,
        low=[0.0],
        high=[1.0],
        rng=np.random.default_rng(0),
        horizon=10,
        iterations=10,
        samples=300,
        elites=30,
    )
    assert (plan >= 0).all() and (plan <= 1).all()
    assert _plan_return(simulate, 0, plan) >= 5.5
