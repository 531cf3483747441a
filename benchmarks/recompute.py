"""A PPO minibatch's forward + backward with its activations kept and recomputed (`trainer.recompute_activations`),
side by side in one process: seconds, alternating `ROUNDS` times, and the bytes saved for the backward.

The workload: the warm start under the run's precision (bf16 autocast where `auto` picks it), the Setter's sampling
prompt at the CPU scale's few-shot count, and as actions the first `ROWS` puzzles of the published seed 0's
`balanced` run (its raw records; a minibatch at the CPU scale is about 23 puzzles). The loss sums every action's
log-prob and entropy, so the backward runs through every token."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

RECORDS = Path("docs/results/records/sweep/seed-0/balanced/puzzles.jsonl.gz")
ROWS, ROUNDS = 23, 3


def bench_recompute() -> dict:
    import torch

    from codeplay_lightning.config import WARMSTART_ALIAS, RolloutConfig, TrainerConfig
    from codeplay_lightning.devices import resolved_precision
    from codeplay_lightning.models import load_causal_lm
    from codeplay_lightning.models.scoring import score_actions
    from codeplay_lightning.puzzles import fewshot_puzzles
    from codeplay_lightning.setter.rollout import setter_sampling_prompt

    if not RECORDS.is_file():
        raise ValueError(f"{RECORDS} not found: run the benchmarks from the repository root")
    model, tokenizer = load_causal_lm(WARMSTART_ALIAS)
    model.train()
    precision = resolved_precision(TrainerConfig())
    rollout = RolloutConfig()
    prompt = torch.tensor(
        tokenizer(setter_sampling_prompt(tokenizer, fewshot_puzzles()[: rollout.fewshot]))["input_ids"]
    )
    records = [json.loads(line) for line in gzip.open(RECORDS, "rt")]
    rows = [tokenizer(record["puzzle"] + "\n\n", add_special_tokens=False)["input_ids"] for record in records][:ROWS]
    actions = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    mask = torch.zeros(actions.shape)
    for row, ids in enumerate(rows):
        actions[row, : len(ids)], mask[row, : len(ids)] = torch.tensor(ids), 1

    def step(recompute: bool) -> int:
        """One forward + backward; the bytes of activations its forward saved for the backward."""
        outputs = []

        def forward() -> None:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision.startswith("bf16")):
                outputs.append(score_actions(model, prompt, actions, mask, rollout.temperature, recompute=recompute))

        saved = saved_activation_bytes([model], forward)
        logprobs, _, entropies = outputs[0]
        (logprobs.sum() + entropies.sum()).backward()
        model.zero_grad(set_to_none=True)
        return saved

    step(False)  # warm-up
    seconds: dict[bool, list[float]] = {False: [], True: []}
    saved_bytes = {}
    for _ in range(ROUNDS):
        for recompute in (False, True):
            started = time.perf_counter()
            saved_bytes[recompute] = step(recompute)
            seconds[recompute].append(time.perf_counter() - started)
    return {
        "precision": precision,
        "prompt_tokens": len(prompt),
        "action_tokens": int(mask.sum()),
        "kept_seconds": seconds[False],
        "recomputed_seconds": seconds[True],
        "kept_saved_gib": saved_bytes[False] / 2**30,
        "recomputed_saved_gib": saved_bytes[True] / 2**30,
        "time_ratio": min(seconds[True]) / min(seconds[False]),
    }


def saved_activation_bytes(modules: list, forward) -> int:
    """Bytes `forward()` saves for the backward, the modules' weights left out."""
    import torch

    weights = {parameter.data_ptr() for module in modules for parameter in module.parameters()}
    saved = []

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.data_ptr() not in weights:
            saved.append(tensor.numel() * tensor.element_size())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        forward()
    return sum(saved)


if __name__ == "__main__":
    print(json.dumps(bench_recompute(), indent=1))
