"""The Setter's PPO loop end to end on a tiny model built in code: smoke run, learning, resume
and checkpoint errors."""

from __future__ import annotations

import copy
import json
import re

import pytest
import torch
from support import (
    CONFIGS,
    GOOD_MORNING,
    NEGATIVE_ROOT,
    SEVEN,
    ScriptedLLM,
    answer_by_puzzle,
    scalar_values,
)
from training_runs import CoinLLM, KilledAt, finished_iterations, load_checkpoint, read_puzzles, run, tiny_config

from codeplay_lightning.config import ConfigError, load_config
from codeplay_lightning.devices import host_record
from codeplay_lightning.execution.api import usable_cores
from codeplay_lightning.models import SamplingConfig
from codeplay_lightning.rewards import difficulty_reward
from codeplay_lightning.setter import SetterPPOModule
from codeplay_lightning.setter.checkpoint import CHECKPOINT_KEYS, ROLLOUT_STATE, STATE_DICT_PREFIXES
from codeplay_lightning.setter.progress import LAPS
from codeplay_lightning.setter.rollout import Episode
from codeplay_lightning.train import train

LOGGED_TAGS = set(
    re.findall(r"`((?:reward_by_puzzle|rollout|ppo)/\w+)`", (CONFIGS.parent / "docs" / "training.md").read_text())
)


def test_smoke_run_writes_puzzles_logs_and_checkpoint(tmp_path, stream_model, char_tokenizer):
    run_dir = run(tmp_path, stream_model, char_tokenizer)
    puzzles = read_puzzles(run_dir)
    assert {p["iteration"] for p in puzzles} == {0, 1}
    assert [p["index"] for p in puzzles] == list(range(1, len(puzzles) + 1))
    for puzzle in puzzles:  # random characters never parse: R_d = -1, R = w_d R_d + w_n R_n (balanced)
        assert not puzzle["valid"] and puzzle["R_d"] == -1
        assert puzzle["R"] == pytest.approx(puzzle["R_d"] + puzzle["R_n"])
    checkpoint = load_checkpoint(run_dir)
    assert tuple(checkpoint) == CHECKPOINT_KEYS  # what setter/checkpoint.py says last.ckpt holds, key by key
    assert {key.split(".")[0] for key in checkpoint["state_dict"]} == set(STATE_DICT_PREFIXES)
    assert tuple(checkpoint["callbacks"]["RolloutCallback"]) == ROLLOUT_STATE
    assert finished_iterations(run_dir) == 2
    assert checkpoint["global_step"] == 2 * 2 * 2  # iterations x epochs x minibatches
    archive = checkpoint["callbacks"]["RolloutCallback"]["archive"]
    assert archive["texts"] == [p["puzzle"] for p in puzzles]
    tags = list(scalar_values(run_dir))
    assert len(LOGGED_TAGS) >= 12 and set(tags) >= LOGGED_TAGS  # the names docs/training.md promises, as they are
    assert not [tag for tag in tags if tag.endswith(("_step", "_epoch"))]
    iterations = [json.loads(line) for line in (run_dir / "iterations.jsonl").read_text().splitlines()]
    assert [record["iteration"] for record in iterations] == [0, 1]
    for record in iterations:
        laps = [record[f"{name}_seconds"] for name, _, _ in LAPS if name != "solver_learning"]
        assert record["seconds"] == pytest.approx(sum(laps))
        assert 0 <= record["sandbox_seconds"] <= record["solver_seconds"]
        assert 0 < record["outside_models_frac"] < 1 and record["peak_rss_gib"] > 0.1
    assert (run_dir / "config.yaml").is_file()


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_training_changes_the_policy_and_value_head(tmp_path, stream_model, char_tokenizer, precision, monkeypatch):
    clipped = []  # the fused optimizer's clipping is the module's own: it must run at every step
    clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *args: clipped.append(clip(*args)))
    run_dir = run(tmp_path, stream_model, char_tokenizer, "trainer.iterations=1", f"trainer.precision={precision}")
    assert len(clipped) == 4  # ppo_epochs × n_minibatches
    state = load_checkpoint(run_dir)["state_dict"]
    before = stream_model.state_dict()
    changed = [name for name, value in before.items() if not torch.equal(state[f"policy.{name}"], value)]
    assert len(changed) == len(before)  # every policy tensor was updated (full fine-tune)
    head = {name: value for name, value in state.items() if name.startswith("value_head.")}
    run(tmp_path, stream_model, char_tokenizer, "trainer.iterations=2", f"trainer.precision={precision}", resume="auto")
    trained = load_checkpoint(run_dir)["state_dict"]
    assert head and all(not torch.equal(trained[name], value) for name, value in head.items())  # and the value head


