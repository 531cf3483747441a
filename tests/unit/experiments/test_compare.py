"""`compare` and `codeplay compare` on synthetic run directories written here."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from codeplay_lightning.cli import main
from codeplay_lightning.experiments.compare import compare
from codeplay_lightning.experiments.runs import WINDOW, read_run, read_runs
from codeplay_lightning.experiments.statistics import trailing_mean
from codeplay_lightning.experiments.summaries import (
    LAST,
    SAMPLES,
    against_baseline,
    pass_rates,
    sample_last,
    selfplay_summary,
)


def puzzle(
    index: int,
    r_d: float = 0.0,
    r_n: float = 0.5,
    text: str | None = None,
    valid: bool = True,
    difficulty: float | None = 2.0,
) -> dict:
    return {
        "iteration": index // 10,
        "index": index,
        "puzzle": text or f"def f(x: int):\n    return x == {index}",
        "valid": valid,
        "reason": "" if valid else "syntax error",
        "D": difficulty,
        "R_d": r_d,
        "R_n": r_n,
        "R": r_d + r_n,
    }


def selfplay_puzzle(index: int, difficulty: float | None, initial: float | None, attempted: bool = True) -> dict:
    """A self-play run's record: `initial` is the initial Solver's D (None: unsolved or not attempted)."""
    return puzzle(index, difficulty=difficulty) | {"initial_attempted": attempted, "D_initial": initial}


def write_phases(run_dir: Path, records: list[dict], tail: str = "") -> None:
    (run_dir / "solver.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def evaluation(pass_1: float, pass_4: float, puzzles: int = 100) -> dict:
    return {"puzzles": puzzles, "pass@1": pass_1, "pass@4": pass_4}


def write_run(
    root: Path, name: str, records: list[dict], reward: str = "w_difficulty: 1\n  w_novelty: 1", tail: str = ""
) -> Path:
    run_dir = root / name / "version_0"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(f"name: {name}\nreward:\n  {reward}\ntrainer:\n  iterations: 8\n")
    (run_dir / "puzzles.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return run_dir


def test_trailing_mean_matches_a_naive_loop():
    values = list(np.random.default_rng(0).normal(size=650))
    naive = [np.mean(values[max(0, i - WINDOW + 1) : i + 1]) for i in range(len(values))]
    np.testing.assert_allclose(trailing_mean(values, WINDOW), naive, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(trailing_mean([1, 2, 3, 4], 2), [1, 1.5, 2.5, 3.5])
    assert trailing_mean([], WINDOW).shape == (0,)


def test_samples_are_distinct_from_the_last_100_and_seeded():
    puzzles = [puzzle(i) for i in range(1, 351)]
    first = sample_last(puzzles, seed=3)
    assert len(first) == SAMPLES == len({p["index"] for p in first})
    assert all(p["index"] > 350 - LAST for p in first)
    assert first == sample_last(puzzles, seed=3)
    assert first != sample_last(puzzles, seed=4)
    assert [p["index"] for p in first] == sorted(p["index"] for p in first)
    assert sample_last(puzzles[:6], seed=0) == puzzles[:6]  # fewer than 10: all of them
    assert sample_last([], seed=0) == []


def test_labels_come_from_config_yaml(tmp_path):
    balanced = write_run(tmp_path, "novelty_biased", [puzzle(1)], "w_difficulty: 0.5\n  w_novelty: 1.5")
    product = write_run(tmp_path, "product", [puzzle(1)], "combine: product")
    assert read_run(balanced).label == "novelty_biased (w_d=0.5, w_n=1.5)"
    assert read_run(product).label == "product (R_d·R_n)"


def test_one_preset_twice_is_told_apart_by_seed_else_by_path(tmp_path):
    def run(root: str, seed: int) -> Path:
        run_dir = write_run(tmp_path / root, "product", [puzzle(1)], "combine: product")
        (run_dir / "config.yaml").write_text((run_dir / "config.yaml").read_text() + f"  seed: {seed}\n")
        return run_dir

    seeds = [run("a", 0), run("b", 1), write_run(tmp_path / "c", "none", [puzzle(1)])]
    assert [r.label for r in read_runs(seeds)] == [
        "product (R_d·R_n), seed 0",
        "product (R_d·R_n), seed 1",
        "none (w_d=1, w_n=1)",
    ]
    same_seed = [run("d", 0), run("e", 0)]
    assert [r.label for r in read_runs(same_seed)] == [f"product (R_d·R_n) [{path}]" for path in same_seed]


def test_a_resumed_run_counts_each_index_once_keeping_the_last(tmp_path):
    # iteration 1 was cut after puzzle 25; the resumed run regenerated 21..30
    records = [puzzle(i) for i in range(1, 26)] + [puzzle(i, r_d=1.0, text=f"again {i}") for i in range(21, 31)]
    run = read_run(write_run(tmp_path, "balanced", records))
    assert [p["index"] for p in run.puzzles] == list(range(1, 31))
    assert [p["puzzle"] for p in run.puzzles[20:25]] == [f"again {i}" for i in range(21, 26)]
    assert any("5 puzzles logged twice" in note for note in run.notes)
    result = compare([run.path], tmp_path / "out")
    assert result["runs"][0]["puzzles"] == 30
    assert result["runs"][0]["final"]["R_d"] == pytest.approx(10 / 30)


def test_a_missing_puzzles_file_is_a_clear_error(tmp_path):
    good = write_run(tmp_path, "balanced", [puzzle(1)])
    with pytest.raises(ValueError, match=r"empty_dir has no puzzles.jsonl"):
        compare([good, tmp_path / "empty_dir"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_empty_and_partial_files_give_a_partial_report(tmp_path):
    empty = write_run(tmp_path, "none", [])
    training = write_run(
        tmp_path,
        "novelty",
        [puzzle(i) for i in range(1, 4)],
        "w_difficulty: 0\n  w_novelty: 1",
        tail='{"iteration": 0, "index": 4, "puzz',
    )
    result = compare([empty, training], tmp_path / "out")
    assert [run["puzzles"] for run in result["runs"]] == [0, 3]
    assert result["runs"][0]["final"] == {"R_d": None, "R_n": None, "R": None}
    assert any("last line is cut short" in note for note in result["runs"][1]["notes"])
    report = (tmp_path / "out" / "report.md").read_text()
    assert "no puzzles logged yet" in report and "No puzzles logged yet." in report
    assert "| none (w_d=1, w_n=1) | 0 | — | — | — | — | — | 0 of 0 |" in report
    assert "last line is cut short" in report


def test_figure_and_report_of_two_runs(tmp_path):
    rng = random.Random(0)
    balanced = write_run(
        tmp_path,
        "balanced",
        [puzzle(i, r_d=rng.random(), text=f"p{i % 40}", difficulty=None if i % 4 else 2.0) for i in range(1, 301)],
    )
    product = write_run(tmp_path, "product", [puzzle(i, valid=i % 2 == 0) for i in range(1, 121)], "combine: product")
    result = compare([balanced, product], tmp_path / "out", seed=7)
    assert result["panels"] == ["R_d", "R_n", "R"]
    height, width, _ = imread(result["figure"]).shape
    assert width > 3 * height > 0  # three panels side by side
    first, second = result["runs"]
    assert (first["puzzles"], first["solved_frac"], first["distinct_last"]) == (300, 0.25, 40)
    assert first["final"]["R_d"] == pytest.approx(np.mean([p["R_d"] for p in read_run(balanced).puzzles[-WINDOW:]]))
    assert (second["valid_frac"], len(second["sampled"])) == (0.5, SAMPLES)
    report = result["report"].read_text()
    assert "| balanced (w_d=1, w_n=1) | 300 | 100.0 | 25.0 |" in report
    assert "### product (R_d·R_n)" in report
    assert report.count("```python") == 2 * SAMPLES
    assert compare([balanced, product], tmp_path / "again", seed=7)["runs"][0]["sampled"] == first["sampled"]


def test_a_puzzle_with_backticks_cannot_close_its_fence(tmp_path):
    run = write_run(tmp_path, "balanced", [puzzle(1, text="def f(s: str):\n    return s == '```'")])
    report = compare([run], tmp_path / "out")["report"].read_text()
    assert "````python\ndef f(s: str):\n    return s == '```'\n````" in report


def test_cli_writes_both_files_and_a_missing_run_is_one_line(tmp_path, capsys):
    run = write_run(tmp_path, "balanced", [puzzle(i) for i in range(1, 12)])
    assert main(["compare", str(run), "--out", str(tmp_path / "out"), "--seed", "1"]) == 0
    assert (tmp_path / "out" / "figure.png").stat().st_size > 0
    assert "balanced (w_d=1, w_n=1): 11 puzzles" in capsys.readouterr().out
    assert main(["compare", str(run), str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and "missing has no puzzles.jsonl" in error and "\n" not in error


def test_a_line_cut_by_a_kill_and_continued_by_the_resume_keeps_the_resumed_record(tmp_path):
    cut = json.dumps(puzzle(3))[:30]  # the killed run's last line, without its newline
    records = [puzzle(1), puzzle(2)]
    run_dir = write_run(
        tmp_path,
        "balanced",
        records,
        tail=cut + "".join(json.dumps(puzzle(i, text=f"resumed {i}")) + "\n" for i in (3, 4)),
    )
    run = read_run(run_dir)
    assert [p["puzzle"] for p in run.puzzles[2:]] == ["resumed 3", "resumed 4"]
    assert run.notes == []


def test_a_run_still_training_says_how_far_it_got(tmp_path):
    run_dir = write_run(tmp_path, "balanced", [puzzle(i) for i in range(1, 5)])
    (run_dir / "iterations.jsonl").write_text('{"iteration": 0, "seconds": 1.0}\n{"iteration": 1, "seconds": 1.0}\n')
    assert "2 of 8 iterations finished: still training, or stopped" in read_run(run_dir).notes
    (run_dir / "config.yaml").unlink()
    run = read_run(run_dir)
    assert run.label == str(run_dir) and "no config.yaml" in run.notes[0]


OLD_REPORT = """# Setter training runs compared

