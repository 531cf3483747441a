"""Config loading and validation: every config file loads; bad settings (those that would crash a rank or train
on the wrong quantity among them) stop with one line, before torch is imported."""

import importlib.util
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from support import CONFIGS

from codeplay_lightning.config import (
    ConfigError,
    TrainConfig,
    identity_difference,
    load_config,
    resume_checkpoint,
    run_identity,
)

P3_SMALL = Path(__file__).parents[1] / "fixtures" / "p3_small"


def test_fewer_streams_than_devices_is_refused():
    """A device without a stream has nothing to sample, and its rank would crash in the first rollout."""
    fewer = r"rollout.n_envs \(2\) must be at least trainer.devices × trainer.num_nodes \(4\)"
    with pytest.raises(ConfigError, match=fewer):
        load_config([CONFIGS / "smoke.yaml"], ["trainer.devices=4", "trainer.strategy=ddp"])
    with pytest.raises(ConfigError, match=fewer):  # two nodes of two
        load_config([CONFIGS / "smoke.yaml"], ["trainer.devices=2", "trainer.num_nodes=2", "trainer.strategy=ddp"])
    assert load_config([CONFIGS / "smoke.yaml"], ["trainer.devices=2"]).trainer.devices == 2


@pytest.mark.parametrize(
    "overrides, refusal",
    [
        (["trainer.num_nodes=2"], r"trainer.num_nodes=2 needs trainer.strategy=ddp \(got auto\)"),
        (["trainer.num_nodes=0"], r"trainer.num_nodes must be at least 1, got 0"),
        (["trainer.collective_timeout=0"], r"collective_timeout must be a positive number of seconds, got 0.0"),
        (["trainer.collective_timeout=nan"], r"collective_timeout must be a positive number of seconds, got nan"),
    ],
)
def test_nodes_and_the_collective_timeout_are_checked(overrides, refusal):
    with pytest.raises(ConfigError, match=refusal):
        load_config([CONFIGS / "smoke.yaml"], overrides)


def test_the_setter_samples_from_the_whole_distribution_only():
    """PPO's old log-probs are over the whole vocabulary: with a nucleus they are not the behaviour policy's, so the
    Setter has no nucleus to set."""
    with pytest.raises(ConfigError, match="Key 'top_p' not in 'RolloutConfig'"):
        load_config([CONFIGS / "balanced.yaml"], ["rollout.top_p=0.9"])
    assert load_config([CONFIGS / "balanced.yaml"], ["solver.top_p=0.9"]).solver.top_p == 0.9  # never trained on


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_a_preset_copied_anywhere_is_the_same_run(tmp_path, path):
    """The schema holds the only defaults: no file beside a preset changes what it trains."""
    copied = tmp_path / "elsewhere" / path.name
    copied.parent.mkdir()
    shutil.copy(path, copied)
    no_p3_clone = ["reward.reference=null", "reward.reference_split=null"] if path.stem == "paper" else []
    assert load_config([copied], no_p3_clone) == load_config([path], no_p3_clone)


def test_the_defaults_are_the_cpu_scale_on_the_warm_start():
    config = TrainConfig()
    assert (config.model.name, config.rollout.n_envs, config.rollout.n_steps, config.rollout.fewshot) == (
        "smollm2-135m-sft",
        29,
        128,
        6,
    )
    assert (config.solver.attempts, config.solver.max_new_tokens, config.trainer.iterations) == (4, 96, 10)
    assert load_config([CONFIGS / "balanced.yaml"]) == replace(config, name="balanced")


def test_self_play_settings_are_their_own_section():
    config = load_config([CONFIGS / "selfplay.yaml"])
    assert config.selfplay.learn_every == 2 and config.selfplay.learns
    with pytest.raises(ConfigError, match="Key 'learn_every' not in 'SolverConfig'"):
        load_config([CONFIGS / "balanced.yaml"], ["solver.learn_every=2"])
    with pytest.raises(ConfigError, match="selfplay.learn_every needs solver.strategy=few-shot and solver.llm=frozen"):
        load_config([CONFIGS / "selfplay.yaml"], ["solver.llm=smollm2-135m"])
    with pytest.raises(ConfigError, match="selfplay.learn_every needs solver.attempts >= 2"):
        load_config([CONFIGS / "selfplay.yaml"], ["solver.attempts=1"])
    assert load_config([CONFIGS / "selfplay.yaml"], ["solver.attempts=2"]).solver.attempts == 2