def test_the_none_preset_never_updates(tmp_path, stream_model, char_tokenizer, monkeypatch):
    """The paper's no-reward baseline does no optimisation, nor the PPO pass, nor the rollout's scoring of a buffer
    it never trains on: whitened value-head noise is no signal."""
    scorings, score = [], SetterPPOModule.score

    def counted_score(*args, **kwargs):
        scorings.append(args[2].shape)  # the actions scored
        return score(*args, **kwargs)

    monkeypatch.setattr(SetterPPOModule, "score", counted_score)
    run_dir = run(
        tmp_path, stream_model, char_tokenizer, "trainer.iterations=1", "reward.w_difficulty=0", "reward.w_novelty=0"
    )
    assert not scorings
    logged = scalar_values(run_dir)
    assert {tag for tag in logged if tag.startswith("ppo/")} == {"ppo/kl_ref"}  # the rollout's; no loss was computed
    assert logged["ppo/kl_ref"] == [0.0]  # the policy, never updated, is the reference
    checkpoint = load_checkpoint(run_dir)
    assert checkpoint["optimizer_states"][0]["state"] == {}  # Adam never stepped
    for name, value in stream_model.state_dict().items():
        assert torch.equal(checkpoint["state_dict"][f"policy.{name}"], value), name


def test_empty_minibatches_do_not_step_the_optimizer(tmp_path, stream_model, char_tokenizer):
    """More minibatches than puzzles: the empty ones must not move the weights through Adam's momentum."""
    run_dir = run(tmp_path, stream_model, char_tokenizer, "trainer.iterations=1", "ppo.n_minibatches=40")
    puzzles = len(read_puzzles(run_dir))
    assert 0 < puzzles < 40
    steps = {int(state["step"]) for state in load_checkpoint(run_dir)["optimizer_states"][0]["state"].values()}
    assert steps == {2 * puzzles}  # ppo_epochs x non-empty minibatches


def test_resume_continues_exactly(tmp_path, stream_model, char_tokenizer):
    """Also when the resume recomputes its activations (`trainer.recompute_activations`, how a run runs): the same
    gradients, to float rounding."""
    straight = run(tmp_path / "straight", stream_model, char_tokenizer, "trainer.iterations=4")
    first = run(tmp_path / "resumed", stream_model, char_tokenizer, "trainer.iterations=2")
    resumed = run(
        tmp_path / "resumed",
        stream_model,
        char_tokenizer,
        "trainer.iterations=4",
        "trainer.recompute_activations=true",
        resume="auto",
    )
    assert resumed == first  # the same run directory, continued
    assert read_puzzles(resumed) == read_puzzles(straight)
    a, b = load_checkpoint(straight), load_checkpoint(resumed)
    assert a["global_step"] == b["global_step"] == 4 * 2 * 2
    archives = [checkpoint["callbacks"]["RolloutCallback"]["archive"] for checkpoint in (a, b)]
    assert archives[0]["texts"] == archives[1]["texts"]
    for name, value in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][name], value)
    adam_a, adam_b = a["optimizer_states"][0]["state"], b["optimizer_states"][0]["state"]
    for key in adam_a:
        torch.testing.assert_close(adam_b[key]["exp_avg_sq"], adam_a[key]["exp_avg_sq"])


def test_a_crash_keeps_every_finished_iteration(tmp_path, stream_model, char_tokenizer):
    straight = run(tmp_path / "straight", stream_model, char_tokenizer, "trainer.iterations=4")
    config = tiny_config(tmp_path / "crashed", "trainer.iterations=4")
    with pytest.raises(RuntimeError, match="killed"):
        train(config, policy=copy.deepcopy(stream_model), tokenizer=char_tokenizer, callbacks=[KilledAt(2)])
    crashed = tmp_path / "crashed" / "smoke" / "version_0"
    assert finished_iterations(crashed) == 2
    assert {p["iteration"] for p in read_puzzles(crashed)} == {0, 1, 2}  # 2 was logged, then the crash
    resumed = run(tmp_path / "crashed", stream_model, char_tokenizer, "trainer.iterations=4", resume="auto")
    assert resumed == crashed and read_puzzles(resumed) == read_puzzles(straight)  # 2's first sample forgotten
    iterations = [json.loads(line)["iteration"] for line in (resumed / "iterations.jsonl").read_text().splitlines()]
    assert iterations == [0, 1, 2, 3]
    a, b = load_checkpoint(straight), load_checkpoint(resumed)
    assert finished_iterations(straight) == 4
    for name, value in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][name], value)


def test_corrupt_checkpoint_is_a_clear_error(tmp_path, stream_model, char_tokenizer):
    broken = tmp_path / "smoke" / "version_0" / "checkpoints" / "last.ckpt"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="unreadable"):
        run(tmp_path, stream_model, char_tokenizer, resume="auto")


