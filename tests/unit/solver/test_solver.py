"""The Solver: few-shot sampling (batching across puzzles and attempts, candidate extraction, verdicts,
D = N_a / passes) and the search strategies (D = LLM calls to the first solution, searches batched)."""

from __future__ import annotations

import math
from typing import get_args

import pytest
import torch
from support import GOOD_MORNING, NEGATIVE_ROOT, SEVEN, ScriptedLLM, answer_by_puzzle

from codeplay_lightning.config import ConfigError, SolverConfig, StrategyName
from codeplay_lightning.execution import Program, Verdict
from codeplay_lightning.llm import HFLLM
from codeplay_lightning.models.sampling import SamplingConfig
from codeplay_lightning.puzzles import SOLVER_STOP, fewshot_puzzles
from codeplay_lightning.rewards import difficulty_reward
from codeplay_lightning.search.driver import SEARCHES
from codeplay_lightning.solver import (
    STRATEGIES,
    FewShotSolver,
    PuzzleResult,
    SearchPuzzleResult,
    SearchSolver,
    candidate_program,
    difficulty,
    few_shot,
    solver_sampling,
)

EXAMPLES = fewshot_puzzles()[:2]


def test_difficulty_is_attempts_over_passes():
    assert difficulty(8, 8) == 1.0
    assert difficulty(8, 2) == 4.0
    assert difficulty(8, 0) == math.inf


@pytest.mark.parametrize("attempts, passes", [(0, 0), (4, 5), (4, -1)])
def test_difficulty_rejects_impossible_counts(attempts, passes):
    with pytest.raises(ValueError):
        difficulty(attempts, passes)


@pytest.mark.parametrize(
    "continuation, body",
    [
        ('\n    return "morning"\n\nprint(f(g()))', '\n    return "morning"\n'),
        ('\n    x = "morn"\n\n    return x + "ing"\nassert_ok = 1', '\n    x = "morn"\n\n    return x + "ing"\n'),
        ('\n    return "morning"\n# done', '\n    return "morning"\n'),
        ('\n    return "morning"', '\n    return "morning"'),
        (
            '\n    x = "morn"\n# the answer\n    return x + "ing"',
            '\n    x = "morn"\n# the answer\n    return x + "ing"',
        ),
        (
            '\n    s = """\nmorning"""\n    return s.strip()\nprint(g())',
            '\n    s = """\nmorning"""\n    return s.strip()\n',
        ),
        ('\n    return "morning"\r\nprint(g())\rprint(f(g()))', '\n    return "morning"\n'),
        ('\n    return "morning"\n\nprint(f(g()', '\n    return "morning"\n'),  # broken code after g
    ],
)
def test_a_candidate_is_g_alone_without_the_top_level_code_after_it(sandbox, continuation, body):
    program = candidate_program(GOOD_MORNING, continuation)
    assert program.g == "def g():" + body
    assert sandbox.verify([program])[0].status == "pass"


def test_a_broken_g_stays_whole_for_the_sandbox_to_report(sandbox):
    """Cutting it at a column-0 line would judge another program: here one that returns None."""
    continuation = '\n    x = "morn"\n# the answer\n    return x +\nprint(f(g()))'
    program = candidate_program(GOOD_MORNING, continuation)
    assert program.g == "def g():" + continuation
    assert sandbox.verify([program])[0].status == "syntax"


def test_nesting_past_the_parsers_stack_leaves_g_whole_instead_of_raising():
    continuation = "\n    return " + "not " * 100_000 + "True\nprint(f(g()))"
    assert candidate_program(GOOD_MORNING, continuation).g == "def g():" + continuation


def test_passes_and_difficulty_come_from_the_sandbox_verdicts(sandbox, monkeypatch):
    llm = ScriptedLLM(
        [
            '\n    return "morning"',  # good_morning: pass
            "\n    return 1",  # not a str: no pass
            '\n    return "evening"',  # fail
            "\n    return -12",  # negative_root: pass
            "\n    return -12\n",  # pass, trailing newline and all
            "\n    return 12",  # fail
        ]
    )
    calls: list[tuple[int, int]] = []
    solver = FewShotSolver(llm, sandbox, EXAMPLES, SolverConfig(attempts=3, batch_size=1))
    monkeypatch.setattr(few_shot, "ROWS_PER_CALL", 4)  # calls of 4 rows

    results = solver.solve([GOOD_MORNING, NEGATIVE_ROOT], on_batch_done=lambda *counts: calls.append(counts))

    assert calls == [(4, 6), (6, 6)] and llm.batches == [4, 2]
    assert len(llm.prompts) == 6 and llm.prompts[0] == llm.prompts[2] != llm.prompts[3]  # puzzle-major rows
    assert llm.prompts[0].endswith(GOOD_MORNING.f + "\n\ndef g():")
    good_morning, negative_root = results
    assert good_morning.puzzle == GOOD_MORNING and good_morning.attempts == 3
    expected_first = Program(GOOD_MORNING.f, 'def g():\n    return "morning"', "str", "good_morning")
    assert good_morning.programs[0] == expected_first
    assert [verdict.passed for verdict in good_morning.verdicts] == [True, False, False]
    assert (good_morning.passes, good_morning.difficulty) == (1, 3.0)
    assert (negative_root.passes, negative_root.difficulty) == (2, 1.5)


def tiny_solver(model, tokenizer, sandbox, batch_size: int, seed: int = 0) -> FewShotSolver:
    config = SolverConfig(attempts=3, batch_size=batch_size, max_new_tokens=8)
    llm = HFLLM(
        model,
        tokenizer,
        solver_sampling(config),
        chat=False,
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(seed),
    )
    return FewShotSolver(llm, sandbox, EXAMPLES, config)


