"""Self-play end to end on the tiny model: the Solver learns by BC from the judge's passes between Setter
iterations, the initial Solver re-judges the puzzles, and a run killed in the middle of a BC phase resumes
exactly."""

from __future__ import annotations

import math

import pytest
import torch
from support import NEGATIVE_ROOT, SEVEN, ScriptedLLM, scalar_values
from training_runs import finished_iterations, load_checkpoint, read_records, run
from transformers import AutoModelForCausalLM

from codeplay_lightning.models import SamplingConfig
from codeplay_lightning.puzzles import Puzzle
from codeplay_lightning.solver.learning import SolverLearner

# each puzzle's right and wrong bodies; the Solver picks one at random (GOOD_MORNING: never right). Wrong ones
# often enough that most puzzles are not passed by every attempt, the puzzles BC learns from
RIGHT = {
    SEVEN.f: {"7", "3 + 4", "14 // 2", "10 - 3", "int('7')", "7 * 1"},
    NEGATIVE_ROOT.f: {"-12", "-(12)", "-6 * 2", "-24 // 2"},
}
WRONG = {SEVEN.f: ("8", "6", "'7'", "7.5"), NEGATIVE_ROOT.f: ("12", "-11", "0")}
ANSWERS = {f: [f"\n    return {body}" for body in (*sorted(RIGHT[f]), *WRONG[f])] for f in RIGHT}
SELFPLAY = (
    "trainer.iterations=4",
    "selfplay.learn_every=2",
    "solver.attempts=2",
    "selfplay.lora_rank=2",
    "selfplay.bc_batch_size=2",
    "selfplay.eval_attempts=2",
    "selfplay.solutions_per_puzzle=5",
    "selfplay.rejudge_share=1",
    "selfplay.replay_ratio=1",
    "selfplay.corpus_ratio=0.5",
    "ppo.ppo_epochs=1",
)


class GuessingLLM(ScriptedLLM):
    """Stands in for every Solver HFLLM (same arguments): a body drawn from ANSWERS by the generator it is given."""

    def __init__(self, model, tokenizer, sampling: SamplingConfig, *, chat: bool, batch_size: int, generator):
        super().__init__(self.guess)
        self.generator = generator

    def guess(self, prompt: str) -> str:
        bodies = next((bodies for f, bodies in ANSWERS.items() if f in prompt), ["\n    return 'evening'"])
        return bodies[int(torch.randint(0, len(bodies), (1,), generator=self.generator))]


@pytest.fixture
def guessing_solvers(monkeypatch, valid_puzzles):
    """Three valid puzzles an iteration, Solvers that guess, and a corpus of one puzzle (no sandboxed build)."""
    monkeypatch.setattr("codeplay_lightning.train.HFLLM", GuessingLLM)
    monkeypatch.setattr("codeplay_lightning.setter.selfplay.HFLLM", GuessingLLM)
    corpus = [Puzzle("corpus:0", "def f(x: int):\n    return x + 1 == 5", ("def g():\n    return 4",), "int")]
    monkeypatch.setattr("codeplay_lightning.train.selfplay_corpus", lambda *args: (corpus, [SEVEN, NEGATIVE_ROOT]))


def without_seconds(record):
    if isinstance(record, dict):
        return {key: without_seconds(value) for key, value in record.items() if not key.endswith("seconds")}
    return record