![R_d, R_n and R against puzzles generated](figure.png)

As the paper's figure 2: R_d, R_n and R against puzzles generated, each the mean of the last 200 puzzles \
(fewer at the start). Each puzzle `index` counts once (the last logged).

| run | puzzles | valid % | solved % | R_d | R_n | R | distinct in last 100 |
|---|--:|--:|--:|--:|--:|--:|--:|
| balanced (w_d=1, w_n=1) | 2 | 50.0 | 50.0 | 0.250 | 0.500 | 0.750 | 2 of 2 |

R_d, R_n, R: the smoothed values at the last puzzle. Solved: D is finite (the Solver passed at least once).

## Puzzles at the end of training (as the paper's appendix C)

10 per run, drawn without replacement from its last 100 (seed 0; all of them when fewer).

### balanced (w_d=1, w_n=1)

Puzzle 1: D = 2.00, R_d = 0.50, R_n = 0.50

```python
def f(x: int):
    return x == 1
```

Puzzle 2: invalid (syntax error), R_d = 0.00, R_n = 0.50

```python
def f(x: int):
    return x == 2
```"""


def test_the_pass_rates_match_a_naive_computation(tmp_path):
    # by hand: puzzles 1, 2 and 4 are valid and attempted by the initial Solver; 3 is invalid; 5 not attempted
    records = [
        selfplay_puzzle(1, 2.0, 4.0),
        selfplay_puzzle(2, None, None),
        puzzle(3, valid=False, difficulty=None) | {"initial_attempted": False, "D_initial": None},
        selfplay_puzzle(4, 4.0, None),
        selfplay_puzzle(5, 1.0, None, attempted=False),
    ]
    assert pass_rates(records) == ([1, 2, 4], [0.5, 0.0, 0.25], [0.25, 0.0, 0.0])
    row = selfplay_summary(read_run(write_run(tmp_path, "small", records)))
    assert row["attempted"] == 3
    assert row["pass_rate"] == pytest.approx({"current": 0.75 / 3, "initial": 0.25 / 3})

    rng = random.Random(1)
    records = []
    for index in range(1, 451):
        valid, attempted = rng.random() < 0.8, rng.random() < 0.7
        difficulty = rng.choice([None, 1.0, 2.0, 3.0, 8.0]) if valid else None
        initial = rng.choice([None, 1.0, 4.0, 8.0]) if valid and attempted else None
        records.append(
            puzzle(index, valid=valid, difficulty=difficulty)
            | {"initial_attempted": valid and attempted, "D_initial": initial}
        )
    chosen = [r for r in records if r["valid"] and r["initial_attempted"]]
    current = [0.0 if r["D"] is None else 1 / r["D"] for r in chosen]
    initial = [0.0 if r["D_initial"] is None else 1 / r["D_initial"] for r in chosen]
    run = read_run(write_run(tmp_path, "big", records))
    index, got_current, got_initial = pass_rates(run.puzzles)
    assert (index, got_current, got_initial) == ([r["index"] for r in chosen], current, initial)
    for rates, got in ((current, got_current), (initial, got_initial)):  # the curves of selfplay.png
        naive = [np.mean(rates[max(0, i - WINDOW + 1) : i + 1]) for i in range(len(rates))]
        np.testing.assert_allclose(trailing_mean(got, WINDOW), naive, rtol=1e-9)
    row = selfplay_summary(run)
    assert row["attempted"] == len(chosen) > LAST
    assert row["pass_rate"] == pytest.approx({"current": np.mean(current[-LAST:]), "initial": np.mean(initial[-LAST:])})
    for rates, key in ((current, "current"), (initial, "initial")):  # the trend: numpy's fit and its covariance
        (slope, _), covariance = np.polyfit([r["index"] / 100 for r in chosen], rates, 1, cov="unscaled")
        residuals = np.asarray(rates) - np.polyval(
            np.polyfit([r["index"] / 100 for r in chosen], rates, 1), [r["index"] / 100 for r in chosen]
        )
        se = np.sqrt(covariance[0, 0] * residuals @ residuals / (len(rates) - 2))
        assert row["trend"][key] == pytest.approx((slope, se))
    gaps = np.subtract(current, initial)
    half = len(gaps) // 2
    for part, key in ((gaps[:half], "first_half"), (gaps[half:], "second_half"), (gaps, "whole")):
        assert row["gap"][key] == pytest.approx((part.mean(), part.std(ddof=1) / np.sqrt(len(part))))


def test_the_phase_table_sets_phase_0_beside_the_last_phase(tmp_path):
    run_dir = write_run(tmp_path, "balanced", [selfplay_puzzle(i, 2.0, 4.0) for i in range(1, 31)])
    (run_dir / "config.yaml").write_text((run_dir / "config.yaml").read_text() + "selfplay:\n  learn_every: 2\n")
    bc = {"new_pairs": 12, "replayed": 0, "from_corpus": 6, "steps": 2, "loss_first": 0.9, "loss_last": 0.7}
    learned = {1: (0.3, 0.35, 0.1), 2: (0.4, 0.45, 0.2), 3: (0.5, 0.55, 0.3)}  # pass@1, pass@4, eval_file's pass@1
    phases = [
        {
            "iteration": 2 * phase - 1,
            "bc": bc,
            "phase": phase,
            "learned": {"heldout_families": evaluation(pass_1, pass_4), "eval_file": evaluation(file_1, 0.3, 20)},
            "eval_seconds": 100.0,
        }
        for phase, (pass_1, pass_4, file_1) in learned.items()
    ]
    phases[0]["initial"] = {"heldout_families": evaluation(0.2, 0.25), "eval_file": evaluation(0.1, 0.3, 20)}
    write_phases(run_dir, phases, tail='{"iteration": 7, "bc": {"new_pa')  # a phase being written
    run = read_run(run_dir)
    assert list(run.phases) == [0, 1, 2, 3] and run.learn_every == 2
    assert any("solver.jsonl line 4 is cut short" in note for note in run.notes)
    result = compare([run_dir], tmp_path / "out")
    assert not (tmp_path / "out" / "effects.png").exists()  # one seed: no interval between seeds to draw
    row = result["selfplay"]["runs"][0]
    assert (row["phases"], row["learn_every"], row["attempted"]) == (3, 2, 30)
    assert row["evaluations"] == {
        "heldout_families": {"pass@1": (0.2, 0.5), "pass@4": (0.25, 0.55)},
        "eval_file": {"pass@1": (0.1, 0.3), "pass@4": (0.3, 0.3)},
    }
    report = result["report"].read_text()
    assert "![The Solvers' pass rates, their evaluations over BC phases, and R_n](selfplay.png)" in report
    table = [
        "| balanced (w_d=1, w_n=1) | initial Solver | current Solver |",
        "|---|--:|--:|",
        "| BC phases | 0 | 3 (one after every 2 iterations) |",
        "| pass rate 1/D, mean of the last 30 of the 30 puzzles the initial Solver attempted | 0.250 | 0.500 |",
        "| its trend per 100 puzzles generated (least-squares slope ± SE) | +0.000 ± 0.000 | +0.000 ± 0.000 |",
        "| current − initial on the same puzzles, first half / second half (± SE) | "
        "| +0.250 ± 0.000 / +0.250 ± 0.000 |",
        "| heldout_families pass@1 | 0.200 | 0.500 |",
        "| heldout_families pass@4 | 0.250 | 0.550 |",
        "| eval_file pass@1 | 0.100 | 0.300 |",
        "| eval_file pass@4 | 0.300 | 0.300 |",
        "",
        "## Puzzles at the end of training",
    ]
    assert "\n".join(table) in report


def test_selfplay_png_only_when_a_solver_learned(tmp_path):
    old = write_run(tmp_path, "none", [puzzle(i) for i in range(1, 41)])
    result = compare([old], tmp_path / "old_out")
    assert result["selfplay"] is None and not (tmp_path / "old_out" / "selfplay.png").exists()
    assert "Self-play" not in result["report"].read_text()

    # a fixed Solver (selfplay.learn_every 0): D is D_initial, and no solver.jsonl; alone, it has no section
    fixed = write_run(tmp_path, "novelty", [selfplay_puzzle(i, 4.0, 4.0) for i in range(1, 41)])
    (fixed / "config.yaml").write_text((fixed / "config.yaml").read_text() + "selfplay:\n  learn_every: 0\n")
    result = compare([old, fixed], tmp_path / "fixed_out")
    assert result["selfplay"] is None and "Self-play" not in result["report"].read_text()

    # beside a Solver that learned, it is reported with it
    learning = write_run(tmp_path, "balanced", [selfplay_puzzle(i, 2.0, 4.0) for i in range(1, 41)])
    (learning / "config.yaml").write_text((learning / "config.yaml").read_text() + "selfplay:\n  learn_every: 2\n")
    result = compare([old, fixed, learning], tmp_path / "out")
    height, width, _ = imread(result["selfplay"]["figure"]).shape
    assert result["selfplay"]["figure"] == tmp_path / "out" / "selfplay.png" and width > 3 * height > 0
    row, learning_row = result["selfplay"]["runs"]
    assert learning_row["label"] == "balanced (w_d=1, w_n=1)"
    assert (row["label"], row["phases"], row["evaluations"]) == ("novelty (w_d=1, w_n=1)", 0, {})
    assert row["pass_rate"] == {"current": 0.25, "initial": 0.25}
    report = result["report"].read_text()
    assert "| BC phases | 0 | 0 (fixed: `selfplay.learn_every` 0) |" in report
    assert "| none (w_d=1, w_n=1) | initial Solver |" not in report


def test_old_runs_outputs_are_unchanged(tmp_path):
    records = [puzzle(1, r_d=0.5), puzzle(2, valid=False, difficulty=None)]
    old = compare([write_run(tmp_path / "old", "balanced", records)], tmp_path / "old_out")
    assert old["report"].read_text() == OLD_REPORT + "\n"
    # the same run with self-play's fields, its Solver learning: figure.png and the rest of the report as before
    fields = [{"initial_attempted": True, "D_initial": 4.0}, {"initial_attempted": False, "D_initial": None}]
    new_records = [record | extra for record, extra in zip(records, fields)]
    new_run = write_run(tmp_path / "new", "balanced", new_records)
    (new_run / "config.yaml").write_text((new_run / "config.yaml").read_text() + "selfplay:\n  learn_every: 2\n")
    new = compare([new_run], tmp_path / "new_out")
    assert new["figure"].read_bytes() == old["figure"].read_bytes()
    before, section = new["report"].read_text().split("## Self-play\n")
    assert before + section[section.index("## Puzzles") :] == OLD_REPORT + "\n"


def test_the_statistics_against_the_unrewarded_run_match_a_naive_computation(tmp_path):
    """discussion.md's table: fractions after iteration 0, R_n at the same archive positions, SE of differences."""
    rng = random.Random(0)

    def records(count: int, solve: float) -> list[dict]:
        return [
            puzzle(i, r_n=rng.random(), valid=rng.random() < 0.9, difficulty=2.0 if rng.random() < solve else None)
            for i in range(1, count + 1)
        ]

    none, difficulty = records(47, 0.3), records(52, 0.7)
    run_dirs = [write_run(tmp_path, "none", none), write_run(tmp_path, "difficulty", difficulty)]
    runs = [read_run(run_dir) for run_dir in run_dirs]
    base_row, row = against_baseline(runs, "none")
    first, last = 10, 47  # iteration 0 holds indices 1-9; the shorter run ends at 47
    assert row["positions"] == (first, last, 29) and base_row["baseline"] and not row["baseline"]

    def solved(rs: list[dict]) -> list[bool]:
        return [r["D"] is not None for r in rs if r["iteration"] > 0 and r["valid"]]

    p, q = np.mean(solved(difficulty)), np.mean(solved(none))
    se = np.sqrt(p * (1 - p) / len(solved(difficulty)) + q * (1 - q) / len(solved(none)))
    assert row["solved"] == pytest.approx((p, q, se))
    mine = [r["R_n"] for r in difficulty if 29 <= r["index"] <= 47]
    theirs = [r["R_n"] for r in none if 29 <= r["index"] <= 47]
    se_r_n = np.sqrt(np.var(mine, ddof=1) / len(mine) + np.var(theirs, ddof=1) / len(theirs))
    assert row["R_n_second_half"] == pytest.approx((np.mean(mine), np.mean(theirs), se_r_n))
    iteration_2 = [r for r in difficulty if r["iteration"] == 2 and r["valid"]]
    assert row["solved_by_iteration"][2] == pytest.approx(np.mean([r["D"] is not None for r in iteration_2]))
    compare(run_dirs, tmp_path / "out")
    table = (tmp_path / "out" / "report.md").read_text().split("## Against the unrewarded run")[1]
    assert f"{p:.3f} ({(p - q) / se:+.1f} SE)" in table and f"| {runs[0].label} | " in table
    assert against_baseline(runs[1:], "none") == []  # no unrewarded run: no section
    # a run still in its first iteration (as a sweep's next preset): no row, and the others' positions unchanged
    starting = read_run(write_run(tmp_path, "novelty", [puzzle(i) for i in range(1, 8)]))
    assert [r["label"] for r in against_baseline([*runs, starting], "none")] == [r.label for r in runs]
    assert against_baseline([*runs, starting], "none")[1]["positions"] == (first, last, 29)


