"""`compare` and `codeplay compare` on synthetic run directories written here."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from codeplay_lightning.cli import main
from codeplay_lightning.experiments.compare import LAST, SAMPLES, WINDOW, compare, read_run, sample_last, trailing_mean


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