def test_tiny_model_end_to_end_is_reproducible_whatever_the_batch_size(tiny_llama, char_tokenizer, sandbox):
    puzzles = [GOOD_MORNING, NEGATIVE_ROOT]
    results = tiny_solver(tiny_llama, char_tokenizer, sandbox, batch_size=32).solve(puzzles)
    again = tiny_solver(tiny_llama, char_tokenizer, sandbox, batch_size=4).solve(puzzles)
    other_seed = tiny_solver(tiny_llama, char_tokenizer, sandbox, batch_size=32, seed=1).solve(puzzles)

    assert [result.programs for result in results] == [result.programs for result in again]
    assert [result.programs for result in results] != [result.programs for result in other_seed]
    for puzzle, result in zip(puzzles, results):
        assert isinstance(result, PuzzleResult) and result.attempts == 3
        assert all(program.g.startswith("def g():") and program.f == puzzle.f for program in result.programs)
        assert all(isinstance(verdict, Verdict) for verdict in result.verdicts)
        assert result.difficulty == difficulty(3, result.passes)
    assert len({program.g for result in results for program in result.programs}) > 1  # attempts differ


def test_sampling_stops_at_the_solver_stops_and_a_search_runs_to_eos():
    assert solver_sampling(SolverConfig()).stop_strings == SOLVER_STOP
    for strategy in ("gif-mcts", "worldcoder"):
        sampling = solver_sampling(SolverConfig(strategy=strategy, max_new_tokens=64, temperature=0.5, top_p=0.9))
        assert sampling == SamplingConfig(64, 0.5, 0.9, ())


# ---------------------------------------------------------------- the search strategies


def search_solver(strategy: str, attempts: int, sandbox, llm, seed: int = 0) -> SearchSolver:
    config, generator = SolverConfig(strategy=strategy, attempts=attempts), torch.Generator().manual_seed(seed)
    solver = STRATEGIES[strategy].build(llm, sandbox, (), config, generator)
    assert isinstance(solver, SearchSolver) and solver.search is SEARCHES[strategy]
    return solver


@pytest.mark.parametrize("strategy", ["gif-mcts", "worldcoder"])
def test_search_difficulty_is_calls_to_first_solution_within_a_budget_of_attempts(strategy, sandbox):
    llm = ScriptedLLM(answer_by_puzzle)
    results = search_solver(strategy, 4, sandbox, llm).solve([SEVEN, NEGATIVE_ROOT, GOOD_MORNING])

    seven, negative_root, good_morning = results
    assert [result.puzzle for result in results] == [SEVEN, NEGATIVE_ROOT, GOOD_MORNING]
    assert (seven.difficulty, seven.passes, seven.search.calls) == (1.0, 1, 1)  # solved by the first call
    assert (negative_root.difficulty, negative_root.passes, negative_root.search.calls) == (2.0, 1, 2)
    assert negative_root.search.program == "def g():\n    return -12\n" and negative_root.search.score == 1.0
    assert (good_morning.difficulty, good_morning.passes) == (math.inf, 0)
    assert good_morning.search.calls == 4 and good_morning.search.solved_at is None  # the whole budget, no more
    assert all(result.difficulty == (result.search.solved_at or math.inf) for result in results)
    rewards = [difficulty_reward(result.difficulty, valid=True) for result in results]
    assert rewards == pytest.approx([0.0, 0.5, -1.0])  # the R_d ramp as for sampling: D = 1, 2, inf
    # every round's calls in one batch: all three searches, then the two unsolved, then the last one
    assert llm.batches == [3, 2, 1, 1] and llm.usage.calls == sum(result.search.calls for result in results)


def test_search_solver_on_a_tiny_model_is_reproducible_within_its_budget(tiny_llama, char_tokenizer, sandbox):
    def solve(strategy: str) -> tuple[list[SearchPuzzleResult], HFLLM]:
        config = SolverConfig(strategy=strategy, attempts=3, max_new_tokens=8)
        llm = HFLLM(
            tiny_llama, char_tokenizer, solver_sampling(config), chat=False, generator=torch.Generator().manual_seed(0)
        )
        return STRATEGIES[strategy].build(llm, sandbox, (), config, llm.generator).solve([GOOD_MORNING, SEVEN]), llm

    for strategy in ("gif-mcts", "worldcoder"):
        results, llm = solve(strategy)
        assert solve(strategy)[0] == results
        assert all(1 <= result.search.calls <= 3 for result in results)
        assert llm.usage.calls == sum(result.search.calls for result in results)
        assert all(result.difficulty == (result.search.solved_at or math.inf) for result in results)


def test_every_strategy_the_config_takes_builds_its_solver_and_no_other(sandbox):
    assert set(STRATEGIES) == set(get_args(StrategyName))
    generator = torch.Generator().manual_seed(0)
    for name, strategy in STRATEGIES.items():
        solver = strategy.build(
            ScriptedLLM(answer_by_puzzle), sandbox, EXAMPLES, SolverConfig(strategy=name), generator
        )
        if name == "few-shot":
            assert isinstance(solver, FewShotSolver) and strategy.chat is False
        else:
            assert isinstance(solver, SearchSolver) and solver.search is SEARCHES[name] and strategy.chat is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"attempts": 0}, "attempts"),
        ({"batch_size": 0}, "batch_size"),
        ({"temperature": 0.0}, "temperature"),
    ],
)
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SolverConfig(**kwargs)


def test_solver_needs_few_shot_examples(sandbox):
    with pytest.raises(ValueError, match="few-shot"):
        FewShotSolver(ScriptedLLM([]), sandbox, [], SolverConfig())
