"""Seeded transitions of the CWMB environments, collected by our own code (paper §3).

Per environment, `RANDOM_EPISODES` episodes of uniformly random actions, then `BETTER_EPISODES` of a
better-than-random policy (the paper: 5 "equivalent to taking random actions" and 5 "sub-optimal
demonstrations"). The better policy is a hand-written rule where a simple one works (Blackjack,
the shortest path on the grids, the classic-control swings), with a share of random actions so that
episodes from the same start differ, and otherwise a small cross-entropy planner on the true
environment (`TrueModel` snapshots of the real one, so it sees nothing the real env will draw).

An episode ends at termination or at its cap: the environment's `max_steps` for discrete actions
(its TimeLimit, or 100), at most 100 steps for continuous actions (the paper's "at most 100 steps";
Reacher: 50). Ending at the cap is recorded as `truncated`, never as `terminated`. The last
episode of each policy is held out ("heldout"), the others are "search".
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

import numpy as np

from codeplay_lightning.cwm import planners
from codeplay_lightning.cwm.envs import ENVS, make
from codeplay_lightning.cwm.oracle import TrueModel
from codeplay_lightning.cwm.transitions import Transitions, play

RANDOM_EPISODES = BETTER_EPISODES = 5
CONTINUOUS_STEPS = 100
EXPLORATION = 0.1  # share of random actions in the hand-written policies
# The planner's budget: 2 cores collect all 18 environments in a few minutes (the paper's CEM: T=100,
# N=1000, K=100, up to 25 iterations per trajectory, on the real env)
CEM = {"horizon": 10, "iterations": 3, "samples": 32, "elites": 6}
CEM_EXECUTED = 5  # actions of each plan taken before planning again


def collect(env_id: str, seed: int) -> Transitions:
    """RANDOM_EPISODES random episodes (numbered first), then BETTER_EPISODES of the better policy, each
    from `env.reset` with a seed drawn from `seed`."""
    spec, env = ENVS[env_id], make(env_id)
    cap = spec.max_steps if spec.discrete_actions else min(spec.max_steps, CONTINUOUS_STEPS)
    better = _better_policy(env_id, TrueModel(env_id, seed))
    rows = []
    for episode in range(RANDOM_EPISODES + BETTER_EPISODES):
        reset_seed, action_seed = np.random.SeedSequence((seed, episode)).generate_state(2)
        rng = np.random.default_rng(action_seed)
        policy = _random_policy if episode < RANDOM_EPISODES else better
        held_out = episode in (RANDOM_EPISODES - 1, RANDOM_EPISODES + BETTER_EPISODES - 1)
        rows += _episode(env, policy, int(reset_seed), rng, cap, episode, "heldout" if held_out else "search")
    env.close()
    columns = list(zip(*rows))
    return Transitions(
        env_id,
        spec.observation_kind,
        spec.discrete_actions,
        np.array(columns[0]),
        np.array(columns[1], dtype=np.int64 if spec.discrete_actions else np.float64),
        np.array(columns[2]),
        np.array(columns[3], dtype=np.float64),
        np.array(columns[4]),
        np.array(columns[5]),
        np.array(columns[6], dtype=np.int64),
        np.array(columns[7]),
    )


def episode_returns(transitions: Transitions) -> np.ndarray:
    """The undiscounted return of each episode, in episode order."""
    return np.bincount(transitions.episodes, weights=transitions.rewards.astype(np.float64))


def build(out_dir: Path, env_ids: list[str], seed: int) -> list[dict]:
    """Collect each environment into `<out_dir>/<env_id>.npz`; a summary row per environment."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for env_id in env_ids:
        started = time.perf_counter()
        transitions = collect(env_id, seed)
        transitions.save(out_dir / f"{env_id}.npz")
        returns = episode_returns(transitions)
        rows.append(
            {
                "env": env_id,
                "transitions": len(transitions),
                "search": int((transitions.split == "search").sum()),
                "heldout": int((transitions.split == "heldout").sum()),
                "episodes": len(returns),
                "random_return": float(returns[:RANDOM_EPISODES].mean()),
                "better_return": float(returns[RANDOM_EPISODES:].mean()),
                "seconds": time.perf_counter() - started,
            }
        )
    return rows


def _episode(env, policy, reset_seed: int, rng: np.random.Generator, cap: int, episode: int, split: str) -> list:
    """One episode's transitions as (obs, action, next obs, reward, terminated, truncated, episode, split)."""
    rows = []
    for step, (row, action, next_row, reward, terminated, truncated) in enumerate(
        play(env, lambda env, row, _: policy(env, row, rng), reset_seed, cap)
    ):
        truncated = (truncated or step + 1 == cap) and not terminated
        rows.append((row, action, next_row, reward, terminated, truncated, episode, split))
    return rows


def _random_policy(env, observation: np.ndarray, rng: np.random.Generator) -> list:
    space = env.action_space
    if hasattr(space, "n"):
        return [int(rng.integers(space.n))]
    return [rng.uniform(space.low, space.high)]  # float64, as the planner's actions and the models' inputs


def _better_policy(env_id: str, model: TrueModel):
    """(env, observation row, rng) -> the next actions of the better-than-random policy."""
    rules = {
        "Blackjack-v1": lambda row: int(row[0] < 17),  # hit below 17
        "CartPole-v1": lambda row: int(row[2] + 0.5 * row[3] > 0),  # push under the falling pole
        "MountainCar-v0": lambda row: 2 if row[1] > 0 else 0,  # push along the velocity: pump energy
        "Acrobot-v1": lambda row: 2 if row[5] > 0 else 0,  # torque along the second joint's velocity
        "CliffWalking-v0": lambda row: _shortest_path_action(model, row),
        "Taxi-v3": lambda row: _shortest_path_action(model, row),
    }
    if env_id in rules:
        rule = rules[env_id]

        def act(env, observation: np.ndarray, rng: np.random.Generator) -> list:
            return _random_policy(env, observation, rng) if rng.random() < EXPLORATION else [rule(observation)]

        return act

    def simulate(state, action):
        model.restore(state)
        _, reward, terminated = model.step(action)
        return model.save(), reward, terminated

    def plan(env, observation: np.ndarray, rng: np.random.Generator) -> list:
        space = env.action_space
        actions = planners.cem_plan(simulate, TrueModel.snapshot(env), space.low, space.high, rng, **CEM)
        return list(actions[:CEM_EXECUTED])

    return plan


def _shortest_path_action(model: TrueModel, row: np.ndarray) -> int:
    """The first action of a shortest path to termination, by breadth-first search over the model
    (CliffWalking and Taxi are deterministic, with one termination: the goal, the drop-off)."""
    start = int(row[0])
    first_action = {start: None}
    frontier = deque([start])
    while frontier:
        state = frontier.popleft()
        for action in range(model.env.action_space.n):
            model.set_state(np.array([state]))
            next_row, _, terminated = model.step(action)
            leading = action if first_action[state] is None else first_action[state]
            if terminated:
                return leading
            if int(next_row[0]) not in first_action:
                first_action[int(next_row[0])] = leading
                frontier.append(int(next_row[0]))
    raise ValueError(f"{model.env_id}: no termination is reachable from state {start}")
