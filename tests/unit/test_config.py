"""Config validation: settings that would crash a rank or train on the wrong quantity stop with one line."""

import shutil
from pathlib import Path

import pytest
from support import CONFIGS

from codeplay_lightning.config import ConfigError, load_config

P3_SMALL = Path(__file__).parents[1] / "fixtures" / "p3_small"


def test_fewer_streams_than_devices_is_refused():
    """A device without a stream has nothing to sample, and its rank would crash in the first rollout."""
    with pytest.raises(ConfigError, match=r"rollout.n_envs \(2\) must be at least trainer.devices \(4\)"):
        load_config([CONFIGS / "smoke.yaml"], ["trainer.devices=4", "trainer.strategy=ddp"])
    assert load_config([CONFIGS / "smoke.yaml"], ["trainer.devices=2"]).trainer.devices == 2


def test_the_setter_samples_from_the_whole_distribution_only():
    """PPO's old log-probs are over the whole vocabulary: with a nucleus they are not the behaviour policy's."""
    with pytest.raises(ConfigError, match="rollout.top_p must be 1, got 0.9: .*not over the nucleus"):
        load_config([CONFIGS / "balanced.yaml"], ["rollout.top_p=0.9"])
    assert load_config([CONFIGS / "balanced.yaml"], ["solver.top_p=0.9"]).solver.top_p == 0.9  # never trained on


def test_the_paper_scale_normalises_novelty_by_p3s_train_split(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^reward.reference data/p3/puzzles/puzzles.json does not exist .*git clone"):
        load_config([CONFIGS / "balanced.yaml", CONFIGS / "paper.yaml"])
    clone = tmp_path / "data" / "p3" / "puzzles"  # where paper.yaml's comment clones P3
    clone.mkdir(parents=True)
    for name in ("puzzles.json", "split.json"):
        shutil.copy(P3_SMALL / name, clone / name)
    reward = load_config([CONFIGS / "balanced.yaml", CONFIGS / "paper.yaml"]).reward
    assert (reward.reference, reward.reference_split) == ("data/p3/puzzles/puzzles.json", "data/p3/puzzles/split.json")
    without_p3 = ["reward.reference=null", "reward.reference_split=null"]  # our corpus's normaliser, as documented
    assert load_config([CONFIGS / "balanced.yaml", CONFIGS / "paper.yaml"], without_p3).reward.reference is None
