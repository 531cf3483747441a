"""The commands that load a model, with `--device cuda`: the model is loaded there in bf16 (`--dtype auto` on a card
that computes it natively), every batch samples there, and each command writes its results."""

from __future__ import annotations

import json

import pytest
import torch

from codeplay_lightning.cli import main
from codeplay_lightning.llm import backends

pytestmark = pytest.mark.gpu


@pytest.fixture
def sampled_on(monkeypatch) -> list[tuple[str, torch.dtype]]:
    """(device, dtype) of the model at every `sample` call of a local LLM."""
    seen, sample = [], backends.sample

    def recorded(model, *args, **kwargs):
        seen.append((str(model.device), model.dtype))
        return sample(model, *args, **kwargs)

    monkeypatch.setattr(backends, "sample", recorded)
    return seen


def on_the_gpu(seen: list[tuple[str, torch.dtype]]) -> bool:
    return bool(seen) and set(seen) == {("cuda:0", torch.bfloat16)}


def test_evaluate(tmp_path, tiny_model_dir, sampled_on):
    puzzles = tmp_path / "puzzles.jsonl"
    puzzles.write_text(json.dumps({"name": "three", "f": "def f(x: int):\n    return x == 3"}) + "\n")
    out = tmp_path / "eval"
    arguments = ["--attempts", "2", "--fewshot", "2", "--max-new-tokens", "8", "--out", str(out)]
    assert (
        main(["evaluate", "--puzzles", str(puzzles), "--llm", str(tiny_model_dir), "--device", "cuda", *arguments]) == 0
    )
    assert json.loads((out / "summary.json").read_text())["puzzles"] == 1
    assert on_the_gpu(sampled_on)


def test_synthesize(tmp_path, tiny_model_dir, sampled_on):
    out = tmp_path / "synthesis"
    arguments = ["--method", "gif-mcts", "--budget", "2", "--limit", "1", "--max-new-tokens", "8", "--out", str(out)]
    assert (
        main(["synthesize", "--task", "p3", "bundled", "--llm", str(tiny_model_dir), "--device", "cuda", *arguments])
        == 0
    )
    assert json.loads((out / "summary.json").read_text())["llm_calls"] == 2
    assert on_the_gpu(sampled_on)


def test_cwm_synthesize(tmp_path, tiny_model_dir, sampled_on):
    pytest.importorskip("gymnasium")
    data, out = tmp_path / "cwm", tmp_path / "synthesis"
    assert main(["cwm", "build", "--out", str(data), "--envs", "CartPole-v1", "--seed", "0"]) == 0
    arguments = ["--method", "gif-mcts", "--budget", "2", "--max-new-tokens", "8", "--out", str(out)]
    command = ["cwm", "synthesize", "--data", str(data), "--env", "CartPole-v1", "--llm", str(tiny_model_dir)]
    assert main([*command, "--device", "cuda", *arguments]) == 0
    assert set(json.loads((out / "scores.json").read_text())) == {"CartPole-v1"}
    assert on_the_gpu(sampled_on)
