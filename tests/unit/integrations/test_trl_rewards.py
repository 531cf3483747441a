"""The TRL reward functions give what the project's own functions give on the same completions: P3Reward the
sandbox's verdicts of the Solver's programs, SetterReward the R that training's `reward_puzzles` gives, call after
call as the archive grows; and each bad input is refused in one line."""

from __future__ import annotations

import doctest
import re
from collections import Counter

import pytest
from support import GOOD_MORNING, NEGATIVE_ROOT, SEVEN, CharEmbedder, ScriptedLLM

from codeplay_lightning.archive import NoveltyArchive, embed, reference_mean_distance
from codeplay_lightning.config import RewardConfig, SolverConfig
from codeplay_lightning.corpus import reference_puzzles
from codeplay_lightning.execution import JUDGE_ERROR, IsolationError, Verdict
from codeplay_lightning.integrations import P3Reward, SetterReward
from codeplay_lightning.integrations import trl as trl_rewards
from codeplay_lightning.puzzles import fewshot_puzzles
from codeplay_lightning.setter.rollout import judge_puzzles, novelty_distances, reward_puzzles
from codeplay_lightning.solver import FewShotSolver, candidate_program

# (puzzle, a Solver's completion as TRL hands it over, that completion as the Solver's sampler cuts it)
SOLVER_COMPLETIONS = [
    (SEVEN, "\n    return 7\n", "\n    return 7\n"),
    (SEVEN, "\n    return 7\nassert f(g())\n", "\n    return 7"),  # the few-shot pattern goes on
    (SEVEN, "\n    return 8", "\n    return 8"),
    (NEGATIVE_ROOT, "\n    return -12\n\n\ndef f(", "\n    return -12"),
    (NEGATIVE_ROOT, "\n    return 1 // 0\n", "\n    return 1 // 0\n"),
    (GOOD_MORNING, "\n    return 'morning'\nprint(f(g()))", "\n    return 'morning'\nprint(f(g()))"),
    (GOOD_MORNING, "\n    return 'morning", "\n    return 'morning"),  # a syntax error
]


def test_the_doctests_pass():
    assert doctest.testmod(trl_rewards).failed == 0