def test_effects_by_run_are_each_seeds_difference_then_the_spread_between_seeds(tmp_path):
    """Three seeds, each with its own unrewarded run: a reward's effect per seed is against that seed's baseline, and
    its uncertainty is the spread of those effects (Student's t with 2 degrees of freedom), not the puzzles'."""
    from scipy.stats import ttest_1samp

    rng = random.Random(1)

    def records(solve: float) -> list[dict]:
        return [puzzle(i, r_n=rng.random(), difficulty=2.0 if rng.random() < solve else None) for i in range(1, 61)]

    run_dirs, naive = [], []
    for seed, (base_rate, rewarded_rate) in enumerate([(0.3, 0.5), (0.4, 0.5), (0.2, 0.6)]):
        none, difficulty = records(base_rate), records(rewarded_rate)
        for name, rows in (("none", none), ("difficulty", difficulty)):
            run_dir = write_run(tmp_path / f"seed{seed}", name, rows)
            config = run_dir / "config.yaml"
            config.write_text(config.read_text() + f"  seed: {seed}\n")
            run_dirs.append(run_dir)

        def solved(rows: list[dict]) -> float:
            return np.mean([r["D"] is not None for r in rows if r["iteration"] > 0 and r["valid"]])

        naive.append(solved(difficulty) - solved(none))
    compare(run_dirs, tmp_path / "out", seed=7)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "drawn without replacement from its last 100 (seed 7;" in report  # the samples' seed, not a run's
    height, width, _ = imread(tmp_path / "out" / "effects.png").shape
    assert width > height > 0 and "](effects.png)" in report
    section = report.split("## Effects by run")[1].split("## ")[0]
    row = next(line for line in section.splitlines() if line.startswith("| difficulty | solved of valid"))
    test = ttest_1samp(naive, 0.0)
    assert [f"{100 * effect:+.3g} pt" in row for effect in naive] == [True] * 3
    assert f"{100 * np.mean(naive):+.3g} pt ± {100 * np.std(naive, ddof=1) / np.sqrt(3):.2g}" in row
    assert f"{test.statistic:+.2f} (2), {test.pvalue:.3f}" in row
    for seed in range(3):  # and each seed's own table, against its own baseline
        assert f"## Against the unrewarded run, seed {seed}" in report


