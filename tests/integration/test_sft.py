"""`codeplay sft` on a tiny Llama: it learns, writes a model spec that loads, LoRA's adapter reproduces
the merged weights, and an interrupted run resumes to its step budget."""

import copy
import itertools
import json

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from support import TURNS_CHAT_TEMPLATE

from codeplay_lightning.corpus import FAMILIES
from codeplay_lightning.corpus.build import draw, p3_entry
from codeplay_lightning.models import load_causal_lm
from codeplay_lightning.puzzles import Puzzle
from codeplay_lightning.sft import SFTConfig, fine_tune
from codeplay_lightning.sft.actions import action_examples
from codeplay_lightning.sft.data import pack, pack_examples, training_puzzles
from codeplay_lightning.sft.module import SFTModule
from codeplay_lightning.sft.run import collate

SMALL = dict(steps=12, batch_size=4, block=400, lr=3e-3, warmup_steps=2, precision="32-true")


@pytest.fixture
def corpus_file(tmp_path):
    instances = list(itertools.islice(draw(FAMILIES[:2], seed=0), 24))
    entries = [p3_entry(instance, index) for index, instance in enumerate(instances)]
    entries[-1]["split"] = "heldout_instances"  # never trained on
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(entries))
    return path


def mean_loss(model, tokenizer, sequences) -> float:
    with torch.no_grad():
        return model(**collate(sequences, tokenizer.pad_token_id)).loss.item()


def test_sft_lowers_the_loss_and_writes_a_loadable_model(tmp_path, corpus_file, tiny_llama, char_tokenizer):
    puzzles = training_puzzles([corpus_file])
    assert len(puzzles) == 23  # the train split only
    sequences, too_long = pack(char_tokenizer, puzzles, SMALL["block"], seed=0)
    assert too_long == 0
    before = mean_loss(tiny_llama, char_tokenizer, sequences)
    out = fine_tune(
        [str(corpus_file)],
        "tiny",
        tmp_path / "out",
        SFTConfig(**SMALL),
        model=copy.deepcopy(tiny_llama),
        tokenizer=char_tokenizer,
    )
    record = json.loads((out / "sft.json").read_text())
    assert record["steps"] == SMALL["steps"] and record["puzzles"] == 23 and record["too_long"] == 0
    assert record["config"]["lr"] == SMALL["lr"]
    trained, _ = load_causal_lm(str(out))
    assert mean_loss(trained, char_tokenizer, sequences) < 0.8 * before
    assert list((out / "logs").rglob("events.out.tfevents.*"))


def test_lora_adapter_merged_into_the_base_gives_the_output_model(tmp_path, corpus_file, tiny_llama, char_tokenizer):
    out = fine_tune(
        [str(corpus_file)],
        "tiny",
        tmp_path / "out",
        SFTConfig(lora_rank=4, **SMALL | {"lr": 0.0}),
        model=copy.deepcopy(tiny_llama),
        tokenizer=char_tokenizer,
    )
    assert json.loads((out / "sft.json").read_text())["config"]["lr"] == 1e-3  # LoRA's default rate, as used
    shipped = load_file(out / "adapter" / "adapter_model.safetensors")
    assert shipped and all(tensor.dtype == torch.bfloat16 for tensor in shipped.values())
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny"
    merged = PeftModel.from_pretrained(copy.deepcopy(tiny_llama), out / "adapter").merge_and_unload()
    trained, _ = load_causal_lm(str(out))
    changed = 0
    for name, tensor in trained.state_dict().items():
        torch.testing.assert_close(tensor, merged.state_dict()[name])
        changed += not torch.equal(tensor, tiny_llama.state_dict()[name])
    assert changed >= 2 * 7  # every linear layer of both blocks moved


