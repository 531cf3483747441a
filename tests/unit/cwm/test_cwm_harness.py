"""`harness.predict`: a Code World Model's predictions, each transition from a sandboxed process of its
own, or the bug of the first transition that failed."""

from __future__ import annotations

import time

import numpy as np
import pytest
from cwm_support import CARTPOLE_MODEL, cartpole_rollout, load_model

from codeplay_lightning.cwm.harness import Bug, predict
from codeplay_lightning.cwm.metric import Predictions, accuracy
from codeplay_lightning.execution import Sandbox


def test_predictions_from_the_sandbox_equal_the_model_run_here(numpy_sandbox):
    data = cartpole_rollout()
    predictions = predict(numpy_sandbox, CARTPOLE_MODEL, data)
    assert isinstance(predictions, Predictions)
    here = load_model(CARTPOLE_MODEL)()
    for i in range(len(data)):
        here.set_state(data.observations[i].astype(np.float32))
        next_state, reward, done = here.step(int(data.actions[i]))
        assert predictions.next_observations[i].tolist() == np.asarray(next_state, np.float64).tolist()
        assert (predictions.rewards[i], predictions.dones[i]) == (reward, done)
    assert accuracy(data, predictions) == 1.0
    assert data.terminated.any()


BROKEN_STEP = {
    "a pair": ("return self.state, 1.0", "tuple (next_state, reward, done)"),
    "a short state": ("return self.state[:3], 1.0, False", "next state of 3 numbers; states here have 4"),
    "a text reward": ("return self.state, 'one', False", "number as its reward"),
    "a text done": ("return self.state, 1.0, 'no'", "bool as done"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_STEP))
def test_malformed_results_are_bugs_naming_the_problem(numpy_sandbox, case):
    statement, message = BROKEN_STEP[case]
    code = CARTPOLE_MODEL.replace("return self.state, 1.0, done", statement)
    bug = predict(numpy_sandbox, code, cartpole_rollout(5))
    assert isinstance(bug, Bug) and bug.kind == "error" and message in bug.detail


def test_an_exception_is_a_bug_with_the_model_line(numpy_sandbox):
    code = CARTPOLE_MODEL.replace("force = self.force if action == 1 else -self.force", "force = self.forces[action]")
    bug = predict(numpy_sandbox, code, cartpole_rollout(5))
    line = next(number for number, text in enumerate(code.splitlines(), 1) if "self.forces[action]" in text)
    assert isinstance(bug, Bug) and "AttributeError" in bug.detail and f"line {line}," in bug.detail


def test_the_bug_is_that_of_the_first_transition_that_failed(numpy_sandbox):
    """Transitions 3 and 4 both raise, 4 at once and 3 after a while: the bug is 3's all the same."""
    data = cartpole_rollout(8)
    third, fourth = (data.observations[i].tolist() for i in (3, 4))
    code = (
        CARTPOLE_MODEL
        + f"""
import time

_Right = Environment


class Environment(_Right):
    def set_state(self, state):
        super().set_state(state)
        if self.state.tolist() == {third!r}:
            time.sleep(1.0)
            raise ValueError("transition 3")
        if self.state.tolist() == {fourth!r}:
            raise ValueError("transition 4")
"""
    )
    bug = predict(numpy_sandbox, code, data)
    line = next(number for number, text in enumerate(code.splitlines(), 1) if '"transition 3"' in text)
    assert isinstance(bug, Bug) and bug.kind == "error" and f"line {line}," in bug.detail
    assert "ValueError: transition 3" in bug.detail and "transition 4" not in bug.detail


def test_a_model_that_loops_is_a_timeout_bug_found_in_one_timeout():
    """Every transition would run into the limit: predict stops once the first has."""
    code = CARTPOLE_MODEL.replace("x, x_dot, theta, theta_dot = self.state", "while True:\n            pass")
    with Sandbox(workers=2, timeout=0.5, modules=("numpy",)) as fast:
        started = time.perf_counter()
        bug = predict(fast, code, cartpole_rollout(40))
        seconds = time.perf_counter() - started
    assert bug.kind == "timeout" and bug.detail.startswith("the program ran past the 0.5 s limit"), bug
    assert seconds < 5.0  # 40 transitions run to the limit, two at a time: 10 s


def test_a_model_that_tampers_with_the_harness_gets_no_score(numpy_sandbox):
    """The model's module runs first: replacing what the harness uses yields a bug, not predictions."""
    code = CARTPOLE_MODEL + "\nimport builtins\nbuiltins.float = lambda value: 'x'\n"
    assert isinstance(predict(numpy_sandbox, code, cartpole_rollout(5)), Bug)
