"""Pre-registered tests (`compare --plan`): Holm's correction and each endpoint against naive computations."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ttest_1samp

from codeplay_lightning.cli import main
from codeplay_lightning.experiments.endpoints import Plan, plan_tests, read_plan
from codeplay_lightning.experiments.runs import TrainingRun
from codeplay_lightning.experiments.statistics import holm

PRESETS = ("none", "difficulty", "novelty", "balanced")
PLAN = """\
iterations: 5
seeds: [0, 1, 2]
baseline: none
families:
  primary:
    - {name: P1, statistic: solved_of_valid, iterations: [1, 4], presets: [difficulty, balanced]}
    - {name: P3, statistic: r_n_same_positions, presets: [difficulty]}
    - {name: P6, statistic: valid, iterations: [1, 4], presets: [novelty]}
  late window:
    - {name: L1, statistic: mean_r_d_of_valid, iterations: [3, 4], presets: [balanced], against: zero}
    - {name: L2, statistic: r_n_slope, iterations: [2, 4], presets: [none], against: zero}
    - {name: L3, statistic: mean_r_n, iterations: [3, 4], presets: [balanced]}
"""


def naive_holm(p_values: list[float]) -> list[float]:
    """Each p's Holm value by definition: the largest (m − #smaller) · p_j over the p_j not above it, at most 1."""
    m = len(p_values)
    return [
        min(1.0, max((m - sum(other < p_j for other in p_values)) * p_j for p_j in p_values if p_j <= p))
        for p in p_values
    ]


def test_holm_matches_its_definition_and_a_worked_example():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    rng = random.Random(0)
    for _ in range(200):
        p_values = [rng.choice([rng.random(), rng.random() / 50, 0.02]) for _ in range(rng.randint(1, 9))]
        assert holm(p_values) == pytest.approx(naive_holm(p_values))


def test_a_test_that_could_not_be_made_counts_in_the_family_as_p_1():
    assert holm([0.01, None, 0.02]) == pytest.approx([0.03, None, 0.04])
    assert holm([None, None]) == [None, None]


def synthetic_run(name: str, seed: int, iterations: int, rng: random.Random) -> TrainingRun:
    """Iterations of 6–9 puzzles with random validity, D, R_d and R_n; iteration 0 the seed's in every preset."""
    shared = random.Random(seed)
    puzzles, index = [], 0
    for iteration in range(iterations):
        draw = shared if iteration == 0 else rng
        for _ in range(draw.randint(6, 9)):
            valid = draw.random() < 0.8
            solved = valid and draw.random() < 0.5
            puzzles.append(
                {
                    "iteration": iteration,
                    "index": index,
                    "puzzle": f"def f(x: int):\n    return x == {index}",
                    "valid": valid,
                    "D": draw.choice([1.0, 2.0, 4.0]) if solved else None,
                    "R_d": draw.uniform(-1, 1),
                    "R_n": draw.uniform(0, 1),
                }
            )
            index += 1
    records = [{"iteration": iteration} for iteration in range(iterations)]
    return TrainingRun(Path(f"{name}-{seed}"), name, name, puzzles, seed=seed, iterations=records)


def window(run: TrainingRun, first: int, last: int) -> list[dict]:
    return [p for p in run.puzzles if first <= p["iteration"] <= last]


def naive_solved_of_valid(run: TrainingRun, first: int, last: int) -> float:
    solved = valid = 0
    for p in window(run, first, last):
        if p["valid"]:
            valid += 1
            solved += p["D"] is not None
    return solved / valid


def naive_same_positions(run: TrainingRun, base: TrainingRun, seed_runs: list[TrainingRun]) -> float:
    first = 1 + max(p["index"] for p in base.puzzles if p["iteration"] == 0)
    last = min(r.puzzles[-1]["index"] for r in seed_runs)
    ours = [p["R_n"] for p in run.puzzles if first <= p["index"] <= last]
    theirs = [p["R_n"] for p in base.puzzles if first <= p["index"] <= last]
    return np.mean(ours) - np.mean(theirs)


def naive_slope(run: TrainingRun, first: int, last: int) -> float:
    iterations = range(first, last + 1)
    means = [np.mean([p["R_n"] for p in run.puzzles if p["iteration"] == i]) for i in iterations]
    return np.polyfit(list(iterations), means, 1)[0]


