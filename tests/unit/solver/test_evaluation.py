"""pass@k against enumerating every k-subset of the samples; the Solver and Setter summaries; the Setter
evaluation judged and scored as training scores puzzles."""

import itertools

import pytest
from support import ScriptedLLM

from codeplay_lightning.config import SolverConfig
from codeplay_lightning.execution import Program, Verdict
from codeplay_lightning.puzzles import Puzzle, fewshot_puzzles
from codeplay_lightning.setter.evaluation import evaluate_setter, setter_summary
from codeplay_lightning.solver import FewShotSolver
from codeplay_lightning.solver.evaluation import pass_at_k, solver_summary
from codeplay_lightning.solver.few_shot import PuzzleResult


def naive_pass_at_k(n: int, c: int, k: int) -> float:
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 4, 7])
def test_pass_at_k_equals_the_fraction_of_k_subsets_with_a_pass(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(naive_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_refuses_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def result(name: str, passes: list[bool]) -> PuzzleResult:
    puzzle = Puzzle(name, "def f(x: int):\n    return x == 1")
    verdicts = tuple(Verdict("pass" if ok else "wrong", "", 0.0) for ok in passes)
    return PuzzleResult(puzzle, tuple(Program(puzzle.f, "def g():\n    return 1") for _ in passes), verdicts)


def test_solver_summary_averages_per_puzzle_and_per_group():
    results = [
        result("a:0", [True, False, False, False]),
        result("a:1", [False] * 4),
        result("b:0", [True, True, True, True]),
    ]
    summary = solver_summary(results, {"a:0": "a", "a:1": "a", "b:0": "b"})
    assert summary["pass@1"] == pytest.approx((0.25 + 0 + 1) / 3)
    assert summary["pass@4"] == pytest.approx(2 / 3)
    assert summary["groups"]["a"] == {"puzzles": 2, "pass@1": 0.125, "pass@4": 0.5}
    assert summary["groups"]["b"]["pass@4"] == 1.0


def test_setter_summary_counts_distinct_valid_texts():
    texts = [
        "def f(x: int):\n    return x == 1",
        "def f(x: int):\n    return  x == 1",
        "oops",
        "def f(s: str):\n    return s",
    ]
    summary = setter_summary(texts, [True, True, False, True], [True, False, False], [0.5, 0.1, 0.9, 0.3])
    assert summary["valid"] == 0.75 and summary["solved"] == 0.25
    assert summary["solved_of_valid"] == pytest.approx(1 / 3)
    assert summary["distinct"] == 0.5  # the first two differ only in whitespace
    assert summary["mean_r_n"] == pytest.approx(0.45)


def test_the_setter_evaluation_judges_solves_and_scores_novelty_in_sampling_order(sandbox):
    solved = "def f(x: int):\n    return x == 7123"
    texts = [
        solved,
        solved.replace("return ", "return  "),
        "def f(x):\n    return x",
        "def f(s: str):\n    return s[::-1] == 'abc'",
    ]
    solver = FewShotSolver(
        ScriptedLLM(lambda prompt: "\n    return 7123"), sandbox, fewshot_puzzles()[:1], SolverConfig(attempts=2)
    )
    summary, rows = evaluate_setter(texts, solver)
    assert [row["valid"] for row in rows] == [True, True, False, True]
    assert [row["solved"] for row in rows] == [True, True, False, False]
    assert "annotation" in rows[2]["reason"]
    r_n = [row["r_n"] for row in rows]
    assert r_n[0] == 1.0  # nothing archived before the first puzzle
    assert r_n[1] < 0.1 < r_n[3]  # the second is the first again, in other whitespace
    assert summary == setter_summary(texts, [True, True, False, True], [True, True, False], r_n)
    assert summary["distinct"] == 0.5 and summary["solved"] == 0.5


def test_the_clustered_standard_error_matches_a_naive_cluster_sum():
    """Units of one cluster (a P3 class, a corpus family) are alike: the error of their mean counts clusters."""
    import numpy as np

    from codeplay_lightning.experiments.statistics import clustered_mean_and_se, mean_and_se

    rng = np.random.default_rng(0)
    clusters = [f"family{index % 7}" for index in range(60)]
    values = [float(rng.normal(int(cluster[-1]) * 0.3)) for cluster in clusters]
    mean = np.mean(values)
    sums = [sum(v - mean for v, c in zip(values, clusters) if c == name) for name in sorted(set(clusters))]
    naive = np.sqrt(7 / 6 * sum(total**2 for total in sums)) / 60
    assert clustered_mean_and_se(values, clusters) == pytest.approx((mean, naive))
    # one unit per cluster: the ordinary standard error
    assert clustered_mean_and_se(values, [str(index) for index in range(60)]) == pytest.approx(mean_and_se(values))
