"""The true environment as a model: set from an observation alone it predicts what the real env did;
restored from a snapshot it continues exactly as the real env does; it never foresees a real draw."""

from __future__ import annotations

import numpy as np
import pytest

from codeplay_lightning.cwm.envs import ENVS, make
from codeplay_lightning.cwm.oracle import TrueModel, _hand

pytest.importorskip("gymnasium")

TOY_TEXT = ["CliffWalking-v0", "Taxi-v3"]
CLASSIC = ["CartPole-v1", "MountainCar-v0", "Acrobot-v1", "Pendulum-v1"]
MUJOCO_EXACT = [
    "HalfCheetah-v4",
    "InvertedPendulum-v4",
    "InvertedDoublePendulum-v4",
    "Hopper-v4",
    "Reacher-v4",
    "Swimmer-v4",
]


def rollout(env_id: str, steps: int = 30, seed: int = 0):
    """(observation row, action, next observation row, reward, terminated, whether Pusher's object was
    moving before the step) for random actions from a seeded reset, restarting after an episode end."""
    env, rng = make(env_id), np.random.default_rng(seed)
    observation, _ = env.reset(seed=seed)
    records = []
    for _ in range(steps):
        space = env.action_space
        action = int(rng.integers(space.n)) if hasattr(space, "n") else rng.uniform(space.low, space.high)
        moving = env_id == "Pusher-v4" and bool(np.any(env.unwrapped.data.qvel[7:9] != 0))
        next_observation, reward, terminated, truncated, _ = env.step(action)
        records.append((row(observation), action, row(next_observation), float(reward), terminated, moving))
        observation = next_observation
        if terminated or truncated:
            observation, _ = env.reset()
    env.close()
    return records


def row(observation) -> np.ndarray:
    return np.asarray(observation, dtype=np.float64).ravel()


def predict(env_id: str, observation: np.ndarray, action):
    model = TrueModel(env_id)  # a fresh one: the observation alone must do
    model.set_state(observation)
    return model.step(action)


@pytest.mark.parametrize("env_id", TOY_TEXT + CLASSIC + MUJOCO_EXACT)
def test_a_fresh_model_set_to_the_observation_predicts_the_real_step(env_id):
    if ENVS[env_id].mujoco:
        pytest.importorskip("mujoco")
    for observation, action, next_observation, reward, terminated, _ in rollout(env_id):
        predicted, predicted_reward, predicted_terminated = predict(env_id, observation, action)
        if env_id in TOY_TEXT:
            assert np.array_equal(predicted, next_observation) and predicted_reward == reward
        elif env_id in CLASSIC:  # stepped from the float32-rounded state: within a float32 rounding
            np.testing.assert_allclose(predicted, next_observation, rtol=1e-6, atol=1e-7)
            assert predicted_reward == pytest.approx(reward, rel=1e-6, abs=1e-6)
        else:
            np.testing.assert_allclose(predicted, next_observation, rtol=1e-9, atol=1e-9)
            assert predicted_reward == pytest.approx(reward, rel=1e-9, abs=1e-9)
        assert predicted_terminated == terminated


def test_walker2d_is_exact_except_from_an_observation_with_a_clipped_velocity():
    pytest.importorskip("mujoco")
    clipped_seen = 0
    for observation, action, next_observation, reward, _, _ in rollout("Walker2d-v4", steps=60):
        predicted, predicted_reward, _ = predict("Walker2d-v4", observation, action)
        exact = np.allclose(predicted, next_observation, rtol=1e-9, atol=1e-9) and np.isclose(predicted_reward, reward)
        clipped = bool(np.any(np.abs(observation[8:]) == 10.0))  # the observation clips qvel to ±10
        clipped_seen += clipped
        assert exact or clipped
    assert clipped_seen > 0


def test_pusher_is_exact_while_the_object_is_at_rest():
    """The object's velocity is not observed; its observed position and the arm tip's lag one substep."""
    pytest.importorskip("mujoco")
    for observation, action, next_observation, reward, _, moving in rollout("Pusher-v4", steps=40):
        predicted, predicted_reward, _ = predict("Pusher-v4", observation, action)
        if not moving:
            np.testing.assert_allclose(predicted, next_observation, rtol=1e-9, atol=1e-9)
            assert predicted_reward == pytest.approx(reward, rel=1e-9, abs=1e-9)


def test_ant_next_observations_are_exact_but_not_its_rewards():
    """Ant-v4's forward reward differences torso positions that lag one substep and are not observed."""
    pytest.importorskip("mujoco")
    reward_errors = []
    for observation, action, next_observation, reward, terminated, _ in rollout("Ant-v4", steps=20):
        predicted, predicted_reward, predicted_terminated = predict("Ant-v4", observation, action)
        np.testing.assert_allclose(predicted, next_observation, rtol=1e-9, atol=1e-9)
        assert predicted_terminated == terminated
        reward_errors.append(abs(predicted_reward - reward))
    assert 1e-6 < max(reward_errors) < 0.5


