"""`RunRecords` and its line builders without a training run: what puzzles.jsonl, iterations.jsonl and eval.jsonl get,
what a resume drops, and the smoothing and counters a checkpoint keeps."""

from __future__ import annotations

import json
import math

import pytest
from lightning.pytorch.loggers import TensorBoardLogger

from codeplay_lightning.setter.progress import LAPS
from codeplay_lightning.setter.records import (
    MODEL_LAPS,
    RankRollout,
    RunRecords,
    iteration_record,
    puzzle_record,
)
from codeplay_lightning.setter.rollout import ScoredPuzzle


def scored(text: str, difficulty: float, valid: bool = True) -> ScoredPuzzle:
    passes = 0 if math.isinf(difficulty) else int(4 / difficulty)
    return ScoredPuzzle(text, valid, "" if valid else "no f", passes, difficulty, -0.5, 0.25, -0.25)


def records_in(tmp_path) -> RunRecords:
    return RunRecords([TensorBoardLogger(tmp_path, name="run", version=0, default_hp_metric=False)])


def lines(records: RunRecords, name: str) -> list[dict]:
    return [json.loads(line) for line in (records.run_dir / name).read_text().splitlines()]


def test_a_puzzle_line_has_no_infinity_and_says_whether_the_initial_solver_tried():
    unsolved = puzzle_record(scored("def f(x: int):\n    return x == 1", math.inf), None, iteration=3, index=7)
    assert unsolved["D"] is None and unsolved["initial_attempted"] is False and unsolved["D_initial"] is None
    assert (unsolved["iteration"], unsolved["index"], unsolved["R"]) == (3, 7, -0.25)
    tried = puzzle_record(scored("def f(x: int):\n    return x == 2", 2.0), math.inf, iteration=0, index=1)
    assert tried["D"] == 2.0 and tried["initial_attempted"] is True and tried["D_initial"] is None
    json.dumps([unsolved, tried], allow_nan=False)  # strict JSON: no NaN or Infinity reaches the file


def test_the_share_outside_the_models_takes_the_sandbox_out_of_the_solvers_laps():
    laps = {name: 1.0 for name, _, _ in LAPS if name != "solver_learning"} | {"sandbox": 0.5}
    record = iteration_record(2, 10.0, laps, {"puzzles": 5})
    model = sum(laps[name] for name in MODEL_LAPS if name in laps) - 0.5
    assert record["outside_models_frac"] == pytest.approx(1 - model / 10.0)
    assert record["novelty_seconds"] == 1.0 and record["puzzles"] == 5 and record["iteration"] == 2
    assert "novelty" not in MODEL_LAPS and set(MODEL_LAPS) < {name for name, _, _ in LAPS}


def test_records_count_smooth_and_forget_the_iteration_a_resume_samples_again(tmp_path):
    records = records_in(tmp_path)
    for iteration, difficulties in enumerate([(1.0, math.inf), (4.0,), (2.0, 2.0)]):
        puzzles = [scored(f"p{iteration}{k}", d) for k, d in enumerate(difficulties)]
        initial = [puzzle.difficulty for puzzle in puzzles]
        records.rollout([RankRollout(puzzles, initial, 0, {"ppo/kl": 0.0}, 1.0)], iteration, archive_size=0)
        records.iteration({"iteration": iteration, "seconds": 1.0, "outside_models_frac": 0.1, "peak_rss_gib": 1.0})
        records.evaluation({"iteration": iteration, "summary": {"puzzles": 1, "valid": 1.0}, "puzzles": []})
    assert [p["index"] for p in lines(records, "puzzles.jsonl")] == [1, 2, 3, 4, 5]
    assert records.puzzles_generated == 5 and list(records.recent["total"]) == [-0.25] * 5

    saved = records.state_dict()  # as the checkpoint after iteration 1 would hold it, then iteration 2 crashed
    saved["puzzles_generated"] = 3
    resumed = records_in(tmp_path)
    resumed.load_state_dict(saved)
    resumed.forget_unfinished(2)
    assert [p["index"] for p in lines(resumed, "puzzles.jsonl")] == [1, 2, 3]
    for name in ("iterations.jsonl", "eval.jsonl"):
        assert [record["iteration"] for record in lines(resumed, name)] == [0, 1]


def test_a_rank_that_does_not_write_still_counts_the_puzzles(tmp_path):
    records = records_in(tmp_path)
    records.writes = False
    records.rollout([RankRollout([scored("p", 1.0)] * 3, [1.0] * 3, 0, {}, 1.0)], 0, archive_size=3)
    records.iteration({"iteration": 0})
    assert records.puzzles_generated == 3 and not (records.run_dir / "puzzles.jsonl").exists()


def test_a_puzzle_the_sandbox_failed_to_judge_is_left_out_not_scored_unsolvable():
    from codeplay_lightning.execution import JUDGE_ERROR, Program, Verdict
    from codeplay_lightning.puzzles import Puzzle, check_puzzle
    from codeplay_lightning.setter.rollout import judged_by_the_sandbox
    from codeplay_lightning.solver.few_shot import PuzzleResult

    puzzle = Puzzle("p", "def f(x: int):\n    return x == 1", ans_type="int")
    program = Program(puzzle.f, "def g():\n    return 1", "int")

    def result(*statuses: str) -> PuzzleResult:
        return PuzzleResult(puzzle, (program,) * len(statuses), tuple(Verdict(s, "", 0.0) for s in statuses))

    check = check_puzzle(puzzle.f)
    judged = [(check, result("pass", "fail")), (check, result("fail", JUDGE_ERROR)), (check_puzzle("x"), None)]
    assert [r.judge_faults for _, r in judged[:2]] == [0, 1] and judged[1][1].difficulty == math.inf
    faulty, (kept, texts) = judged_by_the_sandbox(judged, ["first", "second", "third"])
    assert faulty == [1] and kept == [judged[0], judged[2]] and texts == ["first", "third"]
