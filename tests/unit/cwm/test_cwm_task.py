"""`CWMTask` and `score_model`: Code World Models scored on transitions and searched for with an LLM."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cwm_support import CARTPOLE_MODEL, cartpole_rollout
from support import ScriptedLLM

from codeplay_lightning.cwm.task import CWMTask, score_model
from codeplay_lightning.search import make_search, run_searches

WRONG_GRAVITY = CARTPOLE_MODEL.replace("9.8, 1.0, 0.1, 0.5", "9.0, 1.0, 0.1, 0.5")
CRASHING = CARTPOLE_MODEL.replace("force = self.force if action == 1 else -self.force", "force = self.forces[action]")


@pytest.fixture(scope="module")
def data():
    rollout = cartpole_rollout(80)
    rollout.split = np.where(np.arange(80) >= 60, "heldout", "search")
    return rollout


def test_score_model_on_both_splits(numpy_sandbox, data):
    right = score_model(numpy_sandbox, CARTPOLE_MODEL, data)
    assert (right.accuracy, right.heldout_accuracy, right.bug) == (1.0, 1.0, None)
    assert right.official_accuracy < 1.0 or not data.truncated.any()
    wrong = score_model(numpy_sandbox, WRONG_GRAVITY, data)
    assert 1 / 3 < wrong.accuracy < 1.0 and 1 / 3 < wrong.heldout_accuracy < 1.0
    crashed = score_model(numpy_sandbox, CRASHING, data)
    assert crashed.accuracy == crashed.official_accuracy == 0.0 and "AttributeError" in crashed.bug.detail


def test_improve_sees_the_first_wrong_transition_and_fix_sees_the_line(numpy_sandbox, data):
    task = CWMTask("CartPole-v1", "A pole on a cart.", data, numpy_sandbox)
    wrong = task.evaluate(WRONG_GRAVITY)
    assert not wrong.buggy and wrong.score < 1.0
    first = task.search.observations[0]
    assert f"set_state(np.array([{float(first[0])!r}" in wrong.failing_example
    assert "Expected:\nnext_state = np.array([" in wrong.failing_example and "reward = 1.0" in wrong.failing_example
    crashed = task.evaluate(CRASHING)
    line = next(n for n, text in enumerate(CRASHING.splitlines(), 1) if "self.forces" in text)
    assert crashed.buggy and f"line {line}," in crashed.error
    assert math.isclose(task.evaluate(CARTPOLE_MODEL).score, 1.0)


def test_worldcoder_repairs_a_model_with_an_llm_that_knows_the_physics(numpy_sandbox, data):
    """The LLM's first model crashes, its fix has the wrong gravity; shown a wrong transition, it
    corrects the gravity."""

    def answer(prompt: str) -> str:
        if "## A wrong result" in prompt:
            return f"## Corrected program\n```python\n{CARTPOLE_MODEL}```"
        if "## Error" in prompt:
            return f"## Corrected program\n```python\n{WRONG_GRAVITY}```"
        return f"```python\n{CRASHING}```"

    llm = ScriptedLLM(answer)
    task = CWMTask("CartPole-v1", "A pole.", data, numpy_sandbox)
    (result,) = run_searches([make_search("worldcoder", task, 6)], llm)
    assert result.score == 1.0 and result.program.strip() == CARTPOLE_MODEL.strip() and result.solved_at == 3
    assert "class named `Environment`" in llm.prompts[0] and "a numpy array of float32" in llm.prompts[0]
    line = next(n for n, text in enumerate(CRASHING.splitlines(), 1) if "self.forces" in text)
    assert f"line {line}," in llm.prompts[1] and "## A wrong result" in llm.prompts[2]


def test_gif_mcts_fixes_a_crashing_model_and_stops_at_accuracy_one(numpy_sandbox, data):
    def answer(prompt: str) -> str:
        return f"```python\n{CARTPOLE_MODEL if '## Error' in prompt else CRASHING}```"

    llm = ScriptedLLM(answer)
    (result,) = run_searches([make_search("gif-mcts", CWMTask("CartPole-v1", "A pole.", data, numpy_sandbox), 20)], llm)
    assert (result.score, result.solved_at, result.calls) == (1.0, 2, 2)