def test_the_paper_scale_normalises_novelty_by_p3s_train_split(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^reward.reference data/p3/puzzles/puzzles.json does not exist .*git clone"):
        load_config([CONFIGS / "balanced.yaml", CONFIGS / "paper.yaml"])
    clone = tmp_path / "data" / "p3" / "puzzles"  # where paper.yaml's comment clones P3
    clone.mkdir(parents=True)
    for name in ("puzzles.json", "split.json"):
        shutil.copy(P3_SMALL / name, clone / name)
    reward = load_config([CONFIGS / "balanced.yaml", CONFIGS / "paper.yaml"]).reward
    assert (reward.reference, reward.reference_split) == ("data/p3/puzzles/puzzles.json", "data/p3/puzzles/split.json")
    without_p3 = ["reward.reference=null", "reward.reference_split=null"]  # our corpus's normaliser, as documented
    assert load_config([CONFIGS / "balanced.yaml", CONFIGS / "paper.yaml"], without_p3).reward.reference is None


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_config_file_loads_and_validates(path):
    no_p3_clone = ["reward.reference=null", "reward.reference_split=null"] if path.stem == "paper" else []
    config = load_config([path], no_p3_clone)
    assert config.name == ("balanced" if path.stem == "paper" else path.stem)
    if path.stem in ("none", "difficulty", "novelty", "balanced", "novelty_biased"):
        weights = {
            "none": (0, 0),
            "difficulty": (1, 0),
            "novelty": (0, 1),
            "balanced": (1, 1),
            "novelty_biased": (0.5, 1.5),
        }[path.stem]
        assert (config.reward.w_difficulty, config.reward.w_novelty) == weights


@pytest.mark.parametrize(
    "override, message",
    [
        ("ppo.nope=1", "Key 'nope' not in 'PPOConfig'"),
        ("ppo.lr=fast", "ppo.lr: Value 'fast' of type 'str' could not be converted"),
        ("trainer.loggers=[tensorboard2]", "trainer.loggers: 'tensorboard2' is none of csv, wandb, mlflow"),
        ("rollout.n_envs=0", "must be >= 1"),
        ("solver.attempts=0", "solver.attempts, batch_size and max_new_tokens must be >= 1"),
        ("solver.temperature=0", "solver.temperature must be > 0"),
        ("selfplay.rejudge_share=2", r"selfplay.bc_lr must be > 0, .*rejudge_share in \[0, 1\]"),
        ("selfplay.eval_file=nowhere.json", "selfplay.eval_file nowhere.json does not exist"),
        ("reward.combine=product", "takes no weights"),
        ("noequals", "not of the form key=value"),
        ("solver.strategy=beam", r"expected one of \['few-shot', 'gif-mcts', 'worldcoder'\]"),
        ("sandbox.timeout=nan", "sandbox.timeout must be a number of seconds"),
        ("sandbox.timeout=inf", "sandbox.timeout must be a number of seconds"),
        ("sandbox.workers=0", "sandbox.workers must be a whole number from 1 to 256"),
        ("reward.w_n=0", r"Key 'w_n' not in 'RewardConfig'; did you mean reward.w_novelty\?"),
        ("ppo.lrr=1", r"did you mean ppo.lr\?"),
        ("solver.learn_every=2", r"did you mean selfplay.learn_every\?"),
        ("trainer.loggers=csv", r"trainer.loggers is a list: write trainer.loggers=\[csv\]"),
        (
            "model.name='not a model!'",
            "is neither smollm2-135m, smollm2-135m-sft, smollm2-135m-gif, a local directory nor a hub id",
        ),
    ],
)
def test_bad_overrides_are_one_line_errors(override, message):
    with pytest.raises(ConfigError, match=message) as error:
        load_config([CONFIGS / "novelty_biased.yaml"], [override])
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("difficulty", ["learnability", "uncertainty"])
@pytest.mark.parametrize("strategy", ["gif-mcts", "worldcoder"])
def test_a_pass_rate_reward_with_a_search_solver_is_refused(difficulty, strategy):
    """A search's 1/D is one over the calls to its first solution, not a pass rate: the two rewards that read a pass
    rate would read something else."""
    with pytest.raises(ConfigError, match=f"reward.difficulty={difficulty} needs solver.strategy=few-shot"):
        load_config([CONFIGS / "balanced.yaml"], [f"reward.difficulty={difficulty}", f"solver.strategy={strategy}"])
    assert load_config([CONFIGS / "balanced.yaml"], [f"solver.strategy={strategy}"]).reward.difficulty == "codeplay"


@pytest.mark.parametrize(
    "text, message",
    [
        ("ppo: [1, 2\n", "bad.yaml:2:1: not valid YAML: did not find expected ',' or ']'"),
        ("name: x\nppo:\n\tlr: 1\n", "bad.yaml:3:1: not valid YAML: found character that cannot start any token"),
        ("- ppo\n- lr\n", "must hold a mapping of keys"),
    ],
)
def test_bad_config_files_are_one_line_errors_before_torch_loads(tmp_path, text, message):
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message) as error:
        load_config([tmp_path / "bad.yaml"])
    assert "\n" not in str(error.value)
    check = (
        "import sys\nfrom codeplay_lightning.cli import main\nstatus = main(['train', sys.argv[1]])\n"
        "assert 'torch' not in sys.modules\nsys.exit(status)"
    )
    result = subprocess.run(
        [sys.executable, "-c", check, str(tmp_path / "bad.yaml")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().startswith("error:") and message in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("preset", ["difficulty", "novelty"])
def test_the_paper_scale_keeps_the_weight_presets_run_name_and_root(preset):
    config = load_config(
        [CONFIGS / f"{preset}.yaml", CONFIGS / "paper.yaml"], ["reward.reference=null", "reward.reference_split=null"]
    )  # no P3 clone here
    assert (config.name, config.trainer.run_root) == (preset, "runs/paper")


@pytest.mark.parametrize(
    ("precision", "accelerator", "cuda", "native", "expected"),
    [
        ("auto", "cpu", True, {"cpu"}, "bf16-mixed"),  # an AMX or AVX512-BF16 CPU
        ("auto", "cpu", True, {"cuda"}, "32-true"),  # an AVX2 CPU: bf16 would be emulated
        ("auto", "auto", True, {"cuda"}, "bf16-mixed"),  # auto trains on the GPU when there is one
        ("auto", "auto", False, {"cuda"}, "32-true"),
        ("auto", "gpu", True, {"cpu"}, "32-true"),  # a GPU older than Ampere
        ("16-mixed", "gpu", True, set(), "16-mixed"),  # a precision named is kept
    ],
)
def test_auto_precision_is_bf16_only_where_it_is_native(monkeypatch, precision, accelerator, cuda, native, expected):
    import torch

    from codeplay_lightning import devices
    from codeplay_lightning.config import TrainerConfig
    from codeplay_lightning.sft import run as sft_run

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(devices, "native_bf16", lambda device: device in native)
    assert devices.resolved_precision(TrainerConfig(precision=precision, accelerator=accelerator)) == expected
    if accelerator == "auto":  # codeplay sft trains where Lightning's accelerator="auto" puts it
        assert sft_run.resolved_precision(precision) == expected


@pytest.mark.parametrize(
    ("amx", "avx512_bf16", "capability", "expected_cpu", "expected_cuda"),
    [(False, False, (7, 5), False, False), (True, False, (8, 0), True, True), (False, True, (9, 0), True, True)],
)
def test_native_bf16_reads_the_cpu_flags_and_the_gpu_capability(
    monkeypatch, amx, avx512_bf16, capability, expected_cpu, expected_cuda
):
    import torch

    from codeplay_lightning.models import native_bf16

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert (native_bf16("cpu"), native_bf16("cuda:0")) == (expected_cpu, expected_cuda)


def test_a_checkpoint_whose_settings_are_laid_out_otherwise_is_refused_as_another_versions():
    """A checkpoint from before self-play had its own section: the keys differ, whatever their values."""
    wanted = run_identity(TrainConfig())
    moved = {key.replace("selfplay.", "solver."): value for key, value in wanted.items()}
    assert identity_difference(moved, wanted) == (
        "the checkpoint was made by another version, whose settings differ from this one's at selfplay.bc_batch_size: "
        "start a new run"
    )
    changed = wanted | {"ppo.lr": 1e-5}
    assert identity_difference(changed, wanted) == (
        "the checkpoint was made with ppo.lr=1e-05 and this run has 1e-06: resume with the same value, or start a "
        "new run"
    )
    assert identity_difference(wanted, wanted) is None


@pytest.mark.parametrize(
    ("accelerator", "devices", "precision", "cuda", "count", "capability", "message"),
    [
        ("gpu", 1, "bf16-mixed", False, 0, None, "trainer.accelerator=gpu but torch sees no CUDA device"),
        ("gpu", 2, "bf16-mixed", True, 1, (9, 0), "trainer.devices=2 but this machine has 1 CUDA device"),
        ("auto", 1, "bf16-mixed", True, 1, (7, 5), r"needs a GPU from Ampere on .* is 7.5: trainer.precision=16-mixed"),
        ("gpu", 1, "16-mixed", True, 1, (7, 5), None),
        ("gpu", 1, "16-mixed", True, 1, (7, 0), r"a test GPU \(compute capability 7.0\) is not among the GPUs torch"),
        ("cpu", 4, "bf16-mixed", False, 0, None, None),  # CPU processes: no GPU asked for
    ],
)
def test_what_the_machine_cannot_run_is_refused_in_one_line_before_loading(
    monkeypatch, accelerator, devices, precision, cuda, count, capability, message
):
    import torch

    from codeplay_lightning.config import TrainerConfig
    from codeplay_lightning.devices import check_devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "a test GPU")
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: CUDA13_ARCHITECTURES)
    trainer = TrainerConfig(accelerator=accelerator, devices=devices, precision=precision)
    if message is None:
        check_devices(trainer)
    else:
        with pytest.raises(ConfigError, match=message) as refusal:
            check_devices(trainer)
        assert "\n" not in str(refusal.value)


