"""`codeplay export`: a tiny run's checkpoint as a model directory that transformers loads, scoring as the
checkpoint's policy does (full fine-tune and merged LoRA), with the run's config beside it; and carrying its prompt
and stop, which the model card's code uses in a process that never imports codeplay_lightning."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
from support import TURNS_CHAT_TEMPLATE, build_char_tokenizer, stream_llama
from training_runs import load_checkpoint, run
from transformers import AutoModelForCausalLM, AutoTokenizer

from codeplay_lightning.cli import main
from codeplay_lightning.config import load_config, run_identity
from codeplay_lightning.puzzles import fewshot_puzzles
from codeplay_lightning.setter.rollout import setter_sampling_prompt


@pytest.fixture
def base_dir(tmp_path, stream_model, char_tokenizer):
    """The tiny Setter saved as a model directory: the run's model.name, which the export loads."""
    directory = tmp_path / "base"
    stream_model.save_pretrained(directory)
    char_tokenizer.save_pretrained(directory)
    return directory


def exported(run_dir, out):
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    return AutoModelForCausalLM.from_pretrained(out).eval()


def policy_weights(checkpoint: dict) -> dict[str, torch.Tensor]:
    return {
        key.removeprefix("policy."): value
        for key, value in checkpoint["state_dict"].items()
        if key.startswith("policy.")
    }


def merged_lora(weights: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """W + scale * B A for every adapted layer, the other weights as they are: the merge written out."""
    merged = {}
    for key, value in weights.items():
        if "lora_" in key:
            continue
        name = key.removeprefix("base_model.model.").replace(".base_layer", "")
        prefix = key.removesuffix("base_layer.weight")
        if key.endswith("base_layer.weight"):
            value = (
                value + scale * weights[f"{prefix}lora_B.default.weight"] @ weights[f"{prefix}lora_A.default.weight"]
            )
        merged[name] = value
    return merged


def assert_scores_alike(model, reference_weights, stream_model, char_tokenizer, **tolerance):
    reference = type(stream_model)(stream_model.config).eval()
    reference.load_state_dict(reference_weights)
    ids = torch.tensor([char_tokenizer("def f(x: int):\n    return x == 7")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, **tolerance)


def test_a_full_fine_tune_exports_as_its_checkpoint_scores(tmp_path, stream_model, char_tokenizer, base_dir):
    run_dir = run(tmp_path, stream_model, char_tokenizer, "trainer.iterations=1", f"model.name={base_dir}")
    checkpoint = load_checkpoint(run_dir)
    model = exported(run_dir, tmp_path / "export")
    weights = policy_weights(checkpoint)
    assert any(not torch.equal(weights[key], value) for key, value in stream_model.state_dict().items())  # trained
    assert_scores_alike(model, weights, stream_model, char_tokenizer, atol=0, rtol=0)
    assert AutoTokenizer.from_pretrained(tmp_path / "export").get_vocab() == char_tokenizer.get_vocab()
    beside = load_config([tmp_path / "export" / "codeplay.yaml"])
    assert run_identity(beside) == checkpoint["codeplay"]  # the run's own config


def test_lora_adapters_are_merged_into_a_plain_model(tmp_path, stream_model, char_tokenizer, base_dir):
    rank, alpha = 4, 8
    overrides = (
        "trainer.iterations=1",
        f"model.name={base_dir}",
        f"model.lora_rank={rank}",
        f"model.lora_alpha={alpha}",
    )
    run_dir = run(tmp_path, stream_model, char_tokenizer, *overrides)
    model = exported(run_dir, tmp_path / "export")
    weights = merged_lora(policy_weights(load_checkpoint(run_dir)), alpha / rank)
    assert type(model) is type(stream_model) and set(model.state_dict()) == set(stream_model.state_dict())
    assert any(not torch.equal(weights[key], value) for key, value in stream_model.state_dict().items())
    assert_scores_alike(model, weights, stream_model, char_tokenizer, atol=1e-5, rtol=1e-5)


def test_export_refuses_in_one_line(tmp_path, capsys):
    old = tmp_path / "old.ckpt"
    torch.save({"state_dict": {}}, old)
    assert main(["export", str(old), "--out", str(tmp_path / "a")]) == 2
    assert main(["export", str(tmp_path / "missing.ckpt"), "--out", str(tmp_path / "b")]) == 2
    assert main(["export", str(old), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: checkpoint {old} carries no config: it was written by an earlier version",
        f"error: checkpoint {tmp_path / 'missing.ckpt'} does not exist",
        f"error: {tmp_path} exists: give a new directory",
    ]
    assert not (tmp_path / "a").exists()


# the model card's code, run as a user runs it (a seed for the test's sake), then what the test checks
CARD_RUN = """
import json, sys
import torch
torch.manual_seed(0)
{card_code}
json.dump({{"new_text": new_text, "puzzle": puzzle, "template": tokenizer.chat_template,
           "stop_strings": model.generation_config.stop_strings,
           "project_imported": any(name.startswith("codeplay_lightning") for name in sys.modules)}}, sys.stderr)
"""


def test_the_export_carries_its_prompt_and_stop_for_stock_transformers(tmp_path, char_tokenizer):
    """A model that writes a newline half the time, exported from a base whose tokenizer has a chat template: the
    card's ten lines, in a process without the project, write one puzzle that stops at its first blank line."""
    newline_model = stream_llama(char_tokenizer, eos_logit=-20.0)  # the final hidden state is ~ones: a row's sum
    newline = char_tokenizer.convert_tokens_to_ids("\n")  # is its logit, here e^4.5 against ~100 others of e^0
    with torch.no_grad():
        newline_model.lm_head.weight[newline] = 4.5 / newline_model.config.hidden_size
    base = tmp_path / "base"
    newline_model.save_pretrained(base)
    chat_tokenizer = build_char_tokenizer()
    chat_tokenizer.chat_template = TURNS_CHAT_TEMPLATE
    chat_tokenizer.save_pretrained(base)
    run_dir = run(tmp_path, newline_model, char_tokenizer, "trainer.iterations=1", f"model.name={base}")
    out = tmp_path / "export"
    assert main(["export", str(run_dir), "--out", str(out)]) == 0

    examples = fewshot_puzzles()[: load_config([out / "codeplay.yaml"]).rollout.fewshot]
    assert (out / "prompt.txt").read_text() == setter_sampling_prompt(char_tokenizer, examples)
    assert json.loads((out / "generation_config.json").read_text())["stop_strings"] == ["\n\n"]
    card = (out / "README.md").read_text()
    assert all(example.f in card for example in examples)
    assert "chat_template" not in json.loads((out / "tokenizer_config.json").read_text())
    assert not (out / "chat_template.jinja").exists()
    assert {path.name: oct(path.stat().st_mode & 0o777) for path in out.iterdir()} == {
        path.name: "0o644" for path in out.iterdir()
    }

    card_code = re.search(r"## Write a puzzle with transformers\n\n```python\n(.*?)```", card, flags=re.DOTALL)[1]
    assert len(card_code.strip().splitlines()) <= 12
    script = CARD_RUN.format(card_code=card_code)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stderr.splitlines()[-1])
    assert not result["project_imported"] and result["template"] is None and result["stop_strings"] == ["\n\n"]
    new_text = result["new_text"]
    assert new_text.endswith("\n\n") and "\n\n" not in new_text[:-2]  # stopped at the puzzle's first blank line
    assert result["puzzle"] == "def f(" + new_text[:-2]
