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
from codeplay_lightning.ppo import logprobs_and_entropy, masked_mean, policy_loss, value_loss

PACKING_ATTENTION = ("sdpa", "eager")  # the attentions that take a custom 4D mask
PACK_TOKENS = 256  # action tokens per packed sequence in scoring (a longer row gets a pack of its own): 12% faster
# than 512 on 2 cores (1,375 tokens behind a 287-token prompt), since a pack's tokens attend to each other
METRICS = ("ppo/policy_loss", "ppo/value_loss", "ppo/entropy", "ppo/approx_kl", "ppo/clip_frac", "ppo/loss")


class ValueHead(nn.Module):
    """A separate, untrained MLP on the LM's last hidden states, as in the paper."""

    def __init__(self, hidden_size: int, width: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(hidden_size, width), nn.Tanh(), nn.Linear(width, 1))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T)
        return self.mlp(hidden.float()).squeeze(-1)


def pack_rows(counts: list[int], budget: int) -> tuple[list[int], list[int]]:
    """(pack, offset in it) of each row, in row order: consecutive rows share a pack while their
    tokens (`counts`) fit in `budget`; a longer row has a pack of its own."""
    packs, offsets = [], []
    pack, used = -1, budget + 1
    for count in counts:
        if used + count > budget:
            pack, used = pack + 1, 0
        packs.append(pack)
        offsets.append(used)
        used += count
    return packs, offsets