def test_selfplay_effects_by_run_are_against_the_fixed_solver_and_the_initial_solver_of_each_seed(tmp_path):
    """Self-play's pair over three seeds: the Setter's statistics against the seed's fixed-Solver run, what the
    Solver learned against its own initial Solver (same puzzles; held-out evaluations, last phase − phase 0), the
    initial Solver's trend against the fixed run's; each summarised over seeds by the spread between them."""
    from scipy.stats import ttest_1samp

    rng = random.Random(2)

    def records(solve: float, learned: float) -> list[dict]:
        rows = []
        for i in range(1, 81):
            initial = 4.0 if rng.random() < solve + i / 400 else None
            current = 2.0 if rng.random() < learned else initial
            rows.append(selfplay_puzzle(i, current, initial, attempted=rng.random() < 0.6))
        return rows

    def run_dir(seed: int, name: str, rows: list[dict], learn_every: int) -> Path:
        path = write_run(tmp_path / f"seed{seed}", name, rows)
        config = path / "config.yaml"
        config.write_text(config.read_text() + f"  seed: {seed}\nselfplay:\n  learn_every: {learn_every}\n")
        return path

    run_dirs, gaps, held_out, trends = [], [], [], []
    for seed, (solve, learned, phase_0, last) in enumerate(
        [(0.3, 0.2, 0.16, 0.2), (0.4, 0.3, 0.18, 0.19), (0.2, 0.1, 0.17, 0.23)]
    ):
        fixed, learning = records(solve, 0.0), records(solve, learned)
        run_dirs.append(run_dir(seed, "selfplay_fixed", fixed, 0))
        run_dirs.append(learning_dir := run_dir(seed, "selfplay", learning, 2))
        phases = [
            {
                "iteration": 1,
                "phase": 1,
                "initial": {"heldout_families": evaluation(phase_0, phase_0)},
                "learned": {"heldout_families": evaluation((phase_0 + last) / 2, last)},
            },
            {"iteration": 3, "phase": 2, "learned": {"heldout_families": evaluation(last, last)}},
        ]
        write_phases(learning_dir, phases)

        def rates(rows: list[dict], key: str) -> list[float]:
            chosen = [r for r in rows if r["valid"] and r["initial_attempted"]]
            return [0.0 if r[key] is None else 1 / r[key] for r in chosen]

        def initial_slope(rows: list[dict]) -> float:
            x = [r["index"] / 100 for r in rows if r["valid"] and r["initial_attempted"]]
            return np.polyfit(x, rates(rows, "D_initial"), 1)[0]

        gaps.append(np.mean(np.subtract(rates(learning, "D"), rates(learning, "D_initial"))))
        held_out.append(last - phase_0)
        trends.append(initial_slope(learning) - initial_slope(fixed))
    report = compare(run_dirs, tmp_path / "out")["report"].read_text()
    section = report.split("## Effects by run")[1].split("## ")[0]

    def row(label: str) -> str:
        return next(line for line in section.splitlines() if line.startswith(f"| selfplay | {label}"))

    for label, effects, scale, unit in (
        ("current − initial Solver's pass rate, same puzzles", gaps, 1, ""),
        ("heldout_families pass@1, last phase − phase 0", held_out, 100, " pt"),
        ("initial Solver's trend per 100 puzzles, − selfplay_fixed's", trends, 1, ""),
    ):
        test = ttest_1samp(effects, 0.0)
        line = row(label)
        assert all(f"{scale * effect:+.3g}{unit}" in line for effect in effects), line
        se = scale * np.std(effects, ddof=1) / np.sqrt(3)
        assert (
            f"{scale * np.mean(effects):+.3g}{unit} ± {se:.2g} | {test.statistic:+.2f} (2), {test.pvalue:.3f}" in line
        )
    assert "(±" not in row("heldout_families pass@1")  # an evaluation's records give no within-run SE
    assert row("solved of valid, it. 1+")  # the Setter's side, against the fixed Solver's run
    assert all(f"## Against `selfplay_fixed`, seed {seed}" in report for seed in range(3))


