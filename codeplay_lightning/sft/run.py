"""`fine_tune(...)`: supervised training of a causal LM on puzzles, in Lightning, into a model directory.

The output directory is a model spec usable everywhere (`model.name`, `--llm`, `--model`): the trained
weights (LoRA adapters merged in) and the tokenizer, plus `adapter/` (LoRA only: the small file that
`make warmstart` ships), `logs/` (TensorBoard), `checkpoints/last.ckpt` (resume) and `sft.json` (what
was trained, on what, for how long).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar
from lightning.pytorch.loggers import TensorBoardLogger

from codeplay_lightning.sft.data import Packed, pack, pack_examples, training_data
from codeplay_lightning.sft.module import SFTModule

log = logging.getLogger("codeplay_lightning")


@dataclass(frozen=True)
class SFTConfig:
    lora_rank: int = 0  # 0: every weight trains; > 0: LoRA adapters of this rank on every linear layer
    steps: int = 300  # optimizer steps
    batch_size: int = 8  # packed sequences per step
    block: int = 512  # tokens per packed sequence at most
    lr: float = 0.0  # 0: 1e-3 with LoRA, 5e-5 without
    warmup_steps: int = 20
    precision: str = "auto"  # Lightning's; auto: bf16-mixed where the device computes bfloat16 natively, else 32-true
    seed: int = 0
    checkpoint_every: int = 25  # steps between writes of checkpoints/last.ckpt

    @property
    def learning_rate(self) -> float:
        return self.lr or (1e-3 if self.lora_rank else 5e-5)


def fine_tune(
    sources: Sequence[str],
    model_spec: str,
    out: str | Path,
    config: SFTConfig,
    p3_split: str | None = None,
    resume: bool = False,
    model=None,
    tokenizer=None,
) -> Path:
    """Train `model_spec` (or the given `model`/`tokenizer`: tests pass tiny ones) on the puzzles of
    `sources` and write the output directory described in the module docstring."""
    out = Path(out)
    checkpoint = out / "checkpoints" / "last.ckpt"
    if resume and not checkpoint.is_file():
        raise ValueError(f"--resume: {checkpoint} does not exist")
    if not resume and (out / "sft.json").exists():
        raise ValueError(f"{out} already holds a trained model; choose another --out")
    if not resume and checkpoint.exists():
        raise ValueError(f"{out} holds an unfinished run: pass --resume to continue it")
    puzzles, examples = training_data(sources, p3_split)
    L.seed_everything(config.seed, workers=True, verbose=False)
    if model is None:
        from codeplay_lightning.models import load_causal_lm

        model, tokenizer = load_causal_lm(model_spec)
    sequences, too_long = pack(tokenizer, puzzles, config.block, config.seed)
    action_sequences, examples_too_long = pack_examples(tokenizer, examples, config.block, config.seed)
    sequences += action_sequences
    log.info(
        "sft: %d puzzles and %d action examples packed into %d sequences of at most %d tokens (%d tokens); "
        "%d puzzles and %d examples longer than a block left out",
        len(puzzles) - too_long,
        len(examples) - examples_too_long,
        len(sequences),
        config.block,
        sum(len(sequence.ids) for sequence in sequences),
        too_long,
        examples_too_long,
    )
    if config.lora_rank:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(
                r=config.lora_rank,
                lora_alpha=2 * config.lora_rank,
                lora_dropout=0.0,
                target_modules="all-linear",
                task_type="CAUSAL_LM",
            ),
        )
    model.train()
    module = SFTModule(model, config.learning_rate, config.steps, config.warmup_steps)
    loader = torch.utils.data.DataLoader(
        sequences,
        batch_size=config.batch_size,
        shuffle=True,
        drop_last=True,
        collate_fn=lambda rows: collate(rows, tokenizer.pad_token_id),
        generator=torch.Generator().manual_seed(config.seed),
    )
    if len(loader) == 0:
        raise ValueError(f"{len(sequences)} packed sequences are fewer than one batch of {config.batch_size}")
    trainer = L.Trainer(
        max_steps=config.steps,
        precision=resolved_precision(config.precision),
        accelerator="auto",
        devices=1,
        logger=TensorBoardLogger(out, name="logs", version=0, default_hp_metric=False),
        log_every_n_steps=1,
        enable_model_summary=False,
        gradient_clip_val=1.0,
        callbacks=[
            RichProgressBar(),
            ModelCheckpoint(
                dirpath=out / "checkpoints", save_last=True, save_top_k=0, every_n_train_steps=config.checkpoint_every
            ),
        ],
    )
    started = time.perf_counter()
    trainer.fit(module, train_dataloaders=loader, ckpt_path=checkpoint if resume else None)
    seconds = time.perf_counter() - started
    _save(model, tokenizer, out, model_spec if config.lora_rank else None)
    record = {
        "model": model_spec,
        "sources": [str(s) for s in sources],
        "config": asdict(config) | {"lr": config.learning_rate},  # the rate used, not 0 for "default"
        "puzzles": len(puzzles) - too_long,
        "too_long": too_long,
        "action_examples": len(examples) - examples_too_long,
        "action_examples_too_long": examples_too_long,
        "sequences": len(sequences),
        "steps": trainer.global_step,
        "final_loss": float(trainer.callback_metrics.get("sft/loss", float("nan"))),
        "seconds": round(seconds, 1),
    }
    (out / "sft.json").write_text(json.dumps(record, indent=2) + "\n")
    return out


def resolved_precision(precision: str) -> str:
    """`precision`, with `auto` the `mixed_precision` of the device Lightning's `accelerator="auto"` picks."""
    if precision != "auto":
        return precision
    from codeplay_lightning.devices import mixed_precision

    return mixed_precision("cuda" if torch.cuda.is_available() else "cpu")


def collate(rows: Sequence[Packed], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded batch; padding is masked from attention and from the loss (label -100)."""
    width = max(len(row.ids) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for row, (ids, row_labels) in enumerate(rows):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
        labels[row, : len(ids)] = torch.tensor(row_labels)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def _save(model, tokenizer, out: Path, lora_base: str | None) -> None:
    """The model (adapters merged in) and tokenizer into `out`; with LoRA (`lora_base`: the spec it
    adapts, recorded instead of a local cache path) the adapters into `out/adapter` too."""
    model.eval()
    if lora_base is not None:
        model.peft_config["default"].base_model_name_or_path = lora_base
        adapters = [p for p in model.parameters() if p.requires_grad]
        for parameter in adapters:  # shipped in bf16 (half the bytes); merged from the same rounded values
            parameter.data = parameter.data.to(torch.bfloat16)
        model.save_pretrained(out / "adapter")
        for parameter in adapters:
            parameter.data = parameter.data.float()
        model = model.merge_and_unload()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
