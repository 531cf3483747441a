"""TRL's GRPOTrainer trains a tiny model built in code for 2 steps on this CPU with each of our reward functions, and
the rewards it logs (`rewards/<name>/mean`) are what our own functions give its completions: the sandbox's verdicts
of the Solver's programs for P3Reward, training's `reward_puzzles` for SetterReward."""

from __future__ import annotations

import re

import pytest
import torch
from support import ScriptedLLM
from transformers import LlamaConfig, LlamaForCausalLM

from codeplay_lightning.archive import NoveltyArchive
from codeplay_lightning.config import RewardConfig, SolverConfig
from codeplay_lightning.integrations import P3Reward, SetterReward
from codeplay_lightning.puzzles import SETTER_STOP, SOLVER_STOP, Puzzle, fewshot_puzzles
from codeplay_lightning.setter.rollout import judge_puzzles, novelty_distances, reward_puzzles
from codeplay_lightning.solver import FewShotSolver, candidate_program

datasets = pytest.importorskip("datasets")
trl = pytest.importorskip("trl")

SEVEN_F, EIGHT_F = "def f(x: int):\n    return x == 7", "def f(x: int):\n    return x == 8"
SETTER_PROMPT = "from typing import List\n\n"
LESSONS = [  # (prompt, what the taught model continues it with)
    (f"{SEVEN_F}\n\ndef g():", "\n    return 7\n"),
    (f"{EIGHT_F}\n\ndef g():", "\n    return 7\n"),  # a wrong answer
    (SETTER_PROMPT, f"{SEVEN_F}\n\n"),
    (SETTER_PROMPT, "def f(x):\n    return x == 7\n\n"),  # no answer type: not a puzzle the judge can check
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Every model here is tiny: one thread is faster than two on a busy machine (tests/unit/conftest.py)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def taught_llama(char_tokenizer) -> LlamaForCausalLM:
    """A 2-layer Llama taught in code (200 Adam steps, a few seconds) to continue each prompt of LESSONS with its
    lessons, then eos: sampled at temperature 1 it says one of them (the Setter's two about half the time each)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(char_tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=char_tokenizer.pad_token_id,
        eos_token_id=char_tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    rows = [
        (char_tokenizer(prompt)["input_ids"], char_tokenizer(lesson)["input_ids"] + [char_tokenizer.eos_token_id])
        for prompt, lesson in LESSONS
    ]
    width = max(len(prompt) + len(lesson) for prompt, lesson in rows)
    pad = char_tokenizer.pad_token_id
    input_ids = torch.tensor([p + lesson + [pad] * (width - len(p) - len(lesson)) for p, lesson in rows])  # (3, T)
    labels = torch.tensor([[-100] * len(p) + lesson + [-100] * (width - len(p) - len(lesson)) for p, lesson in rows])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(200):
        loss = model(input_ids=input_ids, labels=labels).loss  # the lessons alone are learned
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def grpo(model, tokenizer, reward, dataset: dict, tmp_path, logged_only=()) -> list[float] | dict[str, list[float]]:
    """The `rewards/<name>/mean` TRL logs over 2 GRPO steps of 4 completions each, `reward` named `<name>`; with
    `logged_only` (reward functions of weight 0 beside it), {name: those means} of every function."""
    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=40,
        learning_rate=1e-4,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        reward_weights=[1.0] + [0.0] * len(logged_only),
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[reward, *logged_only],
        args=args,
        train_dataset=datasets.Dataset.from_dict(dataset),
        processing_class=tokenizer,
    )
    trainer.train()
    means = {
        function.__name__: [
            entry[key] for entry in trainer.state.log_history if (key := f"rewards/{function.__name__}/mean") in entry
        ]
        for function in [reward, *logged_only]
    }
    return means if logged_only else means[reward.__name__]


def cut(text: str, stop_strings: tuple[str, ...]) -> str:
    return re.split("|".join(map(re.escape, stop_strings)), text)[0]


def test_grpo_logs_the_p3_verdicts_of_the_sandbox(taught_llama, char_tokenizer, sandbox, tmp_path):
    calls = []
    with P3Reward(workers=2) as reward:

        def p3(prompts, completions, **columns):
            rewards = reward(prompts, completions, **columns)
            calls.append((completions, columns["puzzle"], rewards))
            return rewards

        prompts = [prompt for prompt, _ in LESSONS[:2]]
        logged = grpo(taught_llama, char_tokenizer, p3, {"prompt": prompts, "puzzle": [SEVEN_F, EIGHT_F]}, tmp_path)

    assert len(logged) == len(calls) == 2
    for (completions, puzzles, rewards), mean in zip(calls, logged):
        programs = [candidate_program(Puzzle("", f), cut(c, SOLVER_STOP)) for c, f in zip(completions, puzzles)]
        assert rewards == [float(verdict.passed) for verdict in sandbox.verify(programs)]
        assert mean == pytest.approx(sum(rewards) / len(rewards))
    assert 0 < sum(sum(rewards) for *_, rewards in calls) < 8  # the taught model's answers pass and fail


def test_grpo_logs_trainings_setter_reward(taught_llama, char_tokenizer, sandbox, tmp_path):
    def solver_llm() -> ScriptedLLM:
        return ScriptedLLM(lambda prompt: "\n    return 7")

    calls = []
    with SetterReward(solver_llm(), attempts=2, w_difficulty=1.0, w_novelty=0.5, workers=2) as reward:

        def setter(prompts, completions, **columns):
            rewards = reward(prompts, completions, **columns)
            calls.append((completions, rewards))
            return rewards

        logged = grpo(
            taught_llama,
            char_tokenizer,
            setter,
            {"prompt": [SETTER_PROMPT] * 2},
            tmp_path,
            logged_only=[reward.difficulty, reward.novelty],  # R_d and R_n logged beside R, not scored again
        )
        embedder, reference_distance = reward.embedder, reward.reference_distance

    # training's functions on the same completions, a fresh archive filled in the same order
    solver = FewShotSolver(solver_llm(), sandbox, fewshot_puzzles()[:6], SolverConfig(attempts=2))
    archive = NoveltyArchive(embedder.get_embedding_dimension())
    config = RewardConfig(w_difficulty=1.0, w_novelty=0.5)
    assert len(logged["setter"]) == len(calls) == 2
    valid = set()
    for step, (completions, rewards) in enumerate(calls):
        texts = [cut(c, SETTER_STOP).lstrip("\n") for c in completions]
        distances = novelty_distances(texts, archive, embedder)
        scored = reward_puzzles(texts, judge_puzzles(texts, solver), distances, reference_distance, config)
        assert rewards == [puzzle.reward for puzzle in scored]
        components = [("difficulty", [p.r_difficulty for p in scored]), ("novelty", [p.r_novelty for p in scored])]
        for name, values in [("setter", rewards), *components]:
            assert logged[name][step] == pytest.approx(sum(values) / len(values)), name
        valid |= {puzzle.valid for puzzle in scored}
    assert valid == {True, False}  # the taught model writes its puzzle, and things near it that are none