def test_gzipped_records_read_as_the_files_the_run_wrote(tmp_path):
    """A published run may keep puzzles, iterations and BC phases gzipped: each is read, notes included."""
    written = write_run(
        tmp_path / "written", "balanced", [puzzle(i) for i in range(1, 6)], tail='{"iteration": 0, "ind'
    )
    (written / "iterations.jsonl").write_text("".join(json.dumps({"iteration": i}) + "\n" for i in range(3)))
    write_phases(written, [{"phase": 1, "initial": {"heldout": evaluation(0.1, 0.3)}, "learned": {}}])
    published = tmp_path / "published"
    published.mkdir()
    (published / "config.yaml").write_bytes((written / "config.yaml").read_bytes())
    for name in ("puzzles.jsonl", "iterations.jsonl", "solver.jsonl"):
        (published / f"{name}.gz").write_bytes(gzip.compress((written / name).read_bytes()))
    plain, packed = read_run(written), read_run(published)
    assert packed.puzzles == plain.puzzles and len(packed.puzzles) == 5
    assert packed.phases == plain.phases == {0: {"heldout": evaluation(0.1, 0.3)}, 1: {}}
    assert packed.notes == plain.notes
    assert "3 of 8 iterations finished: still training, or stopped" in packed.notes
    assert any("cut short" in note for note in packed.notes)