def test_p3_reward_is_the_sandboxs_verdict_of_the_solvers_program(sandbox):
    puzzles, completions, cut = zip(*SOLVER_COMPLETIONS)
    with P3Reward(workers=1) as reward:
        rewards = reward(["def g():"] * len(puzzles), list(completions), puzzle=[p.f for p in puzzles])
    verdicts = sandbox.verify([candidate_program(p, text) for p, text in zip(puzzles, cut)])
    assert rewards == [float(verdict.passed) for verdict in verdicts]
    assert rewards == [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert [verdict.status for verdict in verdicts][2:] == ["fail", "pass", "error", "pass", "syntax"]


def test_p3_reward_leaves_out_what_the_sandbox_failed_to_judge(monkeypatch):
    with P3Reward(workers=1) as reward:
        monkeypatch.setattr(reward.sandbox, "verify", lambda programs: [Verdict(JUDGE_ERROR, "lost twice", 0.0)])
        assert reward(["def g():"], ["\n    return 7"], puzzle=[SEVEN.f]) == [None]


@pytest.mark.parametrize(
    ("completions", "columns", "error", "message"),
    [
        (["\n    return 7"], {}, ValueError, "P3Reward reads each row's f from a dataset column 'puzzle'"),
        (["\n    return 7"] * 2, {"puzzle": [SEVEN.f]}, ValueError, "P3Reward needs one f (a str) in 'puzzle' per"),
        ([[{"role": "assistant", "content": "7"}]], {"puzzle": [SEVEN.f]}, TypeError, "P3Reward takes text"),
    ],
)
def test_p3_reward_refuses_bad_input_in_one_line(completions, columns, error, message):
    with P3Reward(workers=1) as reward, pytest.raises(error, match=f"^{re.escape(message)}[^\n]*$"):
        reward(["def g():"] * len(completions), completions, **columns)


def solver_llm() -> ScriptedLLM:
    """A Solver that passes SEVEN on every other attempt (D = 2), NEGATIVE_ROOT always (D = 1), GOOD_MORNING never."""
    attempts = Counter()

    def answer(prompt: str) -> str:
        f = prompt[prompt.rindex("def f(") : prompt.rindex("\n\ndef g():")]
        attempts[f] += 1
        return {SEVEN.f: f"\n    return {7 + attempts[f] % 2}", NEGATIVE_ROOT.f: "\n    return -12"}.get(f, "\n    0")

    return ScriptedLLM(answer)


# two calls' completions as TRL hands them over, and as the Setter's sampler cuts them
SETTER_CALLS = [
    (
        [
            SEVEN.f + "\n\nassert f(g())\n",
            "\n" + GOOD_MORNING.f + "\n\ndef f(",
            "def f(x):\n    return x",
            NEGATIVE_ROOT.f,
        ],
        [SEVEN.f, GOOD_MORNING.f, "def f(x):\n    return x", NEGATIVE_ROOT.f],
    ),
    (
        [SEVEN.f, "def f(s: str):\n    return s == 'x'\n\n\n", "garbage"],
        [SEVEN.f, "def f(s: str):\n    return s == 'x'", "garbage"],
    ),
]


@pytest.mark.parametrize(
    ("w_difficulty", "w_novelty", "combine"), [(1.0, 1.0, "sum"), (0.5, 2.0, "sum"), (1.0, 1.0, "product")]
)
def test_setter_reward_is_trainings_reward_call_after_call(monkeypatch, sandbox, w_difficulty, w_novelty, combine):
    monkeypatch.setattr(trl_rewards, "load_embedder", lambda spec: CharEmbedder())
    weights = {"w_difficulty": w_difficulty, "w_novelty": w_novelty, "combine": combine}
    with SetterReward(solver_llm(), attempts=4, workers=1, **weights) as reward:
        rewards, components = [], []
        for completions, _ in SETTER_CALLS:  # as TRL calls [reward, reward.difficulty, reward.novelty] in a step
            prompts = ["from typing import List\n\n"] * len(completions)
            rewards.append(reward(prompts, completions))
            components.append((reward.difficulty(prompts, completions), reward.novelty(prompts, completions)))
        assert len(reward.archive) == 7  # each completion archived once

    # training's functions on the same texts: the Solver, the archive and the normaliser as a run builds them
    solver = FewShotSolver(solver_llm(), sandbox, fewshot_puzzles()[:6], SolverConfig(attempts=4))
    embedder = CharEmbedder()
    archive = NoveltyArchive(embedder.get_embedding_dimension())
    reference_distance = reference_mean_distance(embed(embedder, [p.f for p in reference_puzzles()]))
    scored = [
        reward_puzzles(
            texts,
            judge_puzzles(texts, solver),
            novelty_distances(texts, archive, embedder),
            reference_distance,
            RewardConfig(**weights),
        )
        for _, texts in SETTER_CALLS
    ]
    assert rewards == [[puzzle.reward for puzzle in call] for call in scored]
    assert components == [([p.r_difficulty for p in call], [p.r_novelty for p in call]) for call in scored]
    r_difficulty = [puzzle.r_difficulty for call in scored for puzzle in call]
    assert r_difficulty == pytest.approx([0.5, -1.0, -1.0, 0.0, 0.5, -1.0, -1.0])  # SEVEN: D = 2
    assert scored[0][0].r_novelty == 1.0  # the first puzzle: nothing archived to compare it to


def test_setter_reward_refuses_a_weighted_product_before_it_starts_a_sandbox(monkeypatch):
    monkeypatch.setattr(trl_rewards, "Sandbox", None)  # never reached
    with pytest.raises(
        ValueError, match=r"^the product reward R_d·R_n has no weights: set w_d = w_n = 1, got 2.0, 1.0$"
    ):
        SetterReward(solver_llm(), w_difficulty=2.0, combine="product")


class PartialSandbox:
    """A sandbox whose wardens isolate programs less than fully: with `require_isolation` it refuses, as a real one."""

    closed = False

    def __init__(self, workers, timeout, require_isolation):
        self.require_isolation = require_isolation

    @property
    def isolation(self) -> str:
        if self.require_isolation:
            raise IsolationError("full isolation is required, and here a program can read this user's files (basic)")
        return "basic"

    def close(self) -> None:
        PartialSandbox.closed = True


def test_less_than_full_isolation_is_refused_unless_allowed(monkeypatch):
    monkeypatch.setattr(trl_rewards, "Sandbox", PartialSandbox)
    with pytest.raises(
        IsolationError, match=r"^full isolation is required, .*; allow_partial_isolation=True judges anyway$"
    ):
        P3Reward()
    assert PartialSandbox.closed
    with P3Reward(allow_partial_isolation=True) as reward:
        assert reward.sandbox.isolation == "basic"