def test_the_solver_learns_from_verified_passes(tmp_path, stream_model, char_tokenizer, guessing_solvers, caplog):
    with caplog.at_level("INFO", logger="codeplay_lightning"):
        run_dir = run(tmp_path, stream_model, char_tokenizer, *SELFPLAY)
    (announced,) = [line for line in caplog.messages if line.startswith("self-play:")]
    assert announced.endswith("evaluated on 2 held-out-family puzzles")  # no eval_file here, so none named
    puzzles = read_records(run_dir)
    for puzzle in puzzles:  # every valid puzzle was also attempted by the initial Solver (rejudge_share 1)
        assert puzzle["valid"] and puzzle["initial_attempted"]
        assert puzzle["D_initial"] is None or 1 <= puzzle["D_initial"] <= 2
    phases = read_records(run_dir, "solver.jsonl")
    assert [phase["iteration"] for phase in phases] == [1, 3] and [p["phase"] for p in phases] == [1, 2]
    assert "initial" in phases[0] and "initial" not in phases[1]  # the initial Solver's evaluation, once
    for phase in phases:
        bc = phase["bc"]
        assert 0 < bc["new_pairs"] and bc["from_corpus"] == min(1, round(0.5 * bc["new_pairs"]))
        assert bc["steps"] == math.ceil((bc["new_pairs"] + bc["replayed"] + bc["from_corpus"]) / 2)
        assert set(phase["learned"]) == {"heldout_families"} and phase["learned"]["heldout_families"]["puzzles"] == 2
    # the stand-in Solver ignores the weights: with the same draws at every evaluation, the same results
    assert phases[0]["initial"] == phases[0]["learned"] == phases[1]["learned"]
    assert phases[1]["bc"]["replayed"] == min(phases[0]["bc"]["new_pairs"], phases[1]["bc"]["new_pairs"])

    learner = load_checkpoint(run_dir)["callbacks"]["RolloutCallback"]["selfplay"]["learner"]
    pairs = learner["replay"]["pairs"]
    assert len(pairs) == phases[0]["bc"]["new_pairs"] + phases[1]["bc"]["new_pairs"]
    for _, f, g, _ in pairs:  # only what the judge passed, each puzzle at most selfplay.solutions_per_puzzle times
        assert g.split("\n")[1].strip().removeprefix("return ") in RIGHT[f]
    assert max(sum(f == other for _, other, _, _ in pairs) for _, f, _, _ in pairs) <= 5
    lora_b = [tensor for tensor in learner["adapters"] if tensor.abs().sum() > 0]
    assert lora_b and len(lora_b) > len(learner["adapters"]) // 2  # every B started at 0; BC moved them
    assert learner["phases"] == 2 and finished_iterations(run_dir) == 4

    tags = scalar_values(run_dir)
    assert len(tags["solver/bc_loss_last"]) == 2 and len(tags["solver/pass_rate_initial"]) == 4
    assert len(tags["solver/heldout_families_pass@1"]) == 3  # the initial Solver's, then after each phase
    solver = AutoModelForCausalLM.from_pretrained(run_dir / "solver")  # the learned Solver, for `--llm`
    changed = [
        name for name, value in stream_model.state_dict().items() if not torch.equal(solver.state_dict()[name], value)
    ]
    assert changed and all(name.endswith("proj.weight") for name in changed)  # the LoRA-adapted layers only
    iterations = read_records(run_dir, "iterations.jsonl")
    assert ["solver_learning_seconds" in record for record in iterations] == [False, True, False, True]


class KilledInPhase(Exception):
    pass


def test_a_run_killed_in_a_bc_phase_resumes_exactly(
    tmp_path, stream_model, char_tokenizer, guessing_solvers, monkeypatch
):
    selfplay = (*SELFPLAY, "selfplay.bc_batch_size=1")  # a step a sequence: a phase of several steps
    straight = run(tmp_path / "straight", stream_model, char_tokenizer, *selfplay)
    last_step = read_records(straight, "solver.jsonl")[1]["bc"]["steps"]
    assert last_step >= 2  # the kill comes after a step of the phase
    step, steps = SolverLearner._step, []

    def dying_step(self, *args):
        steps.append(self.phases)
        if self.phases == 2 and steps.count(2) == last_step:  # the last step of the second phase
            raise KilledInPhase
        return step(self, *args)

    monkeypatch.setattr(SolverLearner, "_step", dying_step)
    with pytest.raises(KilledInPhase):
        run(tmp_path / "killed", stream_model, char_tokenizer, *selfplay)
    killed = tmp_path / "killed" / "smoke" / "version_0"
    assert finished_iterations(killed) == 3
    monkeypatch.setattr(SolverLearner, "_step", step)
    resumed = run(tmp_path / "killed", stream_model, char_tokenizer, *selfplay, resume="auto")

    for name in ("puzzles.jsonl", "solver.jsonl"):
        assert [without_seconds(r) for r in read_records(resumed, name)] == [
            without_seconds(r) for r in read_records(straight, name)
        ]
    a, b = (load_checkpoint(path)["callbacks"]["RolloutCallback"]["selfplay"] for path in (straight, resumed))
    assert a["learner"]["replay"] == b["learner"]["replay"] and a["evaluations"] == b["evaluations"] == 3
    for x, y in zip(a["learner"]["adapters"], b["learner"]["adapters"], strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    adam_a, adam_b = a["learner"]["optimizer"]["state"], b["learner"]["optimizer"]["state"]
    for key in adam_a:
        torch.testing.assert_close(adam_a[key]["exp_avg"], adam_b[key]["exp_avg"], rtol=0, atol=0)