def balanced_budget(counts: list[int], most: int) -> int:
    """A budget that packs `counts` into no more packs than `most` does, with the fullest pack as
    empty as it can be: padding every pack to the fullest then wastes little (850 tokens under 512:
    two packs of about 425, not 512 and 338)."""
    n_packs = pack_rows(counts, most)[0][-1] + 1
    budget = -(-sum(counts) // n_packs)  # ceil
    while pack_rows(counts, budget)[0][-1] + 1 > n_packs:  # at most max(counts) raises
        budget += 1
    return budget


def packed_attention_mask(segments: torch.Tensor, positions: torch.Tensor, prompt_length: int, config):
    """(G, 1, L, P + L) mask for G packs of L tokens behind a P-token cached prompt: token q sees the
    prompt and the tokens of its own segment (row) up to itself; padding (segment -1) sees the
    prompt only. Boolean for SDPA; additive for eager."""
    same_row = (segments[:, :, None] == segments[:, None, :]) & (segments[:, None, :] >= 0)  # (G, L, L)
    causal = positions[:, None, :] <= positions[:, :, None]
    prompt = same_row.new_ones(*segments.shape, prompt_length)  # (G, L, P)
    sees = torch.cat([prompt, same_row & causal], dim=2)[:, None]
    if config._attn_implementation == "sdpa":
        return sees
    return torch.zeros(sees.shape, device=sees.device).masked_fill(~sees, torch.finfo(torch.float32).min)


class SetterPPOModule(L.LightningModule):
    """`policy` is trained (all of it, or its LoRA adapters); `frozen` (None with LoRA: the adapter-
    disabled policy) is the KL reference and the Solver's model, kept out of checkpoints.
    `rewarded=False` (both reward weights 0: the paper's `none` baseline) skips the PPO pass and never
    steps the optimizer: with no reward, what remains is value-head noise, and the pass is half an iteration."""

    def __init__(self, policy: nn.Module, frozen: nn.Module | None, ppo: PPOConfig, temperature: float,
                 value_hidden: int, detach_value_trunk: bool, identity: dict, rewarded: bool = True):
        super().__init__()
        if policy.config._attn_implementation not in PACKING_ATTENTION:
            raise ValueError(f"PPO scoring packs rows behind the prompt with a custom attention mask, which "
                             f"{policy.config._attn_implementation!r} attention does not take; load the model "
                             f"with one of {', '.join(PACKING_ATTENTION)}")
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
        """Log-probs, values V(s_t) and entropies of right-padded actions (B, T) after the shared prompt
        (P,), each (B, T), 0 at padding. Log-probs and entropies are those of the sampling distribution
        (logits divided by the temperature), so the entropy bonus and metric are at that temperature
        too. `model` (the reference) scores without a value head (values None).

        The prompt runs once, at batch 1, and the rows' actions run behind it packed into equally full
        sequences of at most about PACK_TOKENS tokens, each token attending to the prompt and to its own
        row's earlier actions only: the same result as one full forward per row over prompt + actions, gradient
        included (the prompt's keys and values depend on the weights and stay in the graph), padding
        only at the ends of packs, and the vocabulary-wide tensors only at real tokens. Packs, not one
        sequence: attention's work grows with the pack's length times the prompt's plus its own."""
        want_values = model is None
        model = model or self.policy
        batch = len(action_ids)
        prompt = model(input_ids=prompt_ids[None], use_cache=True, output_hidden_states=want_values,
                       logits_to_keep=1)
        # a row's first action is predicted by the prompt's last position, its others by its actions but the
        # last: positions are the B first-action ones (the prompt's, repeated), then the Q packed ones
        logits = [prompt.logits[0].expand(batch, -1)]  # (B, V)
        hidden = [prompt.hidden_states[-1][0, -1:].expand(batch, -1)] if want_values else []  # (B, H)
        lengths = mask.sum(dim=1).long()  # (B,)
        feeds = torch.arange(mask.shape[1], device=mask.device) < (lengths - 1)[:, None]  # (B, T)
        if feeds.any():
            counts = (lengths - 1).clamp(min=0)  # (B,) fed tokens per row
            fed = counts.tolist()
            row_packs, row_offsets = (torch.tensor(column, device=mask.device)  # (B,) each
                                      for column in pack_rows(fed, balanced_budget(fed, PACK_TOKENS)))
            n_packs, pack_length = int(row_packs[-1]) + 1, int((row_offsets + counts).max())
            positions = feeds.long().cumsum(dim=1)[feeds] - 1  # (Q,): each fed token's place in its row
            segments = torch.arange(batch, device=mask.device).repeat_interleave(counts)  # (Q,)
            slots = (row_packs * pack_length + row_offsets)[segments] + positions  # (Q,) in G * L
            packed = {name: torch.full((n_packs * pack_length,), fill, dtype=torch.long, device=mask.device)
                      .index_put_((slots,), values).view(n_packs, pack_length)
                      for name, fill, values in (("ids", 0, action_ids[feeds]), ("positions", 0, positions),
                                                 ("segments", -1, segments))}
            cache = prompt.past_key_values
            cache.reorder_cache(torch.zeros(n_packs, dtype=torch.long, device=mask.device))  # the prompt per pack
            rows = model(input_ids=packed["ids"], past_key_values=cache,
                         position_ids=len(prompt_ids) + packed["positions"], output_hidden_states=want_values,
                         attention_mask=packed_attention_mask(packed["segments"], packed["positions"],
                                                              len(prompt_ids), model.config))
            logits.append(rows.logits.flatten(0, 1)[slots])  # (Q, V)
            if want_values:
                hidden.append(rows.hidden_states[-1].flatten(0, 1)[slots])  # (Q, H)
        predicted = torch.zeros_like(feeds)  # (B, T): the real actions after each row's first
        predicted[:, 1:] = feeds[:, :-1]
        targets = torch.cat([action_ids[:, 0], action_ids[predicted]])  # (B + Q,)
        per_position = list(logprobs_and_entropy(torch.cat(logits), targets, self.temperature))  # (B + Q,) each
        if want_values:
            hidden = torch.cat(hidden)  # (B + Q, H): the state before each action
            per_position.append(self.value_head(hidden.detach() if self.detach_value_trunk else hidden))
        # back to (B, T): each real action's position, padding at 0 (masked out)
        source = torch.zeros(mask.shape, dtype=torch.long, device=mask.device)
        source[:, 0] = torch.arange(batch, device=mask.device)
        source[predicted] = torch.arange(batch, batch + int(predicted.sum()), device=mask.device)
        logprobs, entropy, *values = (torch.where(mask.bool(), at_position[source], 0.0)
                                      for at_position in per_position)
        return logprobs, values[0] if want_values else None, entropy

    def training_step(self, batch: dict[str, torch.Tensor], batch_index: int) -> torch.Tensor:
        mask = batch["mask"]
        self._batch_tokens = float(mask.sum()) if mask.numel() else 0.0
        if not self.rewarded:  # every rank alike: a zero loss whose backward is all DDP joins
            return self._zero_loss()
        # A minibatch is whole puzzles (sequences), not a token count as in RL4LMs: see docs/training.md
        self.log_dict({"ppo/minibatch_sequences": float(len(mask)), "ppo/minibatch_tokens": self._batch_tokens},
                      on_step=False, on_epoch=True, batch_size=1, sync_dist=True)
        if mask.numel() == 0:  # a rank with no puzzle this iteration still steps with the others
            if self.trainer.world_size > 1:  # and joins their metrics' all-reduces (sync_dist), or they hang
                self._log_metrics(dict.fromkeys(METRICS, 0.0), batch_size=0)  # weight 0 in the epoch means
            return self._zero_loss()
        logprobs, values, entropies = self.score(batch["prompt_ids"], batch["action_ids"], mask)
        policy = policy_loss(logprobs, batch["old_logprobs"], batch["advantages"], mask, self.ppo.clip_range)
        v_loss = value_loss(values, batch["old_values"], batch["returns"], mask, self.ppo.clip_range_value)
        entropy = masked_mean(entropies, mask)
        loss = policy.pg_loss + self.ppo.value_coef * v_loss
        if self.ppo.entropy_coef:  # a zero bonus would still cost a backward pass over the vocabulary
            loss = loss - self.ppo.entropy_coef * entropy
        self._log_metrics(dict(zip(METRICS, (policy.pg_loss, v_loss, entropy, policy.approx_kl, policy.clip_frac,
                                             loss))), batch_size=len(mask))
        return loss

    def _zero_loss(self) -> torch.Tensor:
        return sum(parameter.sum() * 0 for parameter in self._trainable())

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
        # fused: one kernel, 7x faster than foreach on CPU; fp16's gradient scaler needs the unfused step
        fused = getattr(self.trainer.precision_plugin, "scaler", None) is None
        return torch.optim.Adam(self._trainable(), lr=self.ppo.lr, fused=fused)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip the global norm here: Lightning refuses to clip for a fused optimizer under any mixed
        precision, though only fp16's scaled gradients (then unfused and already unscaled) would need care."""
        if gradient_clip_val:
            torch.nn.utils.clip_grad_norm_(self._trainable(), gradient_clip_val)

    def _trainable(self) -> list[nn.Parameter]:
        return [parameter for parameter in self.parameters() if parameter.requires_grad]
