"""Training on a CUDA device as users run it: the paper's configuration through the real Lightning Trainer in
bf16-mixed and in 16-mixed (fp16 with the gradient scaler), with every model on the device, the fused optimizer
where there is no scaler, NCCL collectives, the PPO ratio 1 at a learning rate too small to move a weight; and a
checkpoint written on the GPU that resumes on the CPU and back."""

from __future__ import annotations

import pytest
from model_architectures import tiny_model
from support import CONFIGS, scalar_values
from training_runs import finished_iterations, load_checkpoint, read_puzzles, run

from benchmarks.gpu.check import Observed
from codeplay_lightning.config import load_config
from codeplay_lightning.train import train

pytestmark = pytest.mark.gpu
ON_DEVICE = "cuda:0"


@pytest.mark.parametrize(
    ("architecture", "precision", "strategy"),
    [
        ("gpt_neo", "bf16-mixed", "auto"),
        ("gpt_neo", "16-mixed", "auto"),
        ("llama", "bf16-mixed", "ddp"),  # one rank: every collective goes through NCCL, which takes no CPU tensor
        ("llama", "16-mixed", "auto"),
    ],
)
def test_the_paper_config_trains_exactly_on_the_gpu(
    architecture, precision, strategy, tmp_path, char_tokenizer, embedder_dir
):
    model_dir = tmp_path / architecture
    tiny_model(architecture, char_tokenizer, initializer_range=0.02).save_pretrained(model_dir)
    char_tokenizer.save_pretrained(model_dir)
    config = load_config(
        [CONFIGS / "balanced.yaml", CONFIGS / "paper.yaml"],
        [
            f"model.name={model_dir}",
            f"trainer.precision={precision}",
            f"trainer.strategy={strategy}",
            "trainer.iterations=1",
            f"trainer.run_root={tmp_path / 'runs'}",
            "ppo.lr=1e-30",
            "ppo.kl_coef=0.01",  # the KL reference's forward runs too
            "reward.reference=null",
            "reward.reference_split=null",
            f"reward.embedder={embedder_dir}",
            "rollout.fewshot=2",
            "rollout.n_envs=16",
        ],
    )
    observed = Observed()
    run_dir = train(config, callbacks=[observed])
    assert len(read_puzzles(run_dir)) >= 8
    assert observed.found["devices"] == {
        "policy": ON_DEVICE,
        "value_head": ON_DEVICE,
        "frozen": ON_DEVICE,  # the Solver's weights and the KL reference
        "frozen_dtype": "torch.bfloat16" if precision == "bf16-mixed" else "torch.float32",
    }
    # fused where no scaler unscales: every minibatch stepped (a step fp16's scaler skipped for an inf is not counted)
    assert observed.found["optimizer"] == {"fused": precision == "bf16-mixed", "steps": 5 * 8}
    if precision == "16-mixed":
        assert observed.found["fp16_scale"] == 2.0**16  # never halved: no inf or NaN in any gradient
    values = scalar_values(run_dir)
    assert values["ppo/clip_frac"] == [0.0]
    assert abs(values["ppo/approx_kl"][0]) < 1e-4
    assert abs(values["ppo/kl_ref"][0]) < 1e-3
    assert values["rollout/sampler_logprob_gap"][0] < 0.05  # bf16's or fp16's rounding; a lost prompt is nats


def test_a_checkpoint_written_on_the_gpu_resumes_on_the_cpu_and_back(tmp_path, char_tokenizer, embedder_dir):
    from support import stream_llama

    model = stream_llama(char_tokenizer)
    options = ("trainer.precision=bf16-mixed", f"reward.embedder={embedder_dir}")
    for iterations, accelerator in ((1, "gpu"), (2, "cpu"), (3, "gpu")):
        run_dir = run(
            tmp_path,
            model,
            char_tokenizer,
            *options,
            f"trainer.iterations={iterations}",
            f"trainer.accelerator={accelerator}",
            resume="auto" if iterations > 1 else None,
        )
        assert finished_iterations(run_dir) == iterations
    assert {puzzle["iteration"] for puzzle in read_puzzles(run_dir)} == {0, 1, 2}
    checkpoint = load_checkpoint(run_dir)
    assert checkpoint["global_step"] == 3 * 2 * 2  # iterations x epochs x minibatches
    states = checkpoint["optimizer_states"][0]["state"].values()
    assert {int(state["step"]) for state in states} == {3 * 2 * 2}  # Adam's moments came along every time