def test_iterations_compares_each_runs_first_n_as_if_its_records_ended_there(tmp_path, capsys):
    """A 16-iteration run beside 8-iteration ones: `iterations=N` reads it as the run whose records stop after
    iteration N − 1 (its puzzles and the BC phases after them), saying so in a note; a shorter run is read whole."""
    rows = [selfplay_puzzle(i, 2.0 if i % 3 else None, 4.0 if i % 2 else None) for i in range(1, 40)]
    phases = [
        {"iteration": 2 * phase - 1, "phase": phase, "learned": {"heldout_families": evaluation(0.1 * phase, 0.2)}}
        for phase in (1, 2)
    ]
    phases[0]["initial"] = {"heldout_families": evaluation(0.05, 0.1)}

    def learning_run(root: str, rows: list[dict], phases: list[dict]) -> Path:
        run_dir = write_run(tmp_path / root, "selfplay", rows)
        (run_dir / "config.yaml").write_text((run_dir / "config.yaml").read_text() + "selfplay:\n  learn_every: 2\n")
        write_phases(run_dir, phases)
        return run_dir

    whole = learning_run("whole", rows, phases)  # iterations 0-3: puzzle(i) is in iteration i // 10
    reference = learning_run("cut", [row for row in rows if row["iteration"] < 2], phases[:1])
    cut, same = read_run(whole, iterations=2), read_run(reference)
    assert (cut.puzzles, cut.phases) == (same.puzzles, same.phases) and list(cut.phases) == [0, 1]
    assert cut.notes == ["its first 2 iterations only (compare --iterations 2)"] and same.notes == []
    assert read_run(reference, iterations=2).notes == []  # nothing past iteration 1 to cut
    cut_report = compare([whole], tmp_path / "cut_out", iterations=2)["report"].read_text()
    reference_report = compare([reference], tmp_path / "reference_out")["report"].read_text()
    note = f"- **selfplay (w_d=1, w_n=1)** (`{whole}`): its first 2 iterations only (compare --iterations 2)\n\n"
    assert note in cut_report  # the notes' block: the one difference
    assert cut_report.replace(note, "").replace(str(whole), str(reference)) == reference_report
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(whole), "--out", str(tmp_path / "cli"), "--iterations", "0"])
    error = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "--iterations: '0' is not a number of iterations (1 or more)" in error
    assert "\n" not in error


