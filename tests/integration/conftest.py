"""Fixtures of the training tests: the tiny streaming Llama as the Setter, and Setter streams that write three
valid puzzles every iteration."""

from __future__ import annotations

import pytest
import torch
from support import GOOD_MORNING, NEGATIVE_ROOT, SEVEN, stream_llama

from codeplay_lightning.setter import rollout_callback
from codeplay_lightning.setter.rollout import Episode


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