def test_an_interrupted_run_resumes_to_its_step_budget(tmp_path, corpus_file, tiny_llama, char_tokenizer, monkeypatch):
    config = SFTConfig(**SMALL | {"steps": 8}, checkpoint_every=4)
    original = SFTModule.training_step

    def crash_after_six(self, batch, batch_index):
        if self.global_step == 6:
            raise RuntimeError("power cut")
        return original(self, batch, batch_index)

    monkeypatch.setattr(SFTModule, "training_step", crash_after_six)
    with pytest.raises(RuntimeError, match="power cut"):
        fine_tune(
            [str(corpus_file)],
            "tiny",
            tmp_path / "out",
            config,
            model=copy.deepcopy(tiny_llama),
            tokenizer=char_tokenizer,
        )
    monkeypatch.setattr(SFTModule, "training_step", original)
    with pytest.raises(ValueError, match="--resume"):
        fine_tune(
            [str(corpus_file)],
            "tiny",
            tmp_path / "out",
            config,
            model=copy.deepcopy(tiny_llama),
            tokenizer=char_tokenizer,
        )
    out = fine_tune(
        [str(corpus_file)],
        "tiny",
        tmp_path / "out",
        config,
        resume=True,
        model=copy.deepcopy(tiny_llama),
        tokenizer=char_tokenizer,
    )
    assert json.loads((out / "sft.json").read_text())["steps"] == 8


def test_a_p3_file_needs_its_split(tmp_path):
    p3 = tmp_path / "puzzles.json"
    p3.write_text(
        json.dumps(
            [
                {
                    "name": "A:0",
                    "sat": "def sat(x: int):\n    return x == 1",
                    "ans_type": "int",
                    "sol_header": "def sol():",
                    "sol_bodies": ["    return 1"],
                }
            ]
        )
    )
    with pytest.raises(ValueError, match="--p3-split"):
        training_puzzles([p3])
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": [], "test": ["A"]}))
    with pytest.raises(ValueError, match="no training puzzles"):
        training_puzzles([p3], split)
    entries = json.loads(p3.read_text())
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps([entries[0] | {"split": "train"}, entries[0] | {"name": "A:1"}]))
    with pytest.raises(ValueError, match="some entries have a split"):
        training_puzzles([mixed])


def test_packing_keeps_every_puzzle_once_but_leaves_out_a_puzzle_longer_than_a_block(corpus_file, char_tokenizer):
    puzzles = training_puzzles([corpus_file])
    huge = Puzzle("huge", "def f(x: int):\n    return x == " + "9" * 500, ("def g():\n    return 0",), "int")
    sequences, too_long = pack(char_tokenizer, [*puzzles, huge], SMALL["block"], seed=0)
    assert too_long == 1
    assert all(len(sequence.ids) <= SMALL["block"] and sequence.labels == sequence.ids for sequence in sequences)
    # Every other puzzle is packed exactly once, whole.
    packed_text = "".join(char_tokenizer.decode(sequence.ids) for sequence in sequences)
    assert all(packed_text.count(puzzle.f) == 1 for puzzle in puzzles) and huge.f not in packed_text


def test_sft_on_action_examples_learns_their_responses(tmp_path, corpus_file, tiny_llama, char_tokenizer, sandbox):
    """`codeplay actions`' examples next to a corpus: both are trained on, the examples' loss on their responses
    (the prompts' labels are -100: `test_sft_actions.py`) falls."""
    examples, _ = action_examples(training_puzzles([corpus_file])[::2], sandbox, per_action=3, seed=0)
    actions = tmp_path / "actions.jsonl"
    actions.write_text("".join(json.dumps(example.__dict__) + "\n" for example in examples))
    tokenizer = copy.deepcopy(char_tokenizer)
    tokenizer.chat_template = TURNS_CHAT_TEMPLATE
    block = 1500  # every example whole (the longest packs to 1,411 characters), each step a third of 3,000's
    sequences, too_long = pack_examples(tokenizer, examples, block, seed=0)
    assert too_long == 0
    before = mean_loss(tiny_llama, tokenizer, sequences)
    out = fine_tune(
        [str(corpus_file), str(actions)],
        "tiny",
        tmp_path / "out",
        SFTConfig(**SMALL | {"block": block, "steps": 20}),
        model=copy.deepcopy(tiny_llama),
        tokenizer=tokenizer,
    )
    record = json.loads((out / "sft.json").read_text())
    assert record["puzzles"] == 23 and record["action_examples"] == len(examples) == 9
    trained, _ = load_causal_lm(str(out))
    assert mean_loss(trained, tokenizer, sequences) < 0.8 * before
