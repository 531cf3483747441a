"""What a user sees of a run: its console lines (one per iteration, a summary at the end) and what TensorBoard shows,
read back from its event files: one step axis per iteration (1 to N) for every per-iteration tag, the puzzle-indexed
tags named as such, and the run's settings in the HPARAMS tab."""

from __future__ import annotations

import csv
import re

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from training_runs import read_puzzles, read_records, run, tiny_config

from codeplay_lightning.config import TrainConfig, run_identity
from codeplay_lightning.setter.records import HPARAMS_METRICS


def events(run_dir) -> EventAccumulator:
    (path,) = run_dir.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(path))
    accumulator.Reload()
    return accumulator


def test_every_per_iteration_tag_is_on_one_axis_and_the_settings_are_in_hparams(tmp_path, stream_model, char_tokenizer):
    overrides = ("trainer.iterations=2", "reward.w_novelty=0.5", "trainer.loggers=[csv]")
    run_dir = run(tmp_path, stream_model, char_tokenizer, *overrides)
    accumulator = events(run_dir)
    steps = {tag: [event.step for event in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}
    per_iteration = {tag: s for tag, s in steps.items() if tag.split("/")[0] in ("rollout", "ppo", "time", "memory")}
    assert {"rollout/valid_frac", "ppo/policy_loss", "time/iteration_s", "memory/peak_rss_gib"} <= set(per_iteration)
    assert all(s == [1, 2] for s in per_iteration.values()), per_iteration
    puzzles = len(read_puzzles(run_dir))
    assert steps["reward_by_puzzle/total"] == list(range(1, puzzles + 1))
    assert not [tag for tag in steps if tag.startswith("reward/") or tag in ("epoch", "step")]

    sessions = [
        plugin_data_pb2.HParamsPluginData.FromString(content)
        for content in accumulator.PluginTagToContent("hparams").values()
    ]
    started = next(data.session_start_info for data in sessions if data.HasField("session_start_info"))
    experiment = next(data.experiment for data in sessions if data.HasField("experiment"))
    identity = run_identity(tiny_config(tmp_path, *overrides))
    assert set(started.hparams) == set(identity)
    assert started.hparams["reward.w_novelty"].number_value == 0.5
    assert started.hparams["model.name"].string_value == "tiny-stream"
    assert {info.name.tag for info in experiment.metric_infos} == set(HPARAMS_METRICS) <= set(steps)
    defaults = run_identity(TrainConfig())
    changed = [key for key, value in identity.items() if defaults[key] != value]
    assert "reward.w_novelty" in changed and len(changed) < len(identity)
    assert [info.name for info in experiment.hparam_infos][: len(changed)] == changed  # what tells runs apart, first
    by_iteration = [p["iteration"] + 1 for p in read_puzzles(run_dir)]
    assert [event.value for event in accumulator.Scalars("reward_by_puzzle/iteration")] == by_iteration

    with (run_dir / "csv" / "metrics.csv").open() as handle:  # trainer.loggers: the same per-iteration values
        rows = list(csv.DictReader(handle))
    for tag in ("rollout/valid_frac", "ppo/policy_loss", "time/iteration_s"):
        logged = {int(row["step"]): float(row[tag]) for row in rows if row.get(tag)}
        assert logged == {event.step: pytest.approx(event.value) for event in accumulator.Scalars(tag)}, tag
    assert (run_dir / "csv" / "hparams.yaml").read_text() == (run_dir / "hparams.yaml").read_text()


def test_the_console_has_a_line_per_iteration_and_a_summary(tmp_path, stream_model, char_tokenizer, caplog):
    with caplog.at_level("INFO", logger="codeplay_lightning"):
        run_dir = run(tmp_path, stream_model, char_tokenizer, "trainer.iterations=2")
    puzzles = read_puzzles(run_dir)
    lines = [line for line in caplog.messages if line.startswith(("iteration ", "trained "))]
    assert len(lines) == 3, caplog.messages
    pattern = (
        r"iteration (\d)/2: (\d+) puzzles, 0% valid, 0% solved; R_d -1.00, R_n [\d.]+, R -?[\d.]+ "
        r"\| \d+ s \(.*\) \| [\d.]+ GiB"
    )
    for iteration, line in enumerate(lines[:2]):
        match = re.fullmatch(pattern, line)
        assert match and int(match.group(1)) == iteration + 1, line
        assert int(match.group(2)) == sum(p["iteration"] == iteration for p in puzzles)  # random text never parses
    assert re.fullmatch(
        rf"trained 2 iterations in [\d.]+ min: {len(puzzles)} puzzles, 0% valid, 0% solved; .*", lines[2]
    )


def test_the_setter_evaluation_is_logged_and_changes_nothing_the_run_trains_on(tmp_path, stream_model, char_tokenizer):
    """`evaluation.every=1`: an eval.jsonl row and `eval/*` at every iteration's step; the run's puzzles are those of
    the same run without it. A policy that takes no PPO step (the unrewarded run) is evaluated to the same puzzles and
    verdicts every time: the evaluation's draws are fixed, only the policy moves them."""
    common = ("trainer.iterations=2", "evaluation.puzzles=4")
    evaluated = run(tmp_path / "on", stream_model, char_tokenizer, *common, "evaluation.every=1")
    plain = run(tmp_path / "off", stream_model, char_tokenizer, *common, "evaluation.every=0")
    assert read_puzzles(evaluated) == read_puzzles(plain) and not (plain / "eval.jsonl").exists()
    rows = read_records(evaluated, "eval.jsonl")
    assert [row["iteration"] for row in rows] == [0, 1]
    for row in rows:
        summary, puzzles = row["summary"], row["puzzles"]
        assert summary["puzzles"] == len(puzzles) == 4
        assert summary["valid"] == sum(p["valid"] for p in puzzles) / 4
        assert summary["solved"] == sum(p["D"] is not None for p in puzzles) / 4
        assert summary["hard_but_solvable"] == sum(p["D"] is not None and p["D"] > 1 for p in puzzles) / 4
        assert summary["mean_r_n"] == pytest.approx(sum(p["R_n"] for p in puzzles) / 4)
        assert all(p["R_n"] > 0 for p in puzzles)  # against the reference set, never an empty archive
    scalars = events(evaluated).Scalars
    for key in ("valid", "solved", "hard_but_solvable", "mean_r_n"):
        assert [(event.step, event.value) for event in scalars(f"eval/{key}")] == [
            (row["iteration"] + 1, pytest.approx(row["summary"][key])) for row in rows
        ]

    still = run(
        tmp_path / "none",
        stream_model,
        char_tokenizer,
        *common,
        "evaluation.every=1",
        "reward.w_difficulty=0",
        "reward.w_novelty=0",
    )
    first, second = read_records(still, "eval.jsonl")
    assert first["puzzles"] == second["puzzles"] and first["summary"] == second["summary"]
