"""`SetterPPOModule`: the Setter LM plus a value head, trained with clipped PPO.

It only orchestrates: the maths is `codeplay_lightning.ppo`, the scoring forward
`codeplay_lightning.models.scoring`, the data comes from the rollout callback through the datamodule.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import lightning as L
import torch
from torch import nn

from codeplay_lightning.config import PPOConfig
from codeplay_lightning.models.architectures import attention_paths
from codeplay_lightning.models.scoring import score_actions, vocabulary_projection
from codeplay_lightning.ppo import masked_mean, policy_loss, value_loss
from codeplay_lightning.setter.checkpoint import IDENTITY_KEY

METRICS = ("ppo/policy_loss", "ppo/value_loss", "ppo/entropy", "ppo/approx_kl", "ppo/clip_frac", "ppo/loss")


class ValueHead(nn.Module):
    """A separate, untrained MLP on the LM's last hidden states, as in the paper."""

    def __init__(self, hidden_size: int, width: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(hidden_size, width), nn.Tanh(), nn.Linear(width, 1))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T)
        return self.mlp(hidden.float()).squeeze(-1)


class SetterPPOModule(L.LightningModule):
    """`policy` is trained (all of it, or its LoRA adapters); `frozen` (None with LoRA: the adapter-
    disabled policy) is the KL reference and the Solver's model, kept out of checkpoints.
    `rewarded=False` (both reward weights 0: the paper's `none` baseline) skips the PPO pass and never
    steps the optimizer: with no reward, what remains is value-head noise, and the pass is half an iteration."""

    def __init__(
        self,
        *,
        policy: nn.Module,
        frozen: nn.Module | None,
        ppo: PPOConfig,
        temperature: float,
        value_hidden: int,
        detach_value_trunk: bool,
        identity: dict,
        rewarded: bool = True,
        recompute_activations: bool = False,
    ):
        super().__init__()
        attention_paths(policy)  # refuses a model type no test has checked
        vocabulary_projection(policy)  # and an output layer scoring cannot apply itself, before any sampling
        self.rewarded, self.recompute_activations = rewarded, recompute_activations
        self._window_tokens = 0.0  # real action tokens of all ranks in the accumulation window under way
        self.identity = identity  # what the run is (`config.run_identity`): its checkpoints carry it
        self.policy = policy
        self.value_head = ValueHead(policy.config.hidden_size, value_hidden)
        self._frozen = (frozen,)  # a tuple hides it from nn.Module: not trained, not saved
        self.ppo, self.temperature, self.detach_value_trunk = ppo, temperature, detach_value_trunk
        for module in self.policy.modules():  # dropout off: PPO's ratio must compare like with like
            if isinstance(module, nn.Dropout):
                module.p = 0.0
        self.policy.train()  # (loaded in eval mode; with dropout off the two modes compute the same)

    @property
    def frozen(self) -> nn.Module | None:
        return self._frozen[0]

    @contextlib.contextmanager
    def frozen_weights(self) -> Iterator[nn.Module]:
        """The model computing with the frozen weights (the KL reference's, and the Solver's with
        `solver.llm=frozen`): the frozen copy, or the LoRA policy with its adapters disabled until the exit."""
        if self.frozen is not None:
            yield self.frozen
        else:
            with self.policy.disable_adapter():
                yield self.policy

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> SetterPPOModule:
        """Every move and cast (`to`, `cuda`, `half`, ... all end here) reaches the frozen copy too, in place
        (the Solver's LLM holds the same object): Lightning moves the module to its device with `module.to`,
        and the copy, hidden from nn.Module so that it is neither trained nor saved, would stay behind."""
        super()._apply(fn, recurse)
        if recurse and self.frozen is not None:
            self.frozen._apply(fn, recurse)
        return self

    def sum_over_ranks(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over every DDP rank (itself in one process), back on its own device. The collective
        gets a copy on this module's device: NCCL, Lightning's backend on CUDA, takes no CPU tensor."""
        return self.trainer.strategy.reduce(tensor.to(self.device, copy=True), reduce_op="sum").to(tensor.device)

    def score(
        self, prompt_ids: torch.Tensor, action_ids: torch.Tensor, mask: torch.Tensor, model: nn.Module | None = None
    ):
        """Log-probs, values V(s_t) and entropies (B, T) of right-padded actions (B, T) after the shared
        prompt (P,), at the sampling temperature (`score_actions`). `model` (the reference) scores without
        a value head (values None)."""
        if model is not None:
            return score_actions(model, prompt_ids, action_ids, mask, self.temperature)

        def values(hidden: torch.Tensor) -> torch.Tensor:  # (N, H) -> (N,)
            return self.value_head(hidden.detach() if self.detach_value_trunk else hidden)

        return score_actions(
            self.policy, prompt_ids, action_ids, mask, self.temperature, values, recompute=self.recompute_activations
        )

    def training_step(self, batch: dict[str, torch.Tensor], batch_index: int) -> torch.Tensor:
        mask = batch["mask"]  # (B, T)
        if not self.rewarded:  # every rank alike: a zero loss whose backward is all DDP joins
            return self._zero_loss()
        tokens = self.sum_over_ranks(mask.sum())  # all ranks' real tokens in this minibatch
        self._window_tokens += float(tokens)
        # A minibatch is whole puzzles (sequences), not a token count as in RL4LMs: see docs/training.md
        self.log_dict(  # "step": Lightning logs the iteration's metrics at iteration k (1 to N), as the rollout's
            {
                "ppo/minibatch_sequences": float(len(mask)),
                "ppo/minibatch_tokens": float(mask.sum()),
                "step": float(self.current_epoch + 1),
            },
            on_step=False,
            on_epoch=True,
            batch_size=1,
            sync_dist=True,
        )
        weight = int(tokens > 0)  # in the iteration's means: 0 if no rank has a token
        if mask.numel() == 0:  # a rank with no puzzle this iteration still steps with the others
            if self.trainer.world_size > 1:  # and joins their metrics' all-reduces (sync_dist), or they hang
                self._log_metrics(dict.fromkeys(METRICS, 0.0), weight)  # its share of every token sum: 0
            return self._zero_loss()
        # every token sum over the ranks' mean token count: DDP's average of the ranks' gradients is then the
        # gradient of the mean over all ranks' tokens, each token counting alike whichever rank holds it
        per_rank = tokens / self.trainer.world_size
        logprobs, values, entropies = self.score(batch["prompt_ids"], batch["action_ids"], mask)
        policy = policy_loss(
            logprobs, batch["old_logprobs"], batch["advantages"], mask, self.ppo.clip_range, tokens=per_rank
        )
        v_loss = value_loss(
            values, batch["old_values"], batch["returns"], mask, self.ppo.clip_range_value, tokens=per_rank
        )
        entropy = masked_mean(entropies, mask, tokens=per_rank)
        loss = policy.pg_loss + self.ppo.value_coef * v_loss
        if self.ppo.entropy_coef:  # a zero bonus would still cost a backward pass over the vocabulary
            loss = loss - self.ppo.entropy_coef * entropy
        self._log_metrics(
            dict(zip(METRICS, (policy.pg_loss, v_loss, entropy, policy.approx_kl, policy.clip_frac, loss))), weight
        )
        return loss

    def _zero_loss(self) -> torch.Tensor:
        return sum(parameter.sum() * 0 for parameter in self._trainable())

    def _log_metrics(self, metrics: dict, weight: int) -> None:
        """Every rank logs the same keys in the same order at every step: each is all-reduced. One value
        per iteration, under the names docs/training.md lists: the mean over its minibatches of each one's
        mean over all ranks' tokens. A rank logs its share of the token sums (all ranks' mean is then the
        mean over their tokens) with the same `weight` as every other rank: 1, or 0 when no rank has a token."""
        self.log_dict(metrics, on_step=False, on_epoch=True, batch_size=weight, sync_dist=True)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[IDENTITY_KEY] = self.identity

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer, optimizer_closure=None) -> None:
        """Step only when some rank's minibatch in the accumulation window has a real token (an all-empty
        window would still move the weights through Adam's momentum) and there is a reward to learn from.
        The closure (training step and backward) runs on every rank regardless: DDP all-reduces in it. The
        step gets a closure that returns its loss, so Lightning's precision plugin treats it as any step:
        fp16's scaler unscales the gradients before the clip, then steps (with no closure it takes the
        backward for skipped, clips the scaled gradients and never steps)."""
        loss = optimizer_closure()
        window_tokens, self._window_tokens = self._window_tokens, 0.0
        if self.rewarded and window_tokens > 0:
            optimizer.step(closure=lambda: loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # fused: one kernel, 7x faster than foreach on CPU. Not under fp16's scaler: Lightning unscales before
        # the clip only for an optimizer that does not unscale in its own step, as a fused one does
        fused = getattr(self.trainer.precision_plugin, "scaler", None) is None
        return torch.optim.Adam(self._trainable(), lr=self.ppo.lr, fused=fused)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip the global norm here: Lightning refuses to clip for a fused optimizer under any mixed
        precision, though only fp16's scaled gradients would need care, and those are unscaled by now
        (the optimizer is then unfused and Lightning's scaler unscales it before calling this)."""
        if gradient_clip_val:
            torch.nn.utils.clip_grad_norm_(self._trainable(), gradient_clip_val)

    def _trainable(self) -> list[nn.Parameter]:
        return [parameter for parameter in self.parameters() if parameter.requires_grad]
