"""A trained Setter as a Hugging Face model directory, which `transformers`, `codeplay evaluate --llm` and
`codeplay synthesize --llm` load: `export_policy(checkpoint, out)`.

The checkpoint's policy weights go into the model its config names (`model.name`, loaded as training loads it);
LoRA adapters are merged into the base weights, so the directory is a plain model of the base's architecture. The
value head stays behind: it is PPO's, not the Setter's. The run's config is written beside the weights as
`codeplay.yaml`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from transformers import PreTrainedModel

from codeplay_lightning.config import ConfigError, ModelConfig
from codeplay_lightning.models.loading import load_causal_lm, with_lora
from codeplay_lightning.setter.checkpoint import CONFIG_KEY

CONFIG_FILE = "codeplay.yaml"


def export_policy(checkpoint: Path, out: Path) -> Path:
    """Write `checkpoint`'s policy and tokenizer into the new directory `out`; returns `out`."""
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False, mmap=True)
    model = model_config(saved, checkpoint)
    policy, tokenizer = load_causal_lm(model.name)
    policy = trained_policy(policy, model, saved["state_dict"])
    out.mkdir(parents=True)
    policy.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / CONFIG_FILE).write_text(OmegaConf.to_yaml(saved[CONFIG_KEY]))
    return out


def trained_policy(policy: PreTrainedModel, model: ModelConfig, state_dict: dict) -> PreTrainedModel:
    """`policy` (the model `model.name` loads) with the trained weights of a checkpoint's `state_dict`, LoRA
    adapters merged in."""
    if model.lora_rank:
        policy = with_lora(policy, model)
    weights = {key.removeprefix("policy."): value for key, value in state_dict.items() if key.startswith("policy.")}
    policy.load_state_dict(weights, strict=True)
    return policy.merge_and_unload() if model.lora_rank else policy


def model_config(saved: dict, path: Path) -> ModelConfig:
    """The `model:` settings a checkpoint was trained with (only these: the rest of the run's config may name
    files of another machine); refused in one line when it carries no config or one this version cannot read."""
    if CONFIG_KEY not in saved:
        raise ConfigError(f"checkpoint {path} carries no config: it was written by an earlier version")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), saved[CONFIG_KEY]["model"]))
    except (OmegaConfBaseException, KeyError, ValueError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        raise ConfigError(f"checkpoint {path}'s model settings do not fit this version: {lines[0]}") from None
