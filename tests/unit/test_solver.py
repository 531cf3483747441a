"""The few-shot Solver: batching across puzzles and attempts, candidate extraction, verdicts, D."""

from __future__ import annotations

import math

import pytest
import torch

from codeplay_lightning.execution import Program, Sandbox, Verdict
from codeplay_lightning.models.sampling import Samples
from codeplay_lightning.puzzles import Puzzle, fewshot_puzzles
from codeplay_lightning.solver import FewShotSolver, PuzzleResult, SolverConfig, difficulty
from codeplay_lightning.solver import few_shot

GOOD_MORNING = Puzzle(
    "good_morning", 'def f(s: str):\n    return "Good " + s == "Good morning"', ans_type="str"
)
NEGATIVE_ROOT = Puzzle("negative_root", "def f(n: int):\n    return n * n == 144 and n < 0", ans_type="int")
EXAMPLES = fewshot_puzzles()[:2]


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, timeout=1.0) as sandbox:
        yield sandbox


def test_difficulty_is_attempts_over_passes():
    assert difficulty(8, 8) == 1.0
    assert difficulty(8, 2) == 4.0
    assert difficulty(8, 0) == math.inf


@pytest.mark.parametrize("attempts, passes", [(0, 0), (4, 5), (4, -1)])
def test_difficulty_rejects_impossible_counts(attempts, passes):
    with pytest.raises(ValueError):
        difficulty(attempts, passes)


def fake_sampler(continuations: list[str], seen_prompts: list[str]):
    """A stand-in for `sample` that returns `continuations` in order and records the prompts."""
    remaining = iter(continuations)

    def fake_sample(model, tokenizer, prompts, config, generators=None):
        seen_prompts.extend(prompts)
        texts = [next(remaining) for _ in prompts]
        empty = [torch.zeros(0) for _ in prompts]
        return Samples(texts=texts, token_ids=empty, logprobs=empty, finished=[True] * len(prompts))

    return fake_sample


def test_passes_and_difficulty_come_from_the_sandbox_verdicts(monkeypatch, sandbox):
    continuations = [
        '\n    return "morning"',  # good_morning: pass
        "\n    return 1",  # not a str: no pass
        '\n    return "evening"',  # fail
        "\n    return -12",  # negative_root: pass
        "\n    return -12\n",  # pass, trailing newline and all
        "\n    return 12",  # fail
    ]
    seen_prompts: list[str] = []
    monkeypatch.setattr(few_shot, "sample", fake_sampler(continuations, seen_prompts))
    calls: list[tuple[int, int]] = []
    solver = FewShotSolver(None, None, sandbox, EXAMPLES, SolverConfig(attempts=3, batch_size=4))

    results = solver.solve([GOOD_MORNING, NEGATIVE_ROOT], on_batch_done=lambda *counts: calls.append(counts))

    assert calls == [(4, 6), (6, 6)]
    assert len(seen_prompts) == 6 and seen_prompts[0] == seen_prompts[2] != seen_prompts[3]  # puzzle-major rows
    assert seen_prompts[0].endswith(GOOD_MORNING.f + "\n\ndef g():")
    good_morning, negative_root = results
    assert good_morning.puzzle == GOOD_MORNING and good_morning.attempts == 3
    expected_first = Program(GOOD_MORNING.f, 'def g():\n    return "morning"', "str", "good_morning")
    assert good_morning.programs[0] == expected_first
    assert [verdict.passed for verdict in good_morning.verdicts] == [True, False, False]
    assert (good_morning.passes, good_morning.difficulty) == (1, 3.0)
    assert (negative_root.passes, negative_root.difficulty) == (2, 1.5)


def test_tiny_model_end_to_end_is_reproducible_whatever_the_batch_size(tiny_llama, char_tokenizer, sandbox):
    puzzles = [GOOD_MORNING, NEGATIVE_ROOT]
    config = SolverConfig(attempts=3, batch_size=32, max_new_tokens=8)
    results = FewShotSolver(tiny_llama, char_tokenizer, sandbox, EXAMPLES, config).solve(
        puzzles, generator=torch.Generator().manual_seed(0)
    )
    small_batches = SolverConfig(attempts=3, batch_size=4, max_new_tokens=8)
    again = FewShotSolver(tiny_llama, char_tokenizer, sandbox, EXAMPLES, small_batches).solve(
        puzzles, generator=torch.Generator().manual_seed(0)
    )

    assert [result.programs for result in results] == [result.programs for result in again]
    for puzzle, result in zip(puzzles, results):
        assert isinstance(result, PuzzleResult) and result.attempts == 3
        assert all(program.g.startswith("def g():") and program.f == puzzle.f for program in result.programs)
        assert all(isinstance(verdict, Verdict) for verdict in result.verdicts)
        assert result.difficulty == difficulty(3, result.passes)
    assert len({program.g for result in results for program in result.programs}) > 1  # attempts differ


@pytest.mark.parametrize(
    "kwargs, message",
    [({"attempts": 0}, "attempts"), ({"batch_size": 0}, "batch_size"), ({"temperature": 0.0}, "temperature")],
)
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SolverConfig(**kwargs)


def test_solver_needs_few_shot_examples(sandbox):
    with pytest.raises(ValueError, match="few-shot"):
        FewShotSolver(None, None, sandbox, [], SolverConfig())
