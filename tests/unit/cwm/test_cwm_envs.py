"""The CWMB environment table, `make`'s version checks, and the descriptions cut from gymnasium's docstrings."""

from __future__ import annotations

import sys

import pytest

from codeplay_lightning.cwm.envs import ENVS, clean_docstring, description, make

gymnasium = pytest.importorskip("gymnasium")


def test_the_table_is_the_papers_18_environments_in_order():
    assert list(ENVS)[:6] == [
        "Blackjack-v1",
        "CliffWalking-v0",
        "Taxi-v3",
        "CartPole-v1",
        "MountainCar-v0",
        "Acrobot-v1",
    ]
    assert len(ENVS) == 18 and list(ENVS)[-1] == "HumanoidStandup-v4"
    assert [spec.discrete_actions for spec in ENVS.values()] == [True] * 6 + [False] * 12
    assert [spec.planner for spec in ENVS.values()] == ["mcts"] * 6 + ["cem"] * 12
    assert sum(spec.mujoco for spec in ENVS.values()) == 11
    assert {env_id: spec.observation_kind for env_id, spec in list(ENVS.items())[:7]} == {
        "Blackjack-v1": "tuple",
        "CliffWalking-v0": "int",
        "Taxi-v3": "int",
        "CartPole-v1": "float32",
        "MountainCar-v0": "float32",
        "Acrobot-v1": "float32",
        "Pendulum-v1": "float32",
    }
    assert {env_id: ENVS[env_id].max_steps for env_id in ("Blackjack-v1", "Taxi-v3", "Reacher-v4", "Ant-v4")} == {
        "Blackjack-v1": 100,
        "Taxi-v3": 200,
        "Reacher-v4": 50,
        "Ant-v4": 1000,
    }


@pytest.mark.parametrize("env_id", ["CliffWalking-v0", "Acrobot-v1", "Pusher-v4", "Humanoid-v4"])
def test_max_steps_is_the_time_limit_or_100(env_id):
    if ENVS[env_id].mujoco:
        pytest.importorskip("mujoco")
    env = make(env_id)
    assert ENVS[env_id].max_steps == (env.spec.max_episode_steps or 100)
    env.close()


def test_make_refuses_an_unknown_environment_in_one_line():
    with pytest.raises(ValueError, match=r"unknown environment 'CartPole-v0'; CWMB has Blackjack-v1, ") as error:
        make("CartPole-v0")
    assert "\n" not in str(error.value)


def test_make_asks_for_the_cwm_extra_without_the_pinned_gymnasium(monkeypatch):
    monkeypatch.setattr(gymnasium, "__version__", "1.4.0")
    with pytest.raises(ValueError, match=r"gymnasium==0.29.1, not 1.4.0: pip install -e '.\[cwm\]'"):
        make("CartPole-v1")
    monkeypatch.setitem(sys.modules, "gymnasium", None)  # as if not installed
    with pytest.raises(ValueError, match=r"need gymnasium==0.29.1: pip install -e '.\[cwm\]'"):
        make("CartPole-v1")


@pytest.mark.parametrize("env_id", list(ENVS))
def test_every_description_keeps_the_core_sections_only(env_id):
    if ENVS[env_id].mujoco:
        pytest.importorskip("mujoco")
    text = description(env_id)
    for section in ("## Description", "## Action Space", "## Observation Space", "## Starting State"):
        assert section in text
    for dropped in ("http", "Version History", "Arguments", "## Notes", "## References", "## Information", "<a "):
        assert dropped not in text


def test_mountain_car_keeps_its_dynamics_and_reward_headed_with_colons():
    """The official prompts lost both sections; the equations are the only place the constants appear."""
    text = description("MountainCar-v0")
    assert "## Transition Dynamics:" in text and "## Reward:" in text
    assert "where force = 0.001 and gravity = 0.0025" in text
    assert "penalised with a reward of -1 for each timestep" in text
    assert "@TECHREPORT" not in text and "Andrew Moore's PhD Thesis (1990)" in text


def test_cartpole_and_pendulum_descriptions():
    assert "## Observation Space" in description("CartPole-v1")
    assert "Neuronlike Adaptive Elements" in description("CartPole-v1")  # a link's text stays
    assert "## Episode Truncation" in description("Pendulum-v1")  # Pendulum's only episode-end section


def test_clean_docstring_on_every_kind_of_header_and_link():
    docstring = """
        Intro, kept.

        ## Description
        See [the paper](https://example.org/paper.pdf), `the docs <https://example.org/docs>`_,
        <a href="#ref">[1]</a><a id="ref"></a> and https://example.org/bare.
        ## Arguments
        ```python
        ## not a header: inside a fence
        gym.make("X")
        ```
        ## Reward:
        -1 per step.
        ## Version History
        * v0
        """
    assert clean_docstring(docstring) == (
        "Intro, kept.\n\n## Description\nSee the paper, the docs,\n[1] and .\n## Reward:\n-1 per step.\n"
    )
