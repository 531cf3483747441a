"""The paper's configuration on its own model architecture: `configs/balanced.yaml configs/paper.yaml` (GPT-Neo, 64
streams x 128 steps, 16 few-shot puzzles, 8 minibatches) with a tiny GPT-Neo directory in place of the hub
model (and, to keep it short, 16 streams behind 2 few-shot puzzles), on the CPU at fp32 and a learning rate
too small to move any weight: the PPO ratio must then be 1 everywhere (clip fraction 0, approximate KL 0),
and the Setter's sampled log-probs must be those the scoring forward gives the same tokens after the prompt.
Likewise for GPT-2 and Llama."""

from __future__ import annotations

import pytest
from model_architectures import tiny_model
from support import CONFIGS, scalar_values

from codeplay_lightning.config import load_config
from codeplay_lightning.train import train


@pytest.mark.parametrize("architecture", ["gpt_neo", "gpt2", "llama"])
def test_the_paper_config_trains_exactly_on_its_model_family(architecture, tmp_path, char_tokenizer):
    model_dir = tmp_path / architecture
    model = tiny_model(
        architecture, char_tokenizer, initializer_range=0.02
    )  # nearly uniform: ends a puzzle in ~100 tokens
    model.save_pretrained(model_dir)
    char_tokenizer.save_pretrained(model_dir)
    config = load_config(
        [CONFIGS / "balanced.yaml", CONFIGS / "paper.yaml"],
        [
            f"model.name={model_dir}",
            "trainer.accelerator=cpu",
            "trainer.iterations=1",
            "trainer.precision=32-true",
            "ppo.lr=1e-30",
            f"trainer.run_root={tmp_path / 'runs'}",
            "reward.reference=null",
            "reward.reference_split=null",  # P3's files are not here: our corpus normalises
            "rollout.fewshot=2",
            "rollout.n_envs=16",
        ],
    )  # 16 puzzles are ~1,600 characters: 6 minutes a architecture here
    run_dir = train(config)
    assert len((run_dir / "puzzles.jsonl").read_text().splitlines()) >= 8  # finished puzzles to train on
    values = scalar_values(run_dir)
    assert values["ppo/minibatch_tokens"][0] > 0
    assert values["ppo/clip_frac"] == [0.0]
    assert abs(values["ppo/approx_kl"][0]) < 1e-4
    assert values["rollout/sampler_logprob_gap"][0] < 1e-4  # the sampler saw the prompt, as the scorer does
