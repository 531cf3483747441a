"""Running a Code World Model: the candidate's code plus our harness, called in the sandbox.

The contract (paper §3, the interface the prompts give): `class Environment` with `__init__()`,
`set_state(state)` and `step(action) -> (next_state, reward, done)`, used as a pure function of
(observation, action): one instance, `set_state` before every `step`. States and actions reach
it in the environment's own format (an int, a tuple of ints, a float32 or float64 array; an int
or a float64 array), rebuilt from the rows of `Transitions`.

`predict` sends the (observation, action) pairs only, never what followed them, to the model's
own sandboxed process and returns its `Predictions`, or the `Bug` it hit: the exception with the
line of the model that raised it, or what was malformed in what it returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codeplay_lightning.cwm.metric import Predictions
from codeplay_lightning.cwm.transitions import Transitions
from codeplay_lightning.execution import Call, Sandbox

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


def _codeplay_predict(batch):
    as_state, as_action = _codeplay_formats(batch)
    environment = Environment()
    next_states, rewards, dones = [], [], []
    for state, action in zip(batch["states"], batch["actions"]):
        environment.set_state(as_state(state))
        next_state, reward, done = _codeplay_checked(environment.step(as_action(action)), batch["dimension"])
        next_states.append(next_state.tolist())
        rewards.append(reward)
        dones.append(done)
    return {"next_states": next_states, "rewards": rewards, "dones": dones}
'''


@dataclass(frozen=True)
class Bug:
    """Why a model gave no predictions: `kind` is the sandbox status (error, timeout, memory, syntax)."""

    kind: str
    detail: str


def program(code: str) -> str:
    """The model's code with the harness after it."""
    return code.rstrip() + "\n" + HARNESS


def batch(transitions: Transitions) -> dict:
    """The harness's input for these transitions: (observation, action) pairs and how to read them."""
    actions = transitions.actions.tolist()
    return {"kind": transitions.observation_kind, "dimension": transitions.observations.shape[1],
            "discrete": transitions.discrete_actions, "states": transitions.observations.tolist(), "actions": actions}


def predict(sandbox: Sandbox, code: str, transitions: Transitions) -> Predictions | Bug:
    """The model's predictions for every transition, from its own process in `sandbox` (which must
    offer numpy), or the Bug that stopped it."""
    (verdict,) = sandbox.apply([Call(program(code), ENTRY, batch(transitions))])
    if verdict.status != "returned":
        return Bug(verdict.status, verdict.detail)
    try:  # the model's process wrote this: it may have replaced anything the harness relies on
        value, shape = verdict.value, transitions.next_observations.shape
        predictions = Predictions(np.asarray(value["next_states"], dtype=np.float64).reshape(shape),
                                  np.asarray(value["rewards"], dtype=np.float64),
                                  np.asarray(value["dones"], dtype=np.bool_))
        if predictions.rewards.shape != (len(transitions),) or value["dones"] != predictions.dones.tolist():
            raise ValueError("rewards or done flags of the wrong shape or type")
    except (KeyError, TypeError, ValueError) as error:
        return Bug("error", f"the model's process returned malformed predictions ({str(error)[:200]})")
    return predictions