def test_each_endpoint_per_seed_and_over_seeds_matches_a_naive_computation(tmp_path):
    rng = random.Random(1)
    runs = [synthetic_run(name, seed, 5, rng) for seed in (0, 1, 2) for name in PRESETS]
    runs.append(synthetic_run("difficulty", 3, 4, rng))  # stopped early
    runs.append(synthetic_run("none", 3, 5, rng))  # finished, but of a seed the plan does not name
    tested = plan_tests(plan_from(tmp_path, PLAN), runs)

    assert tested["seeds"] == [0, 1, 2]
    assert tested["notes"] == [
        "difficulty: 4 of 5 iterations finished, left out",
        "none: seed 3 is not one of the plan's, left out",
    ]
    by_seed = {seed: {run.name: run for run in runs if run.seed == seed} for seed in (0, 1, 2)}
    expected = {
        "P1": [
            np.mean(
                [
                    naive_solved_of_valid(r[preset], 1, 4) - naive_solved_of_valid(r["none"], 1, 4)
                    for preset in ("difficulty", "balanced")
                ]
            )
            for r in by_seed.values()
        ],
        "P3": [naive_same_positions(r["difficulty"], r["none"], list(r.values())) for r in by_seed.values()],
        "P6": [
            np.mean([p["valid"] for p in window(r["novelty"], 1, 4)])
            - np.mean([p["valid"] for p in window(r["none"], 1, 4)])
            for r in by_seed.values()
        ],
        "L1": [np.mean([p["R_d"] for p in window(r["balanced"], 3, 4) if p["valid"]]) for r in by_seed.values()],
        "L2": [naive_slope(r["none"], 2, 4) for r in by_seed.values()],
        "L3": [
            np.mean([p["R_n"] for p in window(r["balanced"], 3, 4)])
            - np.mean([p["R_n"] for p in window(r["none"], 3, 4)])
            for r in by_seed.values()
        ],
    }
    for family, names in (("primary", ("P1", "P3", "P6")), ("late window", ("L1", "L2", "L3"))):
        tests = tested["families"][family]
        assert [test["endpoint"].name for test in tests] == list(names)
        for test in tests:
            want = expected[test["endpoint"].name]
            assert sorted(test["values"]) == [0, 1, 2]
            assert [test["values"][seed] for seed in (0, 1, 2)] == pytest.approx(want)
            reference = ttest_1samp(list(test["values"].values()), 0.0)
            assert test["effect"].t == pytest.approx(reference.statistic)
            assert test["effect"].p == pytest.approx(reference.pvalue)
            low, high = reference.confidence_interval(0.95)
            assert test["effect"].half_interval == pytest.approx((high - low) / 2)
        assert [test["holm"] for test in tests] == pytest.approx(naive_holm([test["effect"].p for test in tests]))


def test_an_endpoint_short_of_the_plans_seeds_gives_its_values_and_no_test(tmp_path):
    """`difficulty` has run in two of the plan's three seeds: P1 and P3 give both seeds' values and their mean, no t
    and no p, and count as p = 1 in the primary family, where P5 (three seeds) is tested."""
    rng = random.Random(2)
    runs = [synthetic_run(name, seed, 5, rng) for seed in (0, 1, 2) for name in ("none", "balanced")]
    runs += [synthetic_run("difficulty", seed, 5, rng) for seed in (0, 1)]
    plan = PLAN.replace(
        "presets: [novelty]}",
        "presets: [novelty]}\n    - {name: P5, statistic: r_n_same_positions, presets: [balanced]}",
    )
    tested = plan_tests(plan_from(tmp_path, plan), runs)
    tests = {test["endpoint"].name: test for family in tested["families"].values() for test in family}
    for name in ("P1", "P3"):
        values, effect = tests[name]["values"], tests[name]["effect"]
        assert sorted(values) == [0, 1] and effect.mean == pytest.approx(np.mean(list(values.values())))
        assert effect.se is None and effect.t is None and effect.p is None and tests[name]["holm"] is None
    assert tests["P6"]["values"] == {}  # novelty never ran
    p5 = tests["P5"]["effect"].p
    assert p5 == pytest.approx(ttest_1samp(list(tests["P5"]["values"].values()), 0.0).pvalue)
    assert tests["P5"]["holm"] == pytest.approx(min(1.0, 4 * p5))  # P1, P3 and P6 count as p = 1
    assert [tests[name]["holm"] for name in ("L1", "L2", "L3")] == pytest.approx(
        naive_holm([tests[name]["effect"].p for name in ("L1", "L2", "L3")])
    )


def plan_from(directory: Path, text: str) -> Plan:
    (directory / "plan.yaml").write_text(text)
    return read_plan(directory / "plan.yaml")