@pytest.mark.parametrize(
    "env_id", ["Taxi-v3", "CartPole-v1", "Pendulum-v1", "HalfCheetah-v4", "Reacher-v4", "Pusher-v4", "Ant-v4"]
)
def test_a_snapshot_of_the_real_env_continues_exactly_as_the_real_env(env_id):
    """Restored from `TrueModel.snapshot(real env)`, the model's future is the real one bit for bit,
    lagging body positions (Reacher, Pusher, Ant) and solver warm start included; and a model's own
    save/restore gives the same future twice."""
    if ENVS[env_id].mujoco:
        pytest.importorskip("mujoco")
    env, model, rng = make(env_id), TrueModel(env_id), np.random.default_rng(1)
    env.reset(seed=3)
    space = env.action_space
    actions = [
        int(rng.integers(space.n)) if hasattr(space, "n") else rng.uniform(space.low, space.high) for _ in range(25)
    ]
    for action in actions[:5]:
        env.step(action)
    model.restore(TrueModel.snapshot(env))
    saved = model.save()
    futures = []
    for _ in range(2):
        model.restore(saved)
        futures.append([model.step(action) for action in actions[5:]])
    for action, first, second in zip(actions[5:], *futures):
        next_observation, reward, terminated, _, _ = env.step(action)
        for predicted in (first, second):
            assert np.array_equal(predicted[0], row(next_observation))
            assert predicted[1] == reward and predicted[2] == terminated
        if terminated:
            break


def test_blackjack_hands_rebuild_every_sum_and_usable_ace():
    from gymnasium.envs.toy_text.blackjack import sum_hand, usable_ace

    for total in range(4, 22):
        hand = _hand(total, 0)
        assert sum_hand(list(hand)) == total and usable_ace(list(hand)) == 0 and all(2 <= card <= 10 for card in hand)
    for total in range(12, 22):
        hand = _hand(total, 1)
        assert sum_hand(list(hand)) == total and usable_ace(list(hand)) == 1


def test_blackjack_deterministic_parts_are_exact():
    """A stick ends the episode without changing the observation; the dealer's draws make its reward
    random. A hit from 11 or less (or with a usable ace) cannot bust; the card it draws is random."""
    sticks = 0
    for observation, action, next_observation, _, terminated, _ in rollout("Blackjack-v1", steps=100):
        predicted, _, predicted_terminated = predict("Blackjack-v1", observation, action)
        if action == 0:
            sticks += 1
            assert np.array_equal(predicted, next_observation) and predicted_terminated == terminated
    assert sticks > 20
    model = TrueModel("Blackjack-v1")
    for total, shown, ace in [(15, 10, 0), (20, 1, 0), (13, 4, 1), (21, 7, 1)]:
        model.set_state(np.array([total, shown, ace], dtype=np.float64))
        next_observation, reward, terminated = model.step(0)
        assert np.array_equal(next_observation, [total, shown, ace]) and terminated and reward in (-1.0, 0.0, 1.0)
    for total, ace in [(5, 0), (11, 0), (12, 1), (20, 1)]:
        for _ in range(20):
            model.set_state(np.array([total, 6, ace], dtype=np.float64))
            next_observation, reward, terminated = model.step(1)
            assert not terminated and reward == 0.0 and next_observation[1] == 6
            assert 1 <= next_observation[0] - total + 10 * (ace - next_observation[2]) <= 10  # one card's value


def test_blackjack_restored_from_the_real_env_does_not_foresee_its_cards():
    """The official oracle drew the real env's next card 200 times out of 200; a chance match is ~15%."""
    env, model = make("Blackjack-v1"), TrueModel("Blackjack-v1")
    matches, trials = 0, 200
    for trial in range(trials):
        env.reset(seed=trial)
        model.restore(TrueModel.snapshot(env))
        predicted, _, _ = model.step(1)
        real, _, _, _, _ = env.step(1)
        matches += bool(np.array_equal(predicted, row(real)))
    assert matches < 0.35 * trials
    outcomes = set()
    for _ in range(50):  # one snapshot, many restores: different draws
        model.restore(TrueModel.snapshot(env))
        outcomes.add(tuple(model.step(1)[0]))
    assert len(outcomes) > 3


def test_predictions_do_not_depend_on_what_the_model_predicted_before():
    """`set_state` is a pure function of the observation: no solver warm start carries over (it moves
    HumanoidStandup's contacts by up to 1e-3)."""
    pytest.importorskip("mujoco")
    records = rollout("HumanoidStandup-v4", steps=12)
    forward, backward = TrueModel("HumanoidStandup-v4"), TrueModel("HumanoidStandup-v4")
    in_order = []
    for observation, action, *_ in records:
        forward.set_state(observation)
        in_order.append(forward.step(action)[0])
    for (observation, action, *_), expected in reversed(list(zip(records, in_order))):
        backward.set_state(observation)
        assert np.array_equal(backward.step(action)[0], expected)
