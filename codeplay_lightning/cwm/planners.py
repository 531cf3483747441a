"""Planning with a model: MCTS for discrete actions, CEM for continuous ones (paper §5.3, app. H).

A model is `simulate(state, action) -> (next_state, reward, done)`. For a Code World Model a state
is an observation row and `simulate` is `set_state` then `step`; for the true environment it is a
snapshot of the simulator, so planning with it has no foresight of the real environment's draws.

This file uses numpy and the standard library only, and nothing of the package: the sandbox runs
its text after a candidate model's code (`plan.py`), so that planning with an untrusted model takes
one call per real step in the model's own process instead of one per simulated step.
"""

import math

import numpy as np


def mcts_action(
    simulate,
    state,
    key,
    n_actions,
    rng,
    simulations=25,
    exploration=1.0,
    discount=0.99,
    rollout_steps=100,
    temperature=0.01,
    visit_offset=1.0,
):
    """An action for `state`: a fresh tree of `simulations` simulations, UCT
    Q + c·sqrt(ln N / (n + visit_offset)) after every action has been tried once, leaves valued by a
    uniformly random rollout of at most `rollout_steps` discounted steps, and the action drawn from
    softmax(Q / temperature) at the root. Next states are told apart by `key(next_state)` (chance
    nodes: a stochastic model's different outcomes get different subtrees)."""
    root = _Node(state, n_actions)
    for _ in range(simulations):
        _simulate_once(root, simulate, key, n_actions, rng, exploration, discount, rollout_steps, visit_offset)
    q = np.where(root.visits > 0, root.values, -np.inf)
    weights = np.exp((q - q.max()) / temperature)
    return int(rng.choice(n_actions, p=weights / weights.sum()))


class _Node:
    def __init__(self, state, n_actions):
        self.state, self.total = state, 0
        self.visits, self.values = np.zeros(n_actions), np.zeros(n_actions)
        self.children = [dict() for _ in range(n_actions)]  # per action: key of the next state -> node


def _simulate_once(node, simulate, key, n_actions, rng, exploration, discount, rollout_steps, visit_offset):
    """One simulation below `node`; returns its discounted return and updates the statistics on the way up."""
    bonus = exploration * np.sqrt(math.log(max(node.total, 1)) / (node.visits + visit_offset))
    # Unvisited actions first. The official code values them 1, which with unnormalised returns (a
    # CartPole rollout is worth ~60) means a second action is never tried once the first pays over 1.
    uct = np.where(node.visits > 0, node.values + bonus, np.inf)
    action = int(rng.choice(np.flatnonzero(uct == uct.max())))
    next_state, reward, done = simulate(node.state, action)
    if done:
        value = reward
    else:
        child = node.children[action].get(key(next_state))
        if child is None:
            node.children[action][key(next_state)] = _Node(next_state, n_actions)
            value = reward + discount * _rollout(simulate, next_state, n_actions, rng, discount, rollout_steps)
        else:
            value = reward + discount * _simulate_once(
                child, simulate, key, n_actions, rng, exploration, discount, rollout_steps, visit_offset
            )
    node.total += 1
    node.visits[action] += 1
    node.values[action] += (value - node.values[action]) / node.visits[action]
    return value


def _rollout(simulate, state, n_actions, rng, discount, steps):
    total, scale = 0.0, 1.0
    for _ in range(steps):
        state, reward, done = simulate(state, int(rng.integers(n_actions)))
        total += scale * reward
        scale *= discount
        if done:
            break
    return total


def cem_plan(simulate, state, low, high, rng, horizon=100, iterations=20, samples=1000, elites=100):
    """A (horizon, action size) plan: the cross-entropy method over open-loop action sequences, starting
    from mean (low + high) / 2 and spread max(|low|, |high|) / 2, samples clipped to the bounds and
    scored by their undiscounted return up to the first `done`, the Gaussian refitted to the elites
    with no smoothing; the best sample of the last iteration is the plan."""
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    mean = np.tile((low + high) / 2, (horizon, 1))
    spread = np.tile(np.maximum(np.abs(low), np.abs(high)) / 2, (horizon, 1))
    for _ in range(iterations):
        plans = np.clip(mean + spread * rng.standard_normal((samples, *mean.shape)), low, high)
        returns = np.array([_plan_return(simulate, state, plan) for plan in plans])
        best = plans[np.argsort(returns)[-elites:]]
        mean, spread = best.mean(axis=0), best.std(axis=0)
    return plans[int(np.argmax(returns))]


def _plan_return(simulate, state, plan):
    total = 0.0
    for action in plan:
        state, reward, done = simulate(state, action)
        total += reward
        if done:
            break
    return total
