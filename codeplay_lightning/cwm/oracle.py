"""The true environment as a model of itself: what a perfect Code World Model would compute.

`TrueModel(env_id)` takes an observation row (as stored in `Transitions`), rebuilds the simulator's
internal state from it alone, and steps gymnasium's own code (`env.unwrapped`, so no TimeLimit ever
fires inside the model). `save`/`restore` snapshot the full simulator state for planners; a snapshot
of the real environment (`TrueModel.snapshot`) lets the oracle plan from where the real episode is.

The model draws from its own random generator, never the real environment's, so it has no
foresight of the real draws (the official oracle deep-copied the real generator, research notes
§5.3 bug 5). A snapshot copies positions, velocities and what the next step reads (never a deep copy
of the env, which rebuilds a MuJoCo env at its initial pose: bugs 2 and 4).

Where an observation does not determine the next step (tests/unit/cwm/test_cwm_oracle.py; the shares
are of the transitions `codeplay cwm build` collects with seed 0, outside the metric's 1e-5):
- Blackjack: the hand is rebuilt from (sum, usable ace) exactly as far as the game's future goes, but
  the dealer's hidden card and every draw are random, so a hit's card (and whether it busts) and a
  stick's reward are samples; a stick's next observation and termination are exact, and so is a hit
  that cannot bust (from 11 or less, or with a usable ace) but for its card.
- Classic control: the internal state is float64, the observation float32; the model steps from the
  rounded state, so next observations agree to a float32 rounding (about 1e-7), not bit for bit.
- Walker2d (310 of 618 wrong), Hopper, InvertedDoublePendulum: velocities are clipped to ±10 in the
  observation; from an observation with a clipped velocity the model steps from the clipped one.
- Pusher (16 of 1000): the object's velocity is not observed (taken as 0); the observed body
  positions lag one physics substep behind the joints and are written back as the real env holds them.
- HumanoidStandup (41 of 1000): the contact solver's warm start is not observed (it starts at 0).
- Ant (747 of 863 rewards), Humanoid (53 of 241): the forward reward differences body positions that
  lag one substep and are not observed; next observations are exact, rewards off by 3e-4 (Ant,
  median; up to 8e-2) and 3e-5 (Humanoid; up to 6e-4).
"""

from __future__ import annotations

import numpy as np

from codeplay_lightning.cwm.envs import ENVS, make
from codeplay_lightning.cwm.metric import Predictions
from codeplay_lightning.cwm.transitions import Transitions, observation_row

_MODEL_STREAM = 0x6D6F64656C  # mixed into the model's seed, so its draws are not a seeded real env's

# How many leading position coordinates (x, or x and y) the locomotion envs leave out of the observation;
# set to 0 in the model: nothing in their dynamics or rewards depends on them.
_HIDDEN_POSITIONS = {
    "HalfCheetah-v4": 1,
    "Hopper-v4": 1,
    "Walker2d-v4": 1,
    "Swimmer-v4": 2,
    "Ant-v4": 2,
    "Humanoid-v4": 2,
    "HumanoidStandup-v4": 2,
}


class TrueModel:
    """`set_state(observation)`, then `step(action) -> (next observation row, reward, terminated)`."""

    def __init__(self, env_id: str, seed: int = 0) -> None:
        self.env = make(env_id).unwrapped
        self.env_id, self.spec = env_id, ENVS[env_id]
        self.env.np_random = np.random.default_rng((seed, _MODEL_STREAM))

    def set_state(self, observation: np.ndarray) -> None:
        row = np.asarray(observation, dtype=np.float64)
        if self.spec.mujoco:
            _set_mujoco(self.env_id, self.env, row)
        elif self.env_id == "Blackjack-v1":
            total, shown, usable_ace = (int(value) for value in row)
            self.restore((_hand(total, usable_ace), shown))
        elif self.spec.observation_kind == "int":
            self.env.s = int(row[0])
        else:
            self.restore(_classic_state(self.env_id, row))

    def step(self, action) -> tuple[np.ndarray, float, bool]:
        action = int(action) if self.spec.discrete_actions else np.asarray(action, dtype=np.float64)
        observation, reward, terminated, _, _ = self.env.step(action)
        return observation_row(observation), float(reward), bool(terminated)

    def save(self):
        return _snapshot(self.env_id, self.env)

    def restore(self, state) -> None:
        env = self.env
        if self.spec.mujoco:
            data = env.data
            data.qpos[:], data.qvel[:], data.act[:], data.qacc_warmstart[:], data.xpos[:], data.xipos[:] = state[:6]
            data.time = state[6]
        elif self.env_id == "Blackjack-v1":
            from gymnasium.envs.toy_text.blackjack import draw_card

            player, shown = state
            # the hidden card is drawn now, from the model's generator: it is not part of what anyone observed
            env.player, env.dealer = list(player), [shown, draw_card(env.np_random)]
        elif self.spec.observation_kind == "int":
            env.s = state
        else:
            env.state = state.copy()
            if self.env_id == "CartPole-v1":
                env.steps_beyond_terminated = None  # else a step after a termination pays 0

    @staticmethod
    def snapshot(env):
        """The `save()` of a real environment (as `make` returns it): what the oracle plans from."""
        return _snapshot(env.spec.id, env.unwrapped)


