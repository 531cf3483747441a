"""The 18 environments of the Code World Models Benchmark (CWMB, paper §3) and their descriptions.

Everything runs on gymnasium 0.29.1 with mujoco 2.3.7 (the `cwm` extra): the official buffers were
made with them and reproduce on them to about 1e-15; gymnasium 1.x renames two of the environments,
changes MuJoCo observations and drops the v4 docstrings the descriptions are cut from.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

GYMNASIUM_VERSION = "0.29.1"
MUJOCO_VERSION = "2.3.7"
INSTALL_HINT = "pip install -e '.[cwm]'"


@dataclass(frozen=True)
class EnvSpec:
    env_id: str
    observation_kind: str  # one of transitions.OBSERVATION_KINDS
    discrete_actions: bool
    planner: str  # "mcts" (discrete actions) or "cem" (continuous)
    mujoco: bool
    max_steps: int  # the episode cap for collection and planning: the TimeLimit, or 100 where there is none


def _spec(env_id: str, observation_kind: str, discrete_actions: bool, max_steps: int) -> EnvSpec:
    return EnvSpec(
        env_id,
        observation_kind,
        discrete_actions,
        "mcts" if discrete_actions else "cem",
        mujoco=observation_kind == "float64",
        max_steps=max_steps,
    )


# In the paper's order: the 6 with discrete actions, then the 12 with continuous ones (11 of them MuJoCo)
ENVS: dict[str, EnvSpec] = {
    spec.env_id: spec
    for spec in (
        _spec("Blackjack-v1", "tuple", True, 100),
        _spec("CliffWalking-v0", "int", True, 100),
        _spec("Taxi-v3", "int", True, 200),
        _spec("CartPole-v1", "float32", True, 500),
        _spec("MountainCar-v0", "float32", True, 200),
        _spec("Acrobot-v1", "float32", True, 500),
        _spec("Pendulum-v1", "float32", False, 200),
        _spec("Reacher-v4", "float64", False, 50),
        _spec("Pusher-v4", "float64", False, 100),
        _spec("InvertedPendulum-v4", "float64", False, 1000),
        _spec("InvertedDoublePendulum-v4", "float64", False, 1000),
        _spec("HalfCheetah-v4", "float64", False, 1000),
        _spec("Hopper-v4", "float64", False, 1000),
        _spec("Swimmer-v4", "float64", False, 1000),
        _spec("Walker2d-v4", "float64", False, 1000),
        _spec("Ant-v4", "float64", False, 1000),
        _spec("Humanoid-v4", "float64", False, 1000),
        _spec("HumanoidStandup-v4", "float64", False, 1000),
    )
}


def make(env_id: str):
    """`gymnasium.make(env_id)`, with its TimeLimit where it has one, after checking the pinned versions."""
    if env_id not in ENVS:
        raise ValueError(f"unknown environment {env_id!r}; CWMB has {', '.join(ENVS)}")
    try:
        import gymnasium
    except ImportError:
        raise ValueError(f"the CWM environments need gymnasium=={GYMNASIUM_VERSION}: {INSTALL_HINT}") from None
    if gymnasium.__version__ != GYMNASIUM_VERSION:
        raise ValueError(
            f"the CWM environments need gymnasium=={GYMNASIUM_VERSION}, not {gymnasium.__version__}: {INSTALL_HINT}"
        )
    if ENVS[env_id].mujoco:
        try:
            import mujoco
        except ImportError:
            raise ValueError(f"{env_id} needs mujoco=={MUJOCO_VERSION}: {INSTALL_HINT}") from None
        if mujoco.__version__ != MUJOCO_VERSION:
            raise ValueError(f"{env_id} needs mujoco=={MUJOCO_VERSION}, not {mujoco.__version__}: {INSTALL_HINT}")
    return gymnasium.make(env_id)


# Sections of the docstrings shown to the LLM (paper §3, app. F); "Episode Truncation" is Pendulum's
# "Episode End". Dropped: Arguments, Vectorized Environment, Version History, References, Notes, Information.
KEPT_SECTIONS = (
    "Description",
    "Action Space",
    "Observation Space",
    "Rewards",
    "Reward",
    "Starting State",
    "Episode End",
    "Episode Truncation",
    "Transition Dynamics",
)

_BIBTEX = re.compile(r"^```\n@.*?^```\n", re.DOTALL | re.MULTILINE)  # a citation in MountainCar's Description
_MARKDOWN_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_HTML_LINK = re.compile(r"<a\b[^>]*>(.*?)</a>", re.DOTALL)  # also the empty anchors <a id="..."></a>
_RST_LINK = re.compile(r"`([^`<]*?)\s*<[^>]*>`_{1,2}")
_URL = re.compile(r"https?://[^\s)\]>]*[^\s)\]>.,;:]")  # a sentence's last period is not the URL's


def description(env_id: str) -> str:
    """The environment's text for the LLM: its gymnasium class docstring, cut to `KEPT_SECTIONS`
    (headers with or without a trailing colon), without links and citations."""
    env = make(env_id)
    docstring = type(env.unwrapped).__doc__ or ""
    env.close()
    return clean_docstring(docstring)


def clean_docstring(docstring: str) -> str:
    """A gymnasium docstring cut to `KEPT_SECTIONS`, links reduced to their text, bare URLs removed."""
    lines, keep, fenced = [], True, False  # the text before the first header (Blackjack's) is kept
    for line in inspect.cleandoc(docstring).splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif line.startswith("## ") and not fenced:
            keep = line[3:].strip().rstrip(":").strip() in KEPT_SECTIONS
        if keep:
            lines.append(line)
    text = _BIBTEX.sub("", "\n".join(lines) + "\n")
    for pattern in (_MARKDOWN_LINK, _HTML_LINK, _RST_LINK):
        text = pattern.sub(r"\1", text)
    text = _URL.sub("", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
