"""`SetterPPOModule` inside Lightning: the frozen copy follows the module's moves, the frozen weights are that copy
or the LoRA policy with its adapters off, every collective gets its tensor on the module's device, fp16's gradient
scaler unscales before the clip and steps, and the rule "step only when some rank's minibatch has a real token"
holds over a whole accumulation window."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch.utils.data import DataLoader

from codeplay_lightning.config import PPOConfig
from codeplay_lightning.setter import SetterPPOModule

SCALE = 2.0**4  # fp16's gradient scale: scaled norms are 16 times the true ones, yet no gradient here overflows


def new_module(model, frozen: torch.nn.Module | None = None) -> SetterPPOModule:
    torch.manual_seed(1)  # the value head's initialisation
    return SetterPPOModule(
        policy=copy.deepcopy(model),
        frozen=frozen,
        ppo=PPOConfig(lr=1e-2),
        temperature=0.8,
        value_hidden=16,
        detach_value_trunk=True,
        identity={},
    )


def tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    return [*model.parameters(), *model.buffers()]


def minibatch(module: SetterPPOModule, rows: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
    """Right-padded actions of random lengths behind a random prompt; the old log-probs and values are the
    module's own (the ratio starts at 1, as in a real first minibatch)."""
    generator = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(3, 90, (10,), generator=generator)
    lengths = torch.randint(1, 7, (rows,), generator=generator)
    mask = (torch.arange(int(lengths.max()))[None] < lengths[:, None]).float()  # (B, T)
    action_ids = torch.randint(3, 90, mask.shape, generator=generator) * mask.long()
    with torch.no_grad():
        logprobs, values, _ = module.score(prompt_ids, action_ids, mask)
    return {
        "prompt_ids": prompt_ids,
        "action_ids": action_ids,
        "mask": mask,
        "old_logprobs": logprobs,
        "old_values": values,
        "advantages": torch.randn(mask.shape, generator=generator) * mask,
        "returns": torch.randn(mask.shape, generator=generator) * mask,
    }