@pytest.mark.parametrize(("precision", "refused"), [("bf16-mixed", True), ("bf16-true", True), ("32-true", False)])
def test_bf16_on_a_cpu_without_it_is_refused_in_one_line(monkeypatch, precision, refused):
    import torch

    from codeplay_lightning.config import TrainerConfig
    from codeplay_lightning.devices import check_cpu_precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    trainer = TrainerConfig(accelerator="cpu", precision=precision)
    if refused:
        with pytest.raises(ConfigError, match=r"emulated .* trainer.precision=auto picks 32-true here"):
            check_cpu_precision(trainer)
    else:
        check_cpu_precision(trainer)


def test_a_mistyped_preset_is_met_with_the_nearest_name():
    with pytest.raises(
        ConfigError, match=r"configs/balancd.yaml does not exist; did you mean .*configs/balanced.yaml\?$"
    ):
        load_config([CONFIGS / "balancd.yaml"])
    with pytest.raises(ConfigError, match=r"configs/zzz.yaml does not exist$"):
        load_config([CONFIGS / "zzz.yaml"])


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed here")
def test_a_logger_whose_package_is_missing_is_refused_with_its_install_command():
    with pytest.raises(ConfigError, match="trainer.loggers: wandb needs the wandb package: pip install wandb"):
        load_config([CONFIGS / "smoke.yaml"], ["trainer.loggers=[wandb]"])
    assert load_config([CONFIGS / "smoke.yaml"], ["trainer.loggers=[csv]"]).trainer.loggers == ["csv"]


