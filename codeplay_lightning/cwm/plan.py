"""Planning in the real environment with a model of it, and the normalised return (paper §5.3).

Three policies play the same seeded episodes: a uniformly random one, the planner with the true
environment as its model (the oracle), and the planner with a Code World Model. MCTS (discrete
actions) picks one action per real step; CEM (continuous) plans `horizon` actions and executes them
all before planning again, as the official code does. A candidate CWM plans inside the sandbox:
`plan_program` appends the harness, the planners and an entry point to its code, so a real step costs
one call, in a fresh process (nothing the model keeps lasts from one step to the next). The oracle
plans from a snapshot of the real environment's simulator (positions and velocities for MuJoCo,
never a deep copy), in a model environment with its own random generator, so it cannot foresee the
real environment's draws.

    R = (R_cwm - R_random) / (R_true - R_random)

per environment from the mean episode returns; its error bar is the standard deviation of R over
bootstrap resamples of the episodes. R is NaN where the oracle is no better than random (the
denominator is within `SAME_RETURN` of 0), as the paper leaves such environments out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from codeplay_lightning.cwm import harness, planners
from codeplay_lightning.cwm.envs import ENVS, make
from codeplay_lightning.cwm.oracle import TrueModel
from codeplay_lightning.cwm.transitions import play
from codeplay_lightning.execution import Call, Sandbox

PLAN_ENTRY = "_codeplay_plan"
BOOTSTRAP_RESAMPLES = 1000
SAME_RETURN = 1e-9


@dataclass(frozen=True)
class PlanningSettings:
    episodes: int = 10
    max_steps: int | None = None  # episode length cap; None: the environment's own (TimeLimit, or 100)
    simulations: int = 25  # MCTS
    rollout_steps: int = 100
    horizon: int = 100  # CEM (capped at the episode length)
    iterations: int = 20
    samples: int = 1000
    elites: int = 100

    def mcts(self) -> dict:
        return {"simulations": self.simulations, "rollout_steps": self.rollout_steps}

    def cem(self, episode_steps: int) -> dict:
        return {
            "horizon": min(self.horizon, episode_steps),
            "iterations": self.iterations,
            "samples": self.samples,
            "elites": self.elites,
        }


PAPER = PlanningSettings()
# 2 CPU cores: the paper's CEM costs 2M model steps per plan (20M per MuJoCo episode); this costs 15k
CPU = PlanningSettings(max_steps=200, horizon=30, iterations=5, samples=100, elites=10)

_PLANNERS_SOURCE = Path(planners.__file__).read_text()
_PLAN_ENTRY_SOURCE = f"""

_codeplay_planners = {{"__name__": "_codeplay_planners"}}
exec(compile({_PLANNERS_SOURCE!r}, "<planners>", "exec"), _codeplay_planners)


def _codeplay_plan(request):
    np = _codeplay_np
    as_state, as_action = _codeplay_formats(request)
    environment = Environment()

    def simulate(state, action):
        environment.set_state(as_state(state))
        return _codeplay_checked(environment.step(as_action(action)), request["dimension"])

    rng = np.random.default_rng(request["seed"])
    state = np.asarray(request["observation"], dtype=np.float64)
    if request["discrete"]:
        return _codeplay_planners["mcts_action"](simulate, state, lambda s: s.tobytes(), request["n_actions"], rng,
                                                 **request["settings"])
    return _codeplay_planners["cem_plan"](simulate, state, request["low"], request["high"], rng,
                                          **request["settings"]).tolist()
"""


def plan_program(code: str) -> str:
    """A candidate model's code with the harness, the planners and `_codeplay_plan` after it."""
    return harness.program(code) + _PLAN_ENTRY_SOURCE


@dataclass(frozen=True)
class PlanningResult:
    env_id: str
    random_returns: list[float]
    true_returns: list[float]
    model_returns: list[float]
    normalised: float  # R; NaN when the oracle is no better than random
    normalised_error: float  # bootstrap standard deviation of R
    model_bug: str = ""  # what stopped the model's planning (its episodes then score the random return)

    def to_dict(self) -> dict:
        return asdict(self)


# A policy: (real environment, its observation as a row, seed of this decision) -> the actions to take
Policy = Callable[[object, np.ndarray, int], list]


def random_policy(env, observation: np.ndarray, seed: int) -> list:
    env.action_space.seed(seed)
    return [env.action_space.sample()]


def oracle_policy(env_id: str, settings: PlanningSettings) -> Policy:
    """The planner with the true environment as its model, started from the real simulator's snapshot."""
    model = TrueModel(env_id)

    def simulate(state, action):
        model.restore(state[1])
        next_observation, reward, terminated = model.step(action)
        return (next_observation, model.save()), reward, terminated

    def choose(env, observation: np.ndarray, seed: int) -> list:
        return _plan(
            env_id,
            settings,
            env,
            simulate,
            (observation, TrueModel.snapshot(env)),
            lambda state: state[0].tobytes(),
            seed,
        )

    return choose