def empty(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The minibatch of a rank with no puzzle in it: no rows (the shared prompt stays)."""
    return {name: value if name == "prompt_ids" else value[:0, :0] for name, value in batch.items()}


def fit(module: SetterPPOModule, batches: list[dict], **trainer_options) -> L.Trainer:
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
        **trainer_options,
    )
    trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None))
    return trainer


def adam_steps(trainer: L.Trainer) -> set[int]:
    return {int(state["step"]) for state in trainer.optimizers[0].state.values()}


def test_the_frozen_copy_follows_every_move_but_is_neither_trained_nor_saved(tiny_llama):
    """Lightning moves the module with `module.to(device)`: the frozen copy (KL reference and Solver) must go too."""
    frozen = copy.deepcopy(tiny_llama).requires_grad_(False).to(torch.bfloat16)  # as train._trainable in bf16
    module = new_module(tiny_llama, frozen)
    module.to(torch.float64)
    assert {t.dtype for t in tensors(frozen) if t.is_floating_point()} == {torch.float64}
    module.to("meta")
    assert {t.device.type for t in tensors(frozen)} == {"meta"}
    assert module.frozen is frozen  # moved in place: the Solver's LLM holds the same object
    assert not any(parameter.requires_grad for parameter in frozen.parameters())
    assert not {id(t) for t in tensors(frozen)} & {id(parameter) for parameter in module.parameters()}
    assert {name.split(".")[0] for name in module.state_dict()} == {"policy", "value_head"}


def test_the_frozen_weights_are_the_frozen_copy_or_the_lora_policy_with_its_adapters_off(tiny_llama):
    """One rule for the KL reference and the Solver: the frozen copy as it is; with LoRA (no copy), the policy
    computes with its base weights until the context exits."""
    from peft import LoraConfig, get_peft_model

    frozen = copy.deepcopy(tiny_llama).requires_grad_(False)
    with new_module(tiny_llama, frozen).frozen_weights() as weights:
        assert weights is frozen
    lora = get_peft_model(copy.deepcopy(tiny_llama), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    for name, parameter in lora.named_parameters():
        if "lora_B" in name:  # B starts at 0: adapters that change nothing could not be told off from on
            torch.nn.init.normal_(parameter)
    module = new_module(lora)
    ids = torch.arange(3, 15)[None]
    with torch.no_grad():
        base, adapted = tiny_llama(ids).logits, module.policy(ids).logits
        with module.frozen_weights() as weights:
            assert weights is module.policy
            torch.testing.assert_close(weights(ids).logits, base)
        torch.testing.assert_close(module.policy(ids).logits, adapted)
    assert not torch.allclose(adapted, base)


class StrictSum:
    """`strategy.reduce` as NCCL would take it: refused unless the tensor is on the module's device. The
    module sits on `meta` (no values), so the sum handed back is what the ranks hold in all, `ranks_tokens`."""

    def __init__(self, module: SetterPPOModule, ranks_tokens: float):
        self.module, self.ranks_tokens, self.devices = module, ranks_tokens, []

    def reduce(self, tensor: torch.Tensor, reduce_op: str) -> torch.Tensor:
        self.devices.append(tensor.device)
        if tensor.device != self.module.device:
            raise RuntimeError(f"a collective got a tensor on {tensor.device}, the module is on {self.module.device}")
        assert reduce_op == "sum"
        return torch.tensor(self.ranks_tokens)


class CountingOptimizer:
    def __init__(self):
        self.steps = 0

    def step(self, closure) -> None:
        closure()
        self.steps += 1


@pytest.mark.parametrize("ranks_tokens, steps", [(5.0, 1), (0.0, 0)])
def test_every_collective_gets_its_tensor_on_the_modules_device(tiny_llama, monkeypatch, ranks_tokens, steps):
    """This rank's minibatch is empty; the other rank's holds `ranks_tokens`: a step only if that is > 0."""
    module = new_module(tiny_llama)
    batch = empty(minibatch(module))
    module.to("meta")
    strategy, optimizer = StrictSum(module, ranks_tokens), CountingOptimizer()
    monkeypatch.setattr(module, "_trainer", SimpleNamespace(strategy=strategy, world_size=2, current_epoch=0))
    monkeypatch.setattr(module, "log_dict", lambda *args, **kwargs: None)  # Lightning's logging needs a Trainer
    module.optimizer_step(0, 0, optimizer, lambda: module.training_step(batch, 0))
    assert strategy.devices == [torch.device("meta")]
    assert optimizer.steps == steps


def test_fp16_unscales_before_the_clip_and_steps_but_not_on_an_empty_minibatch(tiny_llama, monkeypatch):
    norms = []  # the global gradient norm each clip saw
    clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *args: norms.append(float(clip(*args))))
    module = new_module(tiny_llama)
    full = minibatch(module)
    fit(module, [full], precision="32-true")
    (fp32_norm,) = norms

    norms.clear()
    module = new_module(tiny_llama)
    before = copy.deepcopy(module.state_dict())
    scaler = torch.amp.GradScaler("cpu", init_scale=SCALE)
    trainer = fit(
        module,
        [full, empty(full), minibatch(module, seed=1)],
        plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)],
    )
    assert not trainer.optimizers[0].defaults["fused"]  # Lightning unscales before the clip only if unfused
    assert len(norms) == 2 and norms[0] == pytest.approx(fp32_norm, rel=0.05)  # not SCALE times that
    assert adam_steps(trainer) == {2}  # the empty minibatch did not step
    assert scaler.get_scale() == SCALE  # no overflow was found: both steps were taken
    assert all(not torch.equal(value, module.state_dict()[name]) for name, value in before.items())


def test_an_empty_last_micro_batch_keeps_the_accumulation_windows_step(tiny_llama):
    """Windows of 2 micro-batches: (full, empty) steps on the full one's gradient; (empty, empty) does not."""
    module = new_module(tiny_llama)
    full = minibatch(module)
    before = copy.deepcopy(module.state_dict())
    trainer = fit(module, [full, empty(full), empty(full), empty(full)], accumulate_grad_batches=2)
    assert adam_steps(trainer) == {1}
    assert not torch.equal(before["value_head.mlp.0.weight"], module.state_dict()["value_head.mlp.0.weight"])