@pytest.mark.parametrize(
    "changed, named",
    [
        ("model.lora_rank=4", "model.lora_rank=0"),
        ("reward.w_novelty=0", "reward.w_novelty=1.0"),
        ("reward.difficulty=learnability", "reward.difficulty='codeplay'"),
        ("selfplay.learn_every=2", "selfplay.learn_every=0"),
        ("solver.attempts=3", "solver.attempts=2"),
        ("rollout.temperature=0.7", "rollout.temperature=0.8"),
    ],
)
def test_a_resume_that_would_change_the_run_is_refused_in_one_line(
    tmp_path, stream_model, char_tokenizer, changed, named
):
    """Whatever the run is (`run_identity`) a resume keeps; the refusal names the key, before anything loads, and
    the first config.yaml stays as it was."""
    run_dir = run(tmp_path, stream_model, char_tokenizer, "trainer.iterations=1")
    first = (run_dir / "config.yaml").read_text()
    with pytest.raises(ConfigError, match=f"made with {re.escape(named)} and this run has") as refusal:
        run(tmp_path, stream_model, char_tokenizer, "trainer.iterations=2", changed, resume="auto")
    assert "\n" not in str(refusal.value)
    assert (run_dir / "config.yaml").read_text() == first


def test_a_resume_keeps_the_first_config_and_host_and_writes_its_own_beside_them(
    tmp_path, stream_model, char_tokenizer, caplog
):
    """Each part of a run names the machine it ran on (host.json), and its config the workers `auto` chose."""
    run_dir = run(tmp_path, stream_model, char_tokenizer, "trainer.iterations=1")
    first = (run_dir / "config.yaml").read_text()
    assert f"workers: {usable_cores()}\n" in first
    host = json.loads((run_dir / "host.json").read_text())
    assert host == json.loads(json.dumps(host_record()))
    assert host["packages"]["torch"] == torch.__version__ and host["usable_cores"] == usable_cores()
    with caplog.at_level("INFO", logger="codeplay_lightning"):
        run(tmp_path, stream_model, char_tokenizer, "trainer.iterations=2", "sandbox.workers=1", resume=str(run_dir))
    assert f"resuming {run_dir} at iteration 2 of 2" in caplog.text
    assert (run_dir / "config.yaml").read_text() == first
    assert "workers: 1" in (run_dir / "config.resumed-1.yaml").read_text()
    assert json.loads((run_dir / "host.resumed-1.json").read_text())["cpu"] == host["cpu"]


def test_missing_checkpoint_never_starts_afresh(tmp_path, stream_model, char_tokenizer):
    with pytest.raises(ConfigError, match="found no checkpoint"):
        run(tmp_path, stream_model, char_tokenizer, resume="auto")


def test_scoring_forward_reproduces_the_sampling_logprobs(stream_model, char_tokenizer):
    """PPO's ratio starts at 1 only if the update scores tokens exactly as they were sampled."""
    from codeplay_lightning.config import PPOConfig
    from codeplay_lightning.models import SamplingConfig, sample
    from codeplay_lightning.puzzles import fewshot_puzzles, setter_prompt
    from codeplay_lightning.setter import SetterPPOModule
    from codeplay_lightning.setter.rollout import pad_actions

    model = copy.deepcopy(stream_model)
    prompt = setter_prompt(fewshot_puzzles()[:2])
    samples = sample(
        model,
        char_tokenizer,
        [prompt] * 3,
        SamplingConfig(20, temperature=0.7),
        [torch.Generator().manual_seed(seed) for seed in range(3)],
    )
    module = SetterPPOModule(
        policy=model,
        frozen=None,
        ppo=PPOConfig(),
        temperature=0.7,
        value_hidden=16,
        detach_value_trunk=True,
        identity={},
    )
    action_ids, mask = pad_actions([Episode(*row) for row in zip(samples.texts, samples.token_ids, samples.logprobs)])
    prompt_ids = torch.tensor(char_tokenizer(prompt)["input_ids"])
    with torch.no_grad():
        logprobs, values, entropies = module.score(prompt_ids, action_ids, mask)
    for row, sampled in enumerate(samples.logprobs):
        torch.testing.assert_close(logprobs[row, : len(sampled)], sampled, atol=1e-4, rtol=1e-4)
    assert values.shape == action_ids.shape
    # at the sampling temperature: tests/unit/models/test_model_matrix_scoring.py
    assert entropies.shape == action_ids.shape


