"""Fixtures of the training tests: the tiny streaming Llama as the Setter, Setter streams that write three
valid puzzles every iteration, and the reference set embedded once for the session."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support import CONFIGS, GOOD_MORNING, NEGATIVE_ROOT, SEVEN, stream_llama

from codeplay_lightning import train as train_module
from codeplay_lightning.archive import load_embedder
from codeplay_lightning.config import load_config
from codeplay_lightning.setter import rollout_callback
from codeplay_lightning.setter.rollout import Episode


@pytest.fixture(scope="session", autouse=True)
def reference_set_once():
    """Every training run begins by embedding its reference set (about 200 puzzles, 6 s on 2 cores, the most of a
    tiny run's time): here the first run of each reference set embeds it, and the later ones are given its result."""
    embed_reference, computed = train_module.reference_set, {}

    def once(embedder, reward):
        key = (reward.embedder, reward.reference, reward.reference_split)
        if key not in computed:
            computed[key] = embed_reference(embedder, reward)
        embeddings, distance = computed[key]
        return embeddings.copy(), distance

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train_module, "reference_set", once)
        yield


@pytest.fixture(scope="session")
def smoke_reference_file(tmp_path_factory, reference_set_once):
    """The smoke preset's reference set, embedded once and saved, for the ranks of `ddp_script.py` to load."""
    config = load_config([CONFIGS / "smoke.yaml"])
    embeddings, distance = train_module.reference_set(load_embedder(config.reward.embedder), config.reward)
    path = tmp_path_factory.mktemp("reference") / "smoke.npz"
    np.savez(path, embeddings=embeddings, distance=distance)
    return path


@pytest.fixture(scope="module")
def stream_model(char_tokenizer):
    return stream_llama(char_tokenizer)


@pytest.fixture
def valid_puzzles(monkeypatch, char_tokenizer):
    """The Setter's streams write these three puzzles every iteration (random characters never parse)."""

    def three_puzzles(*args):
        episodes = []
        for text in (SEVEN.f, NEGATIVE_ROOT.f, GOOD_MORNING.f):
            ids = torch.tensor(char_tokenizer(text + "\n\n")["input_ids"])
            episodes.append(Episode(text, ids, torch.zeros(len(ids))))  # log-probs: no sampler wrote these
        return episodes, 0

    monkeypatch.setattr(rollout_callback, "generate_episodes", three_puzzles)
