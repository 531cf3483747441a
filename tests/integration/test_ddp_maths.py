"""Two CPU ranks (gloo) against one process on the same puzzles, through `build_buffer` and the module's
training step: the gradient DDP applies (the mean of the ranks' gradients) and the whitened advantages must be
one process's, each token counting alike whichever rank holds it, however unevenly the ranks hold them; the
explained variance every rank logs is one process's too. The ranks are processes of their own."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy, Strategy
from support import random_puzzles

from codeplay_lightning.config import PPOConfig, TrainConfig
from codeplay_lightning.setter import SetterPPOModule, build_buffer
from codeplay_lightning.setter.rollout import PPOBuffer

LENGTHS = [2, 3, 30, 25, 41, 18, 33]  # actions per puzzle
RANK_ROWS = [slice(0, 2), slice(2, None)]  # rank 0: 5 tokens, rank 1: 147
PROMPT_IDS = torch.arange(3, 23)

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo"
)


def gradient_and_buffer(
    model, strategy: Strategy, world_size: int, rows: slice = slice(None)
) -> tuple[dict[str, torch.Tensor], PPOBuffer, dict[str, float]]:
    """This rank's gradient of its loss on its puzzles `rows`, scored as one minibatch; its buffer and metrics."""
    torch.manual_seed(1)  # the value head's initialisation
    config = TrainConfig(ppo=PPOConfig(n_minibatches=1, ppo_epochs=1))
    module = SetterPPOModule(
        policy=copy.deepcopy(model),
        frozen=None,
        ppo=config.ppo,
        temperature=0.8,
        value_hidden=16,
        detach_value_trunk=True,
        identity={},
    )
    module._trainer = SimpleNamespace(strategy=strategy, world_size=world_size, current_epoch=0)
    module.log_dict = lambda *args, **kwargs: None  # Lightning's logging needs a Trainer
    episodes, scored = (puzzle[rows] for puzzle in random_puzzles(LENGTHS))
    first_epoch = [torch.arange(len(episodes))]
    with torch.no_grad():
        buffer, metrics = build_buffer(module, PROMPT_IDS, episodes, scored, config, first_epoch)
    module.training_step(buffer.minibatch(first_epoch[0]), 0).backward()
    return {name: parameter.grad for name, parameter in module.named_parameters()}, buffer, metrics


def _rank(rank: int, out: Path) -> None:
    """One rank, in a process of its own. The model is rebuilt from its config and weights: a pickled
    transformers model loses its hidden-state hooks."""
    saved = torch.load(out / "model.pt", weights_only=False)
    model = saved["class"](saved["config"])
    model.load_state_dict(saved["weights"])
    dist.init_process_group("gloo", init_method=f"file://{out / 'rendezvous'}", rank=rank, world_size=2)
    try:
        gradient, buffer, metrics = gradient_and_buffer(model, DDPStrategy(), 2, RANK_ROWS[rank])
        for grad in gradient.values():  # what DDP does to the gradients: their mean over the ranks
            dist.all_reduce(grad)
            grad /= 2
        torch.save(
            {"gradient": gradient, "advantages": buffer.advantages[buffer.mask.bool()], "metrics": metrics},
            out / f"rank{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_give_one_process_gradient_and_whitened_advantages(tiny_llama, tmp_path):
    # fresh interpreters: a fork of this process, which has run OpenMP threads, hangs in them, and multiprocessing's
    # fork server or resource tracker would outlive the test (strays to the sandbox tests, which count processes)
    torch.save(
        {"class": type(tiny_llama), "config": tiny_llama.config, "weights": tiny_llama.state_dict()},
        tmp_path / "model.pt",
    )
    code = "import sys, test_ddp_maths; test_ddp_maths._rank(int(sys.argv[1]), test_ddp_maths.Path(sys.argv[2]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(Path(__file__).parents[1])])}
    ranks = [subprocess.Popen([sys.executable, "-c", code, str(rank), str(tmp_path)], env=env) for rank in (0, 1)]
    assert [rank.wait(timeout=300) for rank in ranks] == [0, 0]
    ranks = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    gradient, buffer, metrics = gradient_and_buffer(tiny_llama, SingleDeviceStrategy(torch.device("cpu")), 1)

    assert_close = torch.testing.assert_close
    assert_close(torch.cat([rank["advantages"] for rank in ranks]), buffer.advantages[buffer.mask.bool()])
    for rank in ranks:
        # sums over other groupings of the rows: 1.1e-6 relative on an AVX2 host
        assert rank["metrics"]["ppo/explained_variance"] == pytest.approx(metrics["ppo/explained_variance"], rel=1e-5)
        assert rank["gradient"].keys() == gradient.keys()
        for name, grad in gradient.items():  # the ranks scored their rows in other packs: fp32 round-off
            assert_close(rank["gradient"][name], grad, atol=1e-5 * float(grad.abs().max()), rtol=1e-4, msg=name)