def true_predictions(transitions: Transitions) -> Predictions:
    """The true environment's prediction for every transition, each from its observation alone."""
    model = TrueModel(transitions.env_id)
    next_observations, rewards, dones = [], [], []
    for observation, action in zip(transitions.observations, transitions.actions):
        model.set_state(observation)
        next_observation, reward, terminated = model.step(action)
        next_observations.append(next_observation)
        rewards.append(reward)
        dones.append(terminated)
    return Predictions(np.array(next_observations), np.array(rewards, dtype=np.float64), np.array(dones))


def _hand(total: int, usable_ace: int) -> tuple[int, ...]:
    """A Blackjack hand with this sum and usable-ace flag. Only the raw sum and whether an ace counts
    as 11 matter to the game's future: a hand whose ace counts as 1 already sums to 12 or more, so the
    ace can never become usable, and it plays as the same sum without an ace."""
    if usable_ace:
        return 1, total - 11
    cards = max(2, -(-total // 10))  # aceless cards of 2..10
    return tuple(total // cards + (i < total % cards) for i in range(cards))


def _classic_state(env_id: str, row: np.ndarray) -> np.ndarray:
    if env_id == "Pendulum-v1":  # observation (cos θ, sin θ, θ'), state (θ, θ')
        return np.array([np.arctan2(row[1], row[0]), row[2]])
    if env_id == "Acrobot-v1":  # observation (cos θ1, sin θ1, cos θ2, sin θ2, θ1', θ2')
        return np.array([np.arctan2(row[1], row[0]), np.arctan2(row[3], row[2]), row[4], row[5]])
    return row  # CartPole, MountainCar: the observation is the state


def _set_mujoco(env_id: str, env, row: np.ndarray) -> None:
    import mujoco

    model, data = env.model, env.data
    qpos, qvel = np.zeros(model.nq), np.zeros(model.nv)
    if env_id == "Reacher-v4":  # cos, sin of the 2 arm angles, target (x, y), arm velocities, fingertip - target
        qpos[:2], qpos[2:], qvel[:2] = np.arctan2(row[2:4], row[0:2]), row[4:6], row[6:8]
    elif env_id == "Pusher-v4":  # 7 arm angles and velocities, then tips_arm, object and goal positions
        qpos[:7], qvel[:7] = row[:7], row[7:14]
        for body, joint, start in (("object", "obj", 17), ("goal", "goal", 20)):
            offset = row[start : start + 2] - model.body(body).pos[:2]
            qpos[model.joint(f"{joint}_slidex").qposadr[0]] = offset[0]
            qpos[model.joint(f"{joint}_slidey").qposadr[0]] = offset[1]
    elif env_id == "InvertedPendulum-v4":
        qpos[:], qvel[:] = row[:2], row[2:4]
    elif env_id == "InvertedDoublePendulum-v4":  # cart x, sin and cos of the 2 angles, velocities, forces
        qpos[0], qpos[1:], qvel[:] = row[0], np.arctan2(row[1:3], row[3:5]), row[5:8]
    else:
        shown = model.nq - _HIDDEN_POSITIONS[env_id]
        qpos[model.nq - shown :], qvel[:] = row[:shown], row[shown : shown + model.nv]
    mujoco.mj_resetData(model, data)  # no solver warm start or time carried over from an earlier state
    env.set_state(qpos, qvel)
    # A step's reward reads body positions from before its last physics substep (mj_step updates them
    # before integrating); these two envs observe exactly those positions, so the model holds them too.
    if env_id == "Reacher-v4":
        data.body("fingertip").xpos[:] = data.body("target").xpos + row[8:11]
    elif env_id == "Pusher-v4":
        for body, start in (("tips_arm", 14), ("object", 17), ("goal", 20)):
            data.body(body).xpos[:] = row[start : start + 3]


def _snapshot(env_id: str, env):
    spec = ENVS[env_id]
    if spec.mujoco:  # what the next step reads: state, solver warm start, and the (lagging) body positions
        data = env.data
        return (
            data.qpos.copy(),
            data.qvel.copy(),
            data.act.copy(),
            data.qacc_warmstart.copy(),
            data.xpos.copy(),
            data.xipos.copy(),
            data.time,
        )
    if env_id == "Blackjack-v1":
        return tuple(env.player), env.dealer[0]
    if spec.observation_kind == "int":
        return env.s
    return np.array(env.state, dtype=np.float64)
