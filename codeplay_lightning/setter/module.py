"""`SetterPPOModule`: the Setter LM plus a value head, trained with clipped PPO.

It only orchestrates: the maths is `codeplay_lightning.ppo`, the data comes from the rollout
callback through the datamodule. Per minibatch, the shared prompt runs once and every row's
actions attend to it.
"""

from __future__ import annotations

import lightning as L
import torch
from torch import nn

from codeplay_lightning.config import PPOConfig
from codeplay_lightning.ppo import entropy_from_logits, logprobs_from_logits, policy_loss, value_loss

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
    `rewarded=False` (both reward weights 0: the paper's `none` baseline) computes the losses and
    metrics but never steps the optimizer: with no reward, what remains is value-head noise."""

    def __init__(self, policy: nn.Module, frozen: nn.Module | None, ppo: PPOConfig, temperature: float,
                 value_hidden: int, detach_value_trunk: bool, identity: dict, rewarded: bool = True):
        super().__init__()
        self.rewarded = rewarded
        self._batch_tokens = 0.0  # real action tokens in this rank's current minibatch
        self.identity = identity  # what a checkpoint must have been made with to be resumed here
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

    def score(self, prompt_ids: torch.Tensor, action_ids: torch.Tensor, mask: torch.Tensor,
              model: nn.Module | None = None):
        """Log-probs, values V(s_t) and logits of right-padded actions (B, T) after the shared prompt
        (P,): (B, T), (B, T), (B, T, V). Log-probs and logits are those of the sampling distribution
        (logits divided by the temperature), so the entropy bonus and metric are at that temperature
        too. `model` (the reference) scores without a value head.

        The prompt runs once, at batch 1, and every row attends to its keys and values: the same
        result as running each row's prompt + actions, gradient included (the prompt's keys and
        values depend on the weights and stay in the graph), for a fraction of the cost."""
        want_values = model is None
        model = model or self.policy
        prompt = model(input_ids=prompt_ids[None], use_cache=True, output_hidden_states=want_values,
                       logits_to_keep=1)
        logits, hidden = [prompt.logits.expand(len(action_ids), -1, -1)], []  # the first action's (B, 1, V)
        if want_values:
            hidden.append(prompt.hidden_states[-1][:, -1:].expand(len(action_ids), -1, -1))  # (B, 1, H): the state s_0
        if action_ids.shape[1] > 1:  # the other actions are predicted from the actions before them
            cache = prompt.past_key_values
            cache.batch_repeat_interleave(len(action_ids))
            rows = model(input_ids=action_ids[:, :-1], past_key_values=cache, output_hidden_states=want_values,
                         attention_mask=torch.cat([mask.new_ones(len(mask), len(prompt_ids)), mask[:, :-1]], dim=1))
            logits.append(rows.logits)
            if want_values:
                hidden.append(rows.hidden_states[-1])
        logits = torch.cat(logits, dim=1).float() / self.temperature  # (B, T, V)
        logprobs = logprobs_from_logits(logits, action_ids, 1.0)
        if not want_values:
            return logprobs, None, logits
        hidden = torch.cat(hidden, dim=1)  # (B, T, H): the state before each action
        values = self.value_head(hidden.detach() if self.detach_value_trunk else hidden)
        return logprobs, values, logits

    def training_step(self, batch: dict[str, torch.Tensor], batch_index: int) -> torch.Tensor:
        mask = batch["mask"]
        self._batch_tokens = float(mask.sum()) if mask.numel() else 0.0
        # A minibatch is whole puzzles (sequences), not a token count as in RL4LMs: see docs/training.md
        self.log_dict({"ppo/minibatch_sequences": float(len(mask)), "ppo/minibatch_tokens": self._batch_tokens},
                      on_step=False, on_epoch=True, batch_size=1, sync_dist=True)
        if mask.numel() == 0:  # a rank with no puzzle this iteration still steps with the others
            loss = sum(parameter.sum() * 0 for parameter in self.parameters() if parameter.requires_grad)
            if self.trainer.world_size > 1:  # and joins their metrics' all-reduces (sync_dist), or they hang
                self._log_metrics(dict.fromkeys(METRICS, 0.0), batch_size=0)  # weight 0 in the epoch means
            return loss
        logprobs, values, logits = self.score(batch["prompt_ids"], batch["action_ids"], mask)
        policy = policy_loss(logprobs, batch["old_logprobs"], batch["advantages"], mask, self.ppo.clip_range)
        v_loss = value_loss(values, batch["old_values"], batch["returns"], mask, self.ppo.clip_range_value)
        entropy = entropy_from_logits(logits, mask)
        loss = policy.pg_loss + self.ppo.value_coef * v_loss - self.ppo.entropy_coef * entropy
        self._log_metrics(dict(zip(METRICS, (policy.pg_loss, v_loss, entropy, policy.approx_kl, policy.clip_frac,
                                             loss))), batch_size=len(mask))
        return loss

    def _log_metrics(self, metrics: dict, batch_size: int) -> None:
        """Every rank logs the same keys in the same order at every step: each is all-reduced. One value
        per iteration (the mean over its minibatches), under the names docs/training.md lists."""
        self.log_dict(metrics, on_step=False, on_epoch=True, batch_size=batch_size, sync_dist=True)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["codeplay"] = self.identity

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if checkpoint.get("codeplay") != self.identity:
            raise ValueError(f"the checkpoint was made for {checkpoint.get('codeplay')}, not {self.identity}")

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer, optimizer_closure=None) -> None:
        """Step only when some rank's minibatch has a real token (an all-empty minibatch would still
        move the weights through Adam's momentum) and there is a reward to learn from. The closure
        (training step and backward) runs on every rank regardless: DDP all-reduces in it."""
        optimizer_closure()
        tokens = self.trainer.strategy.reduce(torch.tensor(self._batch_tokens), reduce_op="sum")
        if self.rewarded and float(tokens) > 0:
            optimizer.step()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        trainable = [parameter for parameter in self.parameters() if parameter.requires_grad]
        return torch.optim.Adam(trainable, lr=self.ppo.lr)
