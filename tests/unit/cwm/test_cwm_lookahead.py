"""A Code World Model that looks for the other transitions to read the next state off them: scored one
transition per fresh process, it finds none, and scores what a model that predicts nothing scores."""

from __future__ import annotations

import numpy as np
import pytest
from cwm_support import CARTPOLE_MODEL

from codeplay_lightning.cwm.harness import predict
from codeplay_lightning.cwm.metric import Predictions, accuracy
from codeplay_lightning.execution import Call

pytest.importorskip("gymnasium")

ROWS = 150  # of CartPole's search split: about ten episodes, terminations included

NO_OP = """
class Environment:
    def set_state(self, state):
        self.state = state

    def step(self, action):
        return self.state, 1.0, False
"""

# Every way it has to see other transitions; where it finds this state followed by another in a list,
# it predicts that one, else it predicts the state unchanged (as NO_OP does).
LOOKAHEAD = '''
import gc
import json
import sys

import numpy as np

NOTES = ("lookahead_rows.jsonl", "/tmp/lookahead_rows.jsonl")  # the working directory and /tmp


class Environment:
    seen = []  # every state any instance was set to, for as long as the class lives

    def set_state(self, state):
        self.state = np.asarray(state, dtype=np.float64).tolist()
        Environment.seen.append(self.state)
        for path in NOTES:
            try:
                with open(path, "a") as notes:
                    notes.write(json.dumps(self.state) + "\\n")
            except OSError:
                pass

    def step(self, action):
        for states in reachable():
            for state, following in zip(states, states[1:]):
                if state is not None and following is not None and list(state) == self.state != list(following):
                    return np.asarray(following, dtype=np.float64), 1.0, False
        return np.asarray(self.state), 1.0, False


def reachable():
    """Every list of states this process can reach: remembered, in files, up the stack, in modules, on the heap."""
    yield Environment.seen
    for path in NOTES:
        try:
            with open(path) as notes:
                yield [json.loads(line) for line in notes]
        except (OSError, ValueError):
            pass
    frame = sys._getframe()
    while frame is not None:
        yield from state_lists(frame.f_locals, 4)
        yield from state_lists(frame.f_globals, 4)
        frame = frame.f_back
    for module in list(sys.modules.values()):
        yield from state_lists(getattr(module, "__dict__", {}), 3)
    for thing in gc.get_objects():
        yield from state_lists(thing, 1)


def state_lists(thing, depth):
    """Lists in `thing` of states (rows of 4 numbers, or dicts holding one as "state"), as lists of rows."""
    if isinstance(thing, dict) and depth > 0:
        for value in list(thing.values()):
            yield from state_lists(value, depth - 1)
    elif isinstance(thing, (list, tuple)) and len(thing) > 1:
        rows = [row.get("state") if isinstance(row, dict) else row for row in thing[:2]]
        if all(is_state(row) for row in rows):
            yield [row.get("state") if isinstance(row, dict) else row for row in thing]
        elif depth > 0:
            for value in thing[:64]:
                yield from state_lists(value, depth - 1)


def is_state(row):
    return isinstance(row, (list, tuple, np.ndarray)) and len(row) == 4 and all(
        isinstance(value, (int, float, np.floating)) for value in row)
'''

# The harness as it was: every transition of a split in one call
ONE_CALL_FOR_ALL = """

def predict_all(batch):
    environment = Environment()
    next_states = []
    for state, action in zip(batch["states"], batch["actions"]):
        environment.set_state(np.array(state, dtype=np.float32))
        next_states.append(np.asarray(environment.step(action)[0], dtype=np.float64).tolist())
    return next_states
"""


@pytest.fixture(scope="module")
def data():
    from codeplay_lightning.cwm.collect import collect

    search = collect("CartPole-v1", seed=0).of_split("search")
    return search.select(np.arange(len(search)) < ROWS)


def test_the_lookahead_model_reads_the_next_states_off_a_batch_in_one_call(numpy_sandbox, data):
    """What it did to the harness that sent a whole split to one call."""
    batch = {"states": data.observations.tolist(), "actions": data.actions.tolist()}
    (verdict,) = numpy_sandbox.apply([Call(LOOKAHEAD + ONE_CALL_FOR_ALL, "predict_all", batch)])
    assert verdict.status == "returned"
    read_off = (np.array(verdict.value) == data.next_observations).all(axis=1)
    assert read_off.mean() > 0.9 and data.terminated.any()


def test_one_transition_per_process_gives_the_lookahead_model_nothing_to_read(numpy_sandbox, data):
    """It scores as the no-op model, the first time and the second (nothing is left of the first)."""
    no_op = predict(numpy_sandbox, NO_OP, data)
    assert isinstance(no_op, Predictions) and accuracy(data, no_op) < 0.7
    for _ in range(2):
        lookahead = predict(numpy_sandbox, LOOKAHEAD, data)
        assert isinstance(lookahead, Predictions)
        assert lookahead.next_observations.tolist() == no_op.next_observations.tolist()
        assert accuracy(data, lookahead) == accuracy(data, no_op)


def test_the_true_dynamics_still_score_one_on_real_transitions(numpy_sandbox, data):
    assert accuracy(data, predict(numpy_sandbox, CARTPOLE_MODEL, data)) == 1.0
