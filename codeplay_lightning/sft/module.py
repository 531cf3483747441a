"""`SFTModule`: next-token cross-entropy on packed puzzle text, AdamW with warm-up and cosine decay."""

from __future__ import annotations

import math

import lightning as L
import torch


class SFTModule(L.LightningModule):
    def __init__(self, model: torch.nn.Module, lr: float, max_steps: int, warmup_steps: int):
        super().__init__()
        self.model = model
        self.lr, self.max_steps, self.warmup_steps = lr, max_steps, warmup_steps

    def training_step(self, batch: dict[str, torch.Tensor], batch_index: int) -> torch.Tensor:
        loss = self.model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        ).loss  # mean over the tokens that are not padding
        self.log("sft/loss", loss, prog_bar=True)
        self.log("sft/lr", self.trainer.optimizers[0].param_groups[0]["lr"])
        self.log("sft/tokens", batch["attention_mask"].sum().float(), reduce_fx="sum")
        return loss

    def configure_optimizers(self):
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=self.lr, weight_decay=0.0)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_factor(step, self.warmup_steps, self.max_steps)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def lr_factor(step: int, warmup_steps: int, max_steps: int, floor: float = 0.1) -> float:
    """Linear warm-up to 1 over `warmup_steps`, then cosine decay to `floor` at `max_steps`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
