"""Test helpers for Code World Models: a hand-written CartPole model and transitions it made."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from codeplay_lightning.cwm.transitions import Transitions

CARTPOLE_MODEL = (Path(__file__).parents[1] / "codeplay_lightning" / "cwm" / "examples" / "cartpole.py").read_text()


def load_model(code: str):
    spec = importlib.util.spec_from_loader("cartpole_model", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(code, module.__dict__)
    return module.Environment


def cartpole_rollout(n: int = 60, seed: int = 0) -> Transitions:
    """Transitions made by the fixture model itself, restarting near upright whenever it falls."""
    rng = np.random.default_rng(seed)
    model = load_model(CARTPOLE_MODEL)()
    rows, actions, next_rows, dones, episodes, episode = [], [], [], [], [], 0
    state = rng.uniform(-0.05, 0.05, 4).astype(np.float32)
    for _ in range(n):
        action = int(rng.integers(2))
        model.set_state(state)
        next_state, _, done = model.step(action)
        rows.append(state.astype(np.float64))
        actions.append(action)
        next_rows.append(np.asarray(next_state, dtype=np.float64))
        dones.append(done)
        episodes.append(episode)
        state = rng.uniform(-0.05, 0.05, 4).astype(np.float32) if done else next_state
        episode += done
    return Transitions(
        "CartPole-v1",
        "float32",
        True,
        np.array(rows),
        np.array(actions),
        np.array(next_rows),
        np.ones(n, np.float32),
        np.array(dones),
        np.zeros(n, bool),
        np.array(episodes),
        np.full(n, "search"),
    )