def test_resume_auto_is_the_newest_version_by_number(tmp_path):
    config = load_config([CONFIGS / "smoke.yaml"], [f"trainer.run_root={tmp_path}"])
    with pytest.raises(ConfigError, match=f"RESUME=auto found no checkpoint under {tmp_path / 'smoke'}"):
        resume_checkpoint(config, "auto")
    for version in (2, 10, 9):
        (tmp_path / "smoke" / f"version_{version}" / "checkpoints").mkdir(parents=True)
        (tmp_path / "smoke" / f"version_{version}" / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert resume_checkpoint(config, "auto") == tmp_path / "smoke" / "version_10" / "checkpoints" / "last.ckpt"
    assert resume_checkpoint(config, str(tmp_path / "smoke" / "version_2" / "checkpoints" / "last.ckpt")).parts[-3] == (
        "version_2"
    )
    with pytest.raises(ConfigError, match="checkpoint nowhere.ckpt does not exist"):
        resume_checkpoint(config, "nowhere.ckpt")


CUDA13_ARCHITECTURES = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]  # PyPI's 2.13 build's


@pytest.mark.parametrize(
    ("capability", "architectures", "runs"),
    [
        ((9, 0), CUDA13_ARCHITECTURES, True),  # H100
        ((8, 9), CUDA13_ARCHITECTURES, True),  # L4: sm_86's kernels
        ((7, 5), CUDA13_ARCHITECTURES, True),  # T4
        ((7, 0), CUDA13_ARCHITECTURES, False),  # V100: dropped by CUDA 13
        ((6, 1), CUDA13_ARCHITECTURES, False),
        ((13, 0), CUDA13_ARCHITECTURES, True),  # a later GPU: compute_120's PTX
        ((10, 3), ["sm_90a", "sm_100f"], True),
        ((11, 0), ["sm_90a", "sm_100f"], False),
    ],
)
def test_a_gpu_runs_a_build_with_its_kernels_or_earlier_ptx(capability, architectures, runs):
    from codeplay_lightning.devices import runs_on

    assert runs_on(*capability, architectures) is runs


