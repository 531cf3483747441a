"""Running a Code World Model: the candidate's code plus our harness, called in the sandbox.

The contract (paper §3, the interface the prompts give): `class Environment` with `__init__()`,
`set_state(state)` and `step(action) -> (next_state, reward, done)`, used as a pure function of
(observation, action): one instance, `set_state` before every `step`. States and actions reach
it in the environment's own format (an int, a tuple of ints, a float32 or float64 array; an int
or a float64 array), rebuilt from the rows of `Transitions`.

`predict` sends each (observation, action) pair, never what followed it, in a call of its own:
the sandbox runs every call in a fresh process, so the model sees one transition and nothing else.
Given several, a model could read them off the harness's frame or the heap (or remember them, in a
process kept between calls), and the next transition's observation is this one's next observation:
a model with no dynamics scored 0.998 that way on CartPole. `predict` returns the `Predictions`, or
the `Bug` of the first transition that failed: the exception with the line of the model that
raised it, or what was malformed in what it returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codeplay_lightning.cwm.metric import Predictions
from codeplay_lightning.cwm.transitions import Transitions
from codeplay_lightning.execution import Call, Sandbox, Verdict

ENTRY = "_codeplay_predict"
# Appended after the model's code, so that the model's own line numbers stay those of its text. Its
# names all start with _codeplay_, so that it shadows none of the model's.
HARNESS = '''

import numpy as _codeplay_np


def _codeplay_formats(request):
    """(row -> state in the environment's format, action as given -> action in its format)."""
    np = _codeplay_np
    as_state = {"int": lambda row: int(row[0]), "tuple": lambda row: tuple(int(v) for v in row),
                "float32": lambda row: np.array(row, dtype=np.float32),
                "float64": lambda row: np.array(row, dtype=np.float64)}[request["kind"]]
    as_action = int if request["discrete"] else (lambda action: np.array(action, dtype=np.float64))
    return as_state, as_action


def _codeplay_checked(result, dimension):
    """A step's (next_state, reward, done) as (float64 row, float, bool); TypeError or ValueError
    naming what is malformed."""
    np = _codeplay_np
    if not isinstance(result, tuple) or len(result) != 3:
        raise TypeError("step must return a tuple (next_state, reward, done), not " + repr(result)[:200])
    next_state, reward, done = result
    flat = np.asarray(next_state, dtype=np.float64).ravel()
    if flat.size != dimension:
        raise ValueError(f"step returned a next state of {flat.size} numbers; states here have {dimension}")
    if isinstance(reward, bool) or not isinstance(reward, (int, float, np.integer, np.floating)):
        raise TypeError("step must return a number as its reward, not " + repr(reward)[:200])
    if not isinstance(done, (bool, np.bool_)) and done not in (0, 1):
        raise TypeError("step must return a bool as done, not " + repr(done)[:200])
    return flat, float(reward), bool(done)


def _codeplay_predict(row):
    as_state, as_action = _codeplay_formats(row)
    environment = Environment()
    environment.set_state(as_state(row["state"]))
    next_state, reward, done = _codeplay_checked(environment.step(as_action(row["action"])), row["dimension"])
    return {"next_state": next_state.tolist(), "reward": reward, "done": done}
'''


@dataclass(frozen=True)
class Bug:
    """Why a model gave no predictions: `kind` is the sandbox status (error, timeout, memory, syntax)
    of the first transition that failed."""

    kind: str
    detail: str


def program(code: str) -> str:
    """The model's code with the harness after it."""
    return code.rstrip() + "\n" + HARNESS


def rows(transitions: Transitions) -> list[dict]:
    """The harness's inputs, one per transition: its (observation, action) and how to read them."""
    form = {
        "kind": transitions.observation_kind,
        "dimension": transitions.observations.shape[1],
        "discrete": transitions.discrete_actions,
    }
    return [
        form | {"state": state, "action": action}
        for state, action in zip(transitions.observations.tolist(), transitions.actions.tolist())
    ]


def predict(sandbox: Sandbox, code: str, transitions: Transitions) -> Predictions | Bug:
    """The model's predictions for every transition, each from a process of its own in `sandbox`
    (which must offer numpy), or the Bug of the first transition, in order, that failed. The calls
    run in parallel; once that transition is known, the rest are stopped."""
    source, outcomes = program(code), _Outcomes(transitions)
    try:
        sandbox.apply([Call(source, ENTRY, row) for row in rows(transitions)], on_verdict=outcomes.land)
    except _FirstBug as stop:
        return stop.bug
    return outcomes.predictions


class _FirstBug(Exception):
    """Raised by `on_verdict` to end `Sandbox.apply`, which kills the calls still running: no verdict
    still to come can change the Bug."""

    def __init__(self, bug: Bug):
        self.bug = bug


class _Outcomes:
    """The predictions, filled in as the verdicts land; `land` raises _FirstBug once the first
    transition that failed has no unfinished one before it."""

    def __init__(self, transitions: Transitions):
        count, self.dimension = transitions.observations.shape
        self.predictions = Predictions(np.zeros((count, self.dimension)), np.zeros(count), np.zeros(count, np.bool_))
        self.landed, self.bugs = np.zeros(count, np.bool_), {}
        self.settled = 0  # the transitions before it all gave predictions

    def land(self, index: int, verdict: Verdict) -> None:
        outcome = _outcome(verdict, self.dimension)
        if isinstance(outcome, Bug):
            self.bugs[index] = outcome
        else:
            predictions = self.predictions
            predictions.next_observations[index], predictions.rewards[index], predictions.dones[index] = outcome
        self.landed[index] = True
        while self.settled < len(self.landed) and self.landed[self.settled] and self.settled not in self.bugs:
            self.settled += 1
        if self.settled in self.bugs:
            raise _FirstBug(self.bugs[self.settled])


def _outcome(verdict: Verdict, dimension: int) -> tuple[np.ndarray, float, bool] | Bug:
    """One transition's (next state, reward, done) from its verdict, or its Bug."""
    if verdict.status != "returned":
        return Bug(verdict.status, verdict.detail)
    try:  # the model's process wrote this: it may have replaced anything the harness relies on
        value = verdict.value
        next_state, reward, done = np.asarray(value["next_state"], dtype=np.float64), value["reward"], value["done"]
        if next_state.shape != (dimension,) or type(reward) not in (int, float) or type(done) is not bool:
            raise ValueError("a next state, reward or done flag of the wrong shape or type")
        return next_state, float(reward), done
    except (KeyError, TypeError, ValueError, OverflowError) as error:
        return Bug("error", f"the model's process returned malformed predictions ({str(error)[:200]})")