def test_lora_trains_only_adapters_with_the_base_model_as_kl_reference(tmp_path, stream_model, char_tokenizer):
    run_dir = run(
        tmp_path,
        stream_model,
        char_tokenizer,
        "trainer.iterations=1",
        "model.lora_rank=4",
        "ppo.kl_coef=0.1",
        "ppo.kl_estimator=k3",
    )
    state = load_checkpoint(run_dir)["state_dict"]
    lora = {name: value for name, value in state.items() if "lora_" in name}
    assert lora and any("lora_B" in name and value.abs().sum() > 0 for name, value in lora.items())  # B starts at 0
    base = {
        name.replace("policy.base_model.model.", "").replace(".base_layer", ""): value
        for name, value in state.items()
        if name.startswith("policy.") and "lora_" not in name
    }
    for name, value in stream_model.state_dict().items():  # the frozen base is the Solver and the reference
        torch.testing.assert_close(base[name], value)


# ---------------------------------------------------------------- the search Solver strategies


class PuzzleAnsweringLLM(ScriptedLLM):
    """Stands in for the Solver's HFLLM (same arguments) and answers with `answer_by_puzzle`."""

    def __init__(self, model, tokenizer, sampling: SamplingConfig, *, chat: bool, batch_size: int, generator):
        super().__init__(answer_by_puzzle)
        self.sampling, self.chat = sampling, chat


def test_gif_mcts_solver_difficulty_is_calls_to_solution(
    tmp_path, stream_model, char_tokenizer, valid_puzzles, monkeypatch
):
    llms: list[PuzzleAnsweringLLM] = []

    def solver_llm(*args, **kwargs) -> PuzzleAnsweringLLM:
        llms.append(PuzzleAnsweringLLM(*args, **kwargs))
        return llms[-1]

    monkeypatch.setattr("codeplay_lightning.train.HFLLM", solver_llm)
    run_dir = run(tmp_path, stream_model, char_tokenizer, "solver.strategy=gif-mcts", "solver.attempts=3")

    expected_d = {SEVEN.f: 1, NEGATIVE_ROOT.f: 2, GOOD_MORNING.f: None}  # LLM calls to the first solution
    puzzles = read_puzzles(run_dir)
    assert [p["iteration"] for p in puzzles] == [0, 0, 0, 1, 1, 1]
    for puzzle in puzzles:
        assert puzzle["valid"] and puzzle["D"] == expected_d[puzzle["puzzle"]]
        assert puzzle["R_d"] == pytest.approx(difficulty_reward(puzzle["D"] or float("inf"), valid=True))
    (llm,) = llms
    assert not llm.chat  # the char tokenizer has no chat template
    assert llm.sampling == SamplingConfig(24, 0.8, 1.0, ())  # solver.max_new_tokens etc., no stop strings
    assert llm.batches == [3, 2, 1] * 2  # per iteration: every search's call, then the unsolved ones'
    assert finished_iterations(run_dir) == 2


def test_worldcoder_solver_on_a_model_of_its_own(tmp_path, stream_model, char_tokenizer, valid_puzzles, tiny_model_dir):
    run_dir = run(tmp_path, stream_model, char_tokenizer, "solver.strategy=worldcoder", f"solver.llm={tiny_model_dir}")

    puzzles = read_puzzles(run_dir)
    assert len(puzzles) == 6 and all(p["valid"] for p in puzzles)
    attempts = load_config([CONFIGS / "smoke.yaml"]).solver.attempts
    for puzzle in puzzles:  # random characters solve nothing, but D may only be calls-to-solution or None
        assert puzzle["D"] is None or puzzle["D"] in range(1, attempts + 1)
        assert (puzzle["R_d"] == -1) == (puzzle["D"] is None)
    assert finished_iterations(run_dir) == 2


@pytest.mark.parametrize("strategy", ["few-shot", "worldcoder"])
def test_resume_continues_the_solvers_random_stream(
    tmp_path, stream_model, char_tokenizer, valid_puzzles, monkeypatch, strategy
):
    monkeypatch.setattr("codeplay_lightning.train.HFLLM", CoinLLM)
    overrides = (f"solver.strategy={strategy}", "solver.attempts=4", "ppo.ppo_epochs=1")
    straight = run(tmp_path / "straight", stream_model, char_tokenizer, "trainer.iterations=4", *overrides)
    run(tmp_path / "resumed", stream_model, char_tokenizer, "trainer.iterations=2", *overrides)
    resumed = run(tmp_path / "resumed", stream_model, char_tokenizer, "trainer.iterations=4", *overrides, resume="auto")

    difficulties = [(p["puzzle"], p["D"]) for p in read_puzzles(straight)]
    assert len({d for text, d in difficulties if text == SEVEN.f}) > 1  # D depends on the Solver's draws
    assert [(p["puzzle"], p["D"]) for p in read_puzzles(resumed)] == difficulties