def true_model_policy(env_id: str, settings: PlanningSettings) -> Policy:
    """The planner with the true environment used as a CWM is: set to an observation before every step.
    Against the oracle, this measures what planning from observations alone costs (R = 1: nothing)."""
    model = TrueModel(env_id)

    def simulate(state, action):
        model.set_state(state)
        next_observation, reward, terminated = model.step(action)
        return next_observation, reward, terminated

    def choose(env, observation: np.ndarray, seed: int) -> list:
        return _plan(env_id, settings, env, simulate, observation, lambda state: state.tobytes(), seed)

    return choose


def _plan(env_id: str, settings: PlanningSettings, env, simulate, state, key, seed: int) -> list:
    rng = np.random.default_rng(seed)
    if ENVS[env_id].discrete_actions:
        return [planners.mcts_action(simulate, state, key, env.action_space.n, rng, **settings.mcts())]
    space = env.action_space
    return list(
        planners.cem_plan(simulate, state, space.low, space.high, rng, **settings.cem(episode_steps(env_id, settings)))
    )


def model_policy(env_id: str, code: str, sandbox: Sandbox, settings: PlanningSettings) -> Policy:
    """The planner with a candidate CWM as its model, in a sandboxed process of its own per plan."""
    spec, program = ENVS[env_id], plan_program(code)

    def choose(env, observation: np.ndarray, seed: int) -> list:
        request = {
            "kind": spec.observation_kind,
            "discrete": spec.discrete_actions,
            "dimension": len(observation),
            "observation": observation.tolist(),
            "seed": seed,
        }
        if spec.discrete_actions:
            request |= {"n_actions": int(env.action_space.n), "settings": settings.mcts()}
        else:
            request |= {
                "low": env.action_space.low.tolist(),
                "high": env.action_space.high.tolist(),
                "settings": settings.cem(episode_steps(env_id, settings)),
            }
        (verdict,) = sandbox.apply([Call(program, PLAN_ENTRY, request)])
        if verdict.status != "returned":
            raise ModelFailed(f"{verdict.status}: {verdict.detail}")
        return _actions(verdict.value, env)

    return choose


class ModelFailed(Exception):
    """The model raised, timed out or returned no usable action while planning."""


def _actions(value, env) -> list:
    """The plan a model's process returned, checked against the action space."""
    space = env.action_space
    try:
        actions = [int(value)] if hasattr(space, "n") else [np.asarray(a, dtype=space.dtype) for a in value]
    except (TypeError, ValueError) as error:
        raise ModelFailed(f"the planner returned no usable action ({str(error)[:200]})") from None
    if not actions or not all(space.contains(action) for action in actions):
        raise ModelFailed(f"the planner returned actions outside {space}")
    return actions


def episode_steps(env_id: str, settings: PlanningSettings) -> int:
    limit = ENVS[env_id].max_steps
    return limit if settings.max_steps is None else min(limit, settings.max_steps)


def run_episode(env_id: str, policy: Policy, seed: int, max_steps: int) -> float:
    """The undiscounted return of one episode from `env.reset(seed=seed)`, to termination or `max_steps`."""
    env = make(env_id)
    steps = play(env, lambda env, row, step: policy(env, row, seed * 100_003 + step), seed, max_steps)
    total = sum((reward for _, _, _, reward, _, _ in steps), 0.0)
    env.close()
    return total


def evaluate_planning(env_id: str, model: Policy, settings: PlanningSettings, seed: int = 0) -> PlanningResult:
    """Random, oracle and `model` policies on the same episodes (seeds seed, seed + 1, ...), and R."""
    steps, seeds = episode_steps(env_id, settings), [seed + episode for episode in range(settings.episodes)]
    random_returns = [run_episode(env_id, random_policy, s, steps) for s in seeds]
    oracle = oracle_policy(env_id, settings)
    true_returns = [run_episode(env_id, oracle, s, steps) for s in seeds]
    bug = ""
    try:
        model_returns = [run_episode(env_id, model, s, steps) for s in seeds]
    except ModelFailed as error:  # no usable model: R = 0, as the paper scores an environment without one
        model_returns, bug = list(random_returns), str(error)[:2000]
    value, error_bar = normalised_return(random_returns, true_returns, model_returns, seed)
    return PlanningResult(env_id, random_returns, true_returns, model_returns, value, error_bar, bug)


def normalised_return(
    random_returns: list[float], true_returns: list[float], model_returns: list[float], seed: int = 0
) -> tuple[float, float]:
    """(R from the mean returns, the standard deviation of R over bootstrap resamples of each policy's
    episodes); (NaN, NaN) when the oracle's mean is the random one's."""
    groups = [np.asarray(returns, dtype=np.float64) for returns in (random_returns, true_returns, model_returns)]
    value = _normalised(*(group.mean() for group in groups))
    if math.isnan(value):
        return value, value
    rng = np.random.default_rng(seed)
    means = [group[rng.integers(len(group), size=(BOOTSTRAP_RESAMPLES, len(group)))].mean(axis=1) for group in groups]
    resampled = np.array([_normalised(*triple) for triple in zip(*means)])
    return value, float(np.nanstd(resampled))


def _normalised(random_mean: float, true_mean: float, model_mean: float) -> float:
    gap = true_mean - random_mean
    return float("nan") if abs(gap) <= SAME_RETURN else (model_mean - random_mean) / gap