@pytest.mark.parametrize(
    ("workers", "accelerator", "devices", "expected"),
    [
        ("auto", "cpu", 1, 16),  # a rank samples, then judges: on the CPU every core judges
        ("auto", "cpu", 2, 8),  # DDP ranks share the node's cores
        ("auto", "gpu", 1, 15),  # on a GPU each rank keeps a core for its own process
        ("auto", "gpu", 8, 1),
        ("auto", "gpu", 16, 1),  # at least one
        (3, "gpu", 1, 3),  # a number is kept
    ],
)
def test_auto_workers_share_the_nodes_cores_among_its_ranks(monkeypatch, workers, accelerator, devices, expected):
    from codeplay_lightning import devices as devices_module
    from codeplay_lightning.config import TrainerConfig

    monkeypatch.setattr(devices_module, "usable_cores", lambda: 16)
    trainer = TrainerConfig(accelerator=accelerator, devices=devices, strategy="ddp")
    assert devices_module.judge_workers(workers, trainer) == expected


@pytest.mark.parametrize(
    ("own", "cpu_max", "expected"),
    [
        ("0::/box\n", "250000 100000\n", 3),  # a container's --cpus=2.5: three wardens can keep it busy
        ("0::/box\n", "max 100000\n", 6),  # no quota
        ("0::/box\n", None, 6),  # no CPU controller
        ("4:memory:/box\n1:cpu:/\n", None, 6),  # cgroup v1: its quota is not read
    ],
)
def test_usable_cores_are_the_affinity_within_the_cgroups_quota(tmp_path, monkeypatch, own, cpu_max, expected):
    from codeplay_lightning.execution import api as sandbox

    (tmp_path / "self").write_text(own)
    (tmp_path / "box").mkdir()
    if cpu_max is not None:
        (tmp_path / "box" / "cpu.max").write_text(cpu_max)
    monkeypatch.setattr(sandbox, "OWN_CGROUP", tmp_path / "self")
    monkeypatch.setattr(sandbox, "CGROUPS", tmp_path)
    monkeypatch.setattr(sandbox.os, "sched_getaffinity", lambda pid: set(range(6)))
    assert sandbox.usable_cores() == expected


def test_sandbox_workers_take_auto_or_a_number():
    assert load_config([CONFIGS / "balanced.yaml"]).sandbox.workers == "auto"
    assert load_config([CONFIGS / "smoke.yaml"], ["sandbox.workers=3"]).sandbox.workers == 3
    with pytest.raises(
        ConfigError, match=r"sandbox.workers must be a whole number from 1 to 256, got 'all' \(or auto\)"
    ):
        load_config([CONFIGS / "smoke.yaml"], ["sandbox.workers=all"])


def test_a_preset_named_bare_is_met_with_its_file(monkeypatch):
    monkeypatch.chdir(CONFIGS.parent)
    with pytest.raises(ConfigError, match=r"config file smoke does not exist; did you mean configs/smoke.yaml\?"):
        load_config(["smoke"])


def test_every_logger_name_has_a_builder():
    from codeplay_lightning.config import LOGGERS
    from codeplay_lightning.train import OTHER_LOGGERS

    assert set(OTHER_LOGGERS) == set(LOGGERS)


def test_a_run_is_named_by_the_identity_keys_its_overrides_change():
    from codeplay_lightning.config import named_by_changes

    overrides = ["reward.w_novelty=0.5", "trainer.iterations=3", "model.name=EleutherAI/gpt-neo-125m", "trainer.seed=1"]
    config = load_config([CONFIGS / "balanced.yaml"], overrides)
    assert named_by_changes(config, overrides).name == "balanced/w_novelty=0.5,name=EleutherAI-gpt-neo-125m,seed=1"
    assert named_by_changes(config, ["trainer.iterations=3"]).name == "balanced"  # how it runs, not what it is
    assert named_by_changes(config, [*overrides, "name=mine"]).name == config.name  # a name given is kept