HEAD = "iterations: 5\nseeds: [0, 1]\nbaseline: none\n"  # a valid plan's first lines


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("iterations: 5\nbaseline: none\n", "give exactly iterations, seeds, baseline and families"),
        (
            "iterations: 5\nseeds: [0]\nbaseline: none\nfamilies: {a: []}\n",
            "seeds must list two or more distinct seeds (a test needs two), not [0]",
        ),
        (
            "iterations: 0\nseeds: [0, 1]\nbaseline: none\nfamilies: {a: []}\n",
            "iterations must be a number of iterations",
        ),
        (
            HEAD + "families:\n  a:\n    - {name: X, statistic: pass_rate, iterations: [1, 4], presets: [balanced]}\n",
            "statistic 'pass_rate' is none of",
        ),
        (
            HEAD + "families:\n  a:\n    - {name: X, statistic: valid, iterations: [1, 5], presets: [balanced]}\n",
            "iterations must be [first, last] within 0–4",
        ),
        (
            HEAD + "families:\n  a:\n    - {name: X, statistic: r_n_same_positions, "
            "presets: [balanced], against: zero}\n",
            "r_n_same_positions is against the baseline",
        ),
        (
            HEAD + "families:\n  a:\n    - {name: X, statistic: valid, iterations: [1, 4], "
            "presets: [balanced], windw: 3}\n",
            "unknown keys ['windw']",
        ),
        (
            HEAD + "families:\n  a:\n    - {name: X, statistic: valid, iterations: [1, 4], "
            "presets: [a]}\n  b:\n    - {name: X, statistic: valid, iterations: [1, 4], presets: [b]}\n",
            "an endpoint's name is used twice",
        ),
    ],
)
def test_a_plan_that_does_not_say_exactly_what_to_test_is_refused_in_one_line(tmp_path, text, says):
    with pytest.raises(ValueError, match=re.escape(says)) as refused:
        plan_from(tmp_path, text)
    assert "\n" not in str(refused.value)


def write_run_dir(root: Path, run: TrainingRun) -> Path:
    run_dir = root / f"seed-{run.seed}" / run.name
    run_dir.mkdir(parents=True)
    weights = "w_difficulty: 0\n  w_novelty: 0" if run.name == "none" else "w_difficulty: 1\n  w_novelty: 1"
    (run_dir / "config.yaml").write_text(
        f"name: {run.name}\nreward:\n  {weights}\ntrainer:\n  seed: {run.seed}\n  iterations: 5\n"
    )
    records = [p | {"reason": "", "R": p["R_d"] + p["R_n"]} for p in run.puzzles]
    (run_dir / "puzzles.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    (run_dir / "iterations.jsonl").write_text("".join(json.dumps(record) + "\n" for record in run.iterations))
    return run_dir


def test_compare_plan_writes_each_family_as_a_table_before_the_effects(tmp_path, capsys):
    rng = random.Random(3)
    dirs = [write_run_dir(tmp_path, synthetic_run(name, seed, 5, rng)) for seed in (0, 1) for name in PRESETS]
    (tmp_path / "plan.yaml").write_text(PLAN)
    out = tmp_path / "out"
    assert main(["compare", *map(str, dirs), "--out", str(out), "--plan", str(tmp_path / "plan.yaml")]) == 0
    report = (out / "report.md").read_text()
    assert report.index("## Pre-registered tests") < report.index("## Effects by run")
    assert "### primary (Holm over 3)" in report and "### late window (Holm over 3)" in report
    row = next(line for line in report.splitlines() if line.startswith("| L2 |"))
    assert row.startswith("| L2 | r_n_slope, 2–4 | none | zero | ")
    assert len(row.split("|")) == 2 + 4 + 3 + 5  # endpoint, statistic, presets, against; 3 seeds; mean, 95%, t, p, Holm
    assert row.endswith(" | – | – | – | – |")  # seeds 0 and 1 of the plan's three: no test yet

    assert main(["compare", *map(str, dirs), "--out", str(out), "--plan", str(tmp_path / "missing.yaml")]) != 0
    assert "missing.yaml" in capsys.readouterr().err


def test_the_prediction_interval_for_one_more_run_matches_its_definition():
    """mean ± t(0.975; n − 1) · sd · √(1 + 1/n), the sample sd computed by hand; none with one run."""
    from scipy.stats import t as student

    from codeplay_lightning.experiments.statistics import between_runs

    rng = random.Random(3)
    for n in (2, 3, 5):
        effects = [rng.gauss(0.2, 0.1) for _ in range(n)]
        mean = sum(effects) / n
        sd = (sum((effect - mean) ** 2 for effect in effects) / (n - 1)) ** 0.5
        naive = student.ppf(0.975, n - 1) * sd * (1 + 1 / n) ** 0.5
        assert between_runs(effects).prediction_half_interval == pytest.approx(naive)
    assert between_runs([0.3]).prediction_half_interval is None
