"""A Code World Model as a search task: GIF-MCTS, WorldCoder and plain sampling write `class Environment`
for one environment, and every candidate is scored in the sandbox on the *search* transitions.

The score that guides the search is our accuracy (`metric.accuracy`), so a search can reach 1.0
and stop; `ModelScore` also carries the official metric and the held-out accuracy, which no search
decision sees. improve is shown the first transition the program gets wrong, in recording order;
fix is shown the exception with the program's line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codeplay_lightning.cwm import harness, metric
from codeplay_lightning.cwm.transitions import Transitions
from codeplay_lightning.execution import Sandbox
from codeplay_lightning.search.tasks import DescribedTask, Feedback, describe_wrong_result

INTERFACE = """\
Write the environment as a Python class named `Environment` (numpy is available as `np` once you
`import numpy as np`) with exactly these methods:
- `__init__(self)`: takes no arguments and sets up everything the environment needs.
- `set_state(self, state)`: sets the environment to `state`, an observation as the environment itself
  returns it ({state_format}), and sets every internal variable to match it. Assume the episode is
  not over when it is called.
- `step(self, action)`: applies `action` ({action_format}) to the current state and returns the tuple
  `(next_state, reward, done)`: the next observation in the same format, the reward as a number, and
  whether the episode ended (a time limit on the episode's length does not count).
The class is used as a pure function of (state, action): `set_state` is called before every `step`.
Write the whole class, with every helper it uses defined, and nothing else."""

STATE_FORMATS = {
    "int": "an int",
    "tuple": "a tuple of ints",
    "float32": "a numpy array of float32",
    "float64": "a numpy array of float64",
}


@dataclass(frozen=True)
class ModelScore:
    """A CWM program judged on one environment's transitions."""

    accuracy: float  # ours, on the search transitions: what the search maximises
    heldout_accuracy: float  # ours, on the held-out transitions (NaN if there are none)
    official_accuracy: float  # the official metric, on the search transitions
    bug: harness.Bug | None = None  # then every accuracy is 0, as in the official code


def task_description(env_description: str, data: Transitions) -> str:
    actions = "an int" if data.discrete_actions else "a numpy array of float64"
    interface = INTERFACE.format(state_format=STATE_FORMATS[data.observation_kind], action_format=actions)
    return f"{env_description.strip()}\n\n{interface}"


def score_model(sandbox: Sandbox, code: str, data: Transitions) -> ModelScore:
    """Both metrics on the search split and ours on the held-out split, or the bug (then all 0)."""
    search, heldout = data.of_split("search"), data.of_split("heldout")
    predictions = harness.predict(sandbox, code, data)
    if isinstance(predictions, harness.Bug):
        return ModelScore(0.0, 0.0, 0.0, predictions)
    on_search, on_heldout = (_split_predictions(predictions, data.split == split) for split in ("search", "heldout"))
    heldout_accuracy = metric.accuracy(heldout, on_heldout) if len(heldout) else float("nan")
    return ModelScore(metric.accuracy(search, on_search), heldout_accuracy, metric.official_accuracy(search, on_search))


class CWMTask(DescribedTask):
    """Write a Code World Model of one environment, scored on its search transitions."""

    root_code = ""  # as the paper: the first generate writes the program from its start

    def __init__(self, name: str, env_description: str, data: Transitions, sandbox: Sandbox):
        self.name, self.sandbox = name, sandbox
        self.search = data.of_split("search")
        if not len(self.search):
            raise ValueError(f"{name}: no search transitions to score programs on")
        self.description = task_description(env_description, data)

    def evaluate(self, program: str) -> Feedback:
        predictions = harness.predict(self.sandbox, program, self.search)
        if isinstance(predictions, harness.Bug):
            return Feedback(score=0.0, buggy=True, error=predictions.detail)
        score = metric.accuracy(self.search, predictions)
        wrong = metric.first_wrong(self.search, predictions)
        example = None if wrong is None else describe_transition(self.search, predictions, wrong)
        return Feedback(score=score, buggy=False, failing_example=example)


def describe_transition(data: Transitions, predictions: metric.Predictions, index: int) -> str:
    """One transition as the improve prompt shows it: the state and action, what really followed, and
    what the program predicted, in the environment's own formats."""
    state, action = _shown(data.observations[index], data.observation_kind), _shown_action(data, index)
    expected = (
        f"next_state = {_shown(data.next_observations[index], data.observation_kind)}, "
        f"reward = {float(data.rewards[index])!r}, done = {bool(data.terminated[index])}"
    )
    got = (
        f"next_state = {_shown(predictions.next_observations[index], data.observation_kind)}, "
        f"reward = {float(predictions.rewards[index])!r}, done = {bool(predictions.dones[index])}"
    )
    return describe_wrong_result(f"set_state({state}), then step({action})", expected, got)


def _shown(row: np.ndarray, kind: str) -> str:
    if kind == "int":
        return str(int(row[0])) if float(row[0]).is_integer() else repr(float(row[0]))
    if kind == "tuple":
        return repr(tuple(int(v) if float(v).is_integer() else float(v) for v in row))
    return "np.array([" + ", ".join(repr(float(v)) for v in row) + "])"


def _shown_action(data: Transitions, index: int) -> str:
    action = data.actions[index]
    return str(int(action)) if data.discrete_actions else _shown(action, "float64")


def _split_predictions(predictions: metric.Predictions, mask: np.ndarray) -> metric.Predictions:
    return metric.Predictions(predictions.next_observations[mask], predictions.rewards[mask], predictions.dones[mask])