def write_iterations(run_dir: Path, peaks: list[float | None], tail: str = "") -> None:
    """iterations.jsonl with each iteration's peak RSS (None: a record without one, as runs before it was logged)."""
    records = [{"iteration": n} | ({} if gib is None else {"peak_rss_gib": gib}) for n, gib in enumerate(peaks)]
    (run_dir / "iterations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_memory_is_each_iterations_peak_in_brief_against_its_runs_goal(tmp_path):
    """First, last, highest (and where), the least-squares growth per 10 iterations against a naive formula, and
    the iterations over the goal: 6 GiB for a Setter-only run, 8 GiB for one whose Solver learns. A resumed run's
    repeated iteration counts once (the last record); a line cut short is skipped."""
    peaks = [2.0, 2.5, 6.5, 3.0, 3.2, 6.1]
    none = write_run(tmp_path, "none", [puzzle(i) for i in range(1, 60)], "w_difficulty: 0\n  w_novelty: 0")
    # iteration 3 logged before a crash, then again by the resumed run; the last line cut short by a kill
    logged = [(0, 2.0), (1, 2.5), (2, 6.5), (3, 9.9), (3, 3.0), (4, 3.2), (5, 6.1)]
    records = [json.dumps({"iteration": n, "peak_rss_gib": gib}) for n, gib in logged]
    (none / "iterations.jsonl").write_text("\n".join(records) + '\n{"iteration": 6, "peak_')
    learner = write_run(tmp_path, "selfplay", [selfplay_puzzle(i, 2.0, 2.0) for i in range(1, 30)])
    (learner / "config.yaml").write_text((learner / "config.yaml").read_text() + "selfplay:\n  learn_every: 2\n")
    write_iterations(learner, [None, 7.5, 8.5])
    result = compare([none, learner], tmp_path / "out")
    first, second = result["memory"]["runs"]
    x = np.arange(len(peaks)) / 10
    slope = sum((a - x.mean()) * (b - np.mean(peaks)) for a, b in zip(x, peaks)) / sum((a - x.mean()) ** 2 for a in x)
    residuals = [b - np.mean(peaks) - slope * (a - x.mean()) for a, b in zip(x, peaks)]
    se = (sum(r * r for r in residuals) / (len(peaks) - 2) / sum((a - x.mean()) ** 2 for a in x)) ** 0.5
    assert (first["iterations"], first["first"], first["last"], first["highest"], first["highest_at"]) == (
        6,
        2.0,
        6.1,
        6.5,
        2,
    )
    assert first["growth"] == pytest.approx((slope, se))
    assert (first["goal"], first["over"]) == (6.0, 2)
    assert (second["iterations"], second["growth"], second["goal"], second["over"]) == (2, None, 8.0, 1)
    report = result["report"].read_text()
    assert "| none (w_d=0, w_n=0) | 6 | 2.00 | 6.10 | 6.50 (2) |" in report
    assert "| selfplay (w_d=1, w_n=1) | 2 | 7.50 | 8.50 | 8.50 (2) | – | 8 | 1 |" in report
    height, width, _ = imread(result["memory"]["figure"]).shape
    assert width > height > 0


def test_runs_without_peaks_have_no_memory_section(tmp_path):
    run = write_run(tmp_path, "balanced", [puzzle(i) for i in range(1, 30)])
    write_iterations(run, [None, None])
    result = compare([run], tmp_path / "out")
    assert result["memory"] is None
    assert "## Memory" not in result["report"].read_text()
    assert not (tmp_path / "out" / "memory.png").exists()


def test_compare_iterations_cuts_the_memory_records_too(tmp_path):
    run = write_run(tmp_path, "none", [puzzle(i) for i in range(1, 60)], "w_difficulty: 0\n  w_novelty: 0")
    write_iterations(run, [2.0, 2.1, 2.2, 5.0, 5.1])
    (row,) = compare([run], tmp_path / "out", iterations=3)["memory"]["runs"]
    assert (row["iterations"], row["last"], row["highest"]) == (3, 2.2, 2.2)


def test_the_setters_evaluations_are_a_row_each_the_last_of_a_repeated_iteration_kept(tmp_path):
    """eval.jsonl's summaries in the report, in iteration order, in % and R_n as they are; an evaluation logged again
    by a resumed run counts once, and `--iterations` drops those after its cut."""
    run = write_run(tmp_path, "balanced", [puzzle(i) for i in range(1, 60)])
    summary = {"puzzles": 32, "valid": 0.75, "solved_of_valid": 0.5, "hard_but_solvable": 0.25, "distinct": 1.0}
    records = [
        {"iteration": 9, "summary": summary | {"mean_r_n": 0.3}},
        {"iteration": 19, "summary": summary | {"mean_r_n": 0.9}},  # before a crash
        {"iteration": 19, "summary": summary | {"mean_r_n": 0.2}},  # the resumed run's
        {"iteration": 29, "summary": summary | {"valid": 1.0, "mean_r_n": 0.1}},
    ]
    (run / "eval.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    report = compare([run], tmp_path / "out")["report"].read_text()
    rows = [
        line for line in report.splitlines() if line.startswith("| balanced (w_d=1, w_n=1) | ") and "| 32 |" in line
    ]
    assert rows == [
        "| balanced (w_d=1, w_n=1) | 9 | 32 | 75.0 | 50.0 | 25.0 | 100.0 | 0.300 |",
        "| balanced (w_d=1, w_n=1) | 19 | 32 | 75.0 | 50.0 | 25.0 | 100.0 | 0.200 |",
        "| balanced (w_d=1, w_n=1) | 29 | 32 | 100.0 | 50.0 | 25.0 | 100.0 | 0.100 |",
    ]
    cut = compare([run], tmp_path / "cut", iterations=20)["report"].read_text()
    assert "| 19 | 32 |" in cut and "| 29 | 32 |" not in cut
    assert (
        "## The Setter evaluated"
        not in compare([write_run(tmp_path / "b", "none", [puzzle(1)])], tmp_path / "c")["report"].read_text()
    )
