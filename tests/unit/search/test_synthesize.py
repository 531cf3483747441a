"""`synthesize` and `codeplay synthesize` on a real Sandbox: with an LLM that knows the answers to some
tasks (every method, P3 and APPS), and through the CLI on the tiny random Llama."""

from __future__ import annotations

import copy
import json
import math
import random
import shutil
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from support import FIXTURES, ScriptedLLM

from codeplay_lightning.cli import main
from codeplay_lightning.experiments.synthesis_table import action_outcomes, load_runs, solution_action, synthesis_table
from codeplay_lightning.llm import load_llm
from codeplay_lightning.models import SamplingConfig
from codeplay_lightning.puzzles import bundled_puzzles
from codeplay_lightning.puzzles.files import read_puzzle_file
from codeplay_lightning.search import METHODS, P3Task
from codeplay_lightning.search.synthesis import SynthesisConfig, load_tasks, safe_name, synthesize, task_records

FIXTURES = FIXTURES
APPS = FIXTURES / "apps"
P3_FILE = FIXTURES / "p3_small" / "puzzles.json"
WRONG = "def g():\n    return None\n"  # P3: a wrong answer; APPS: prints nothing, or defines no function
CRASH = "raise ValueError('boom')\n"
PAIR_SUMS = "for _ in range(int(input())):\n    print(sum(map(int, input().split())))\n"
REVERSE_WORDS = "def reverse_words(sentence):\n    return ' '.join(reversed(sentence.split()))\n"
THREE = {"name": "three", "f": "def f(x: int):\n    return x == 3"}


class KnowsSomeAnswersLLM(ScriptedLLM):
    """Answers from the prompt and how often it has seen that prompt, whatever else is in the batch:
    for a task whose description it has an answer for, that answer about half the time; otherwise
    a wrong or a crashing program. Every answer is one fenced block, as a chat model writes it."""

    def __init__(self, answers: dict[str, str]):
        super().__init__(self.answer_prompt)
        self.answers = answers  # task description -> a right program
        self.seen: Counter[str] = Counter()

    def answer_prompt(self, prompt: str) -> str:
        draw = random.Random(f"{self.seen[prompt]}:{prompt}").randrange(4)  # a str seed is hashed with SHA-512
        self.seen[prompt] += 1
        right = next((program for description, program in self.answers.items() if description in prompt), None)
        program = right if right is not None and draw < 2 else (WRONG, CRASH)[draw % 2]
        return f"```python\n{program}```\n"


def programs_in(search: dict) -> int:
    """The programs a search state holds: one per LLM call."""
    if search["method"].startswith("gif-mcts"):

        def count(node: dict) -> int:
            return 1 + sum(count(child) for child in node["children"])

        return count(search["root"]) - 1  # the root is no program
    return len(search["candidates"] if search["method"] == "worldcoder" else search["samples"])


def check_run(tasks: dict, llm: ScriptedLLM, out: Path, budget: int) -> list[dict]:
    """Every task file re-verifies and agrees with itself; the summary is what the files and the LLM say."""
    summary = json.loads((out / "summary.json").read_text())
    packed = task_records(out)  # one compressed file, the task files gone
    assert (out / "tasks.jsonl.gz").is_file() and not (out / "tasks").exists()
    records = [packed[outcome["file"]] for outcome in summary["outcomes"]]
    assert sorted(packed) == sorted(outcome["file"] for outcome in summary["outcomes"])
    assert [record["name"] for record in records] == list(tasks)
    for record, task in zip(records, tasks.values()):
        assert task.evaluate(record["program"]).score == record["score"]
        assert record["strict"] == (record["score"] == 1.0) == (record["solved_at"] is not None)
        assert 1 <= record["calls"] <= budget and record["calls"] == programs_in(record["search"])
        assert record["solved_at"] is None or 1 <= record["solved_at"] <= record["calls"]
        assert record["search"]["method"] == record["method"] == summary["method"]
    solved = sum(record["strict"] for record in records)
    assert (summary["tasks"], summary["solved"]) == (len(tasks), solved)
    assert summary["solved_percent"] == pytest.approx(100 * solved / len(tasks))
    assert summary["mean_score"] == pytest.approx(sum(record["score"] for record in records) / len(tasks))
    assert summary["mean_calls"] == pytest.approx(sum(record["calls"] for record in records) / len(tasks))
    assert summary["llm_calls"] == sum(record["calls"] for record in records) == llm.usage.calls
    assert (summary["prompt_tokens"], summary["completion_tokens"]) == (
        llm.usage.prompt_tokens,
        llm.usage.completion_tokens,
    )
    assert summary["llm_seconds"] == pytest.approx(llm.usage.seconds)
    markdown = (out / "summary.md").read_text()
    assert all(f"| {name} |" in markdown for name in tasks)
    return records


# ---------------------------------------------------------------- synthesize()


@pytest.mark.parametrize("method", METHODS)
def test_every_method_writes_results_that_reverify_and_add_up(method, sandbox, tmp_path):
    puzzles = bundled_puzzles()[:3]
    tasks = {puzzle.name: P3Task(puzzle, sandbox) for puzzle in puzzles}
    llm = KnowsSomeAnswersLLM({tasks[puzzle.name].description: puzzle.solutions[0] + "\n" for puzzle in puzzles[:2]})
    progress = []
    summary = synthesize(
        tasks,
        llm,
        SynthesisConfig(method, budget=4, seed=1),
        tmp_path,
        llm_spec="fake",
        arguments={"note": "test"},
        on_progress=lambda *numbers: progress.append(numbers),
    )

    records = check_run(tasks, llm, tmp_path, budget=4)
    assert any(record["strict"] for record in records[:2]) and not records[2]["strict"]  # no answer for the third
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(asdict(summary)))
    assert (summary.llm, summary.budget, summary.arguments) == ("fake", 4, {"note": "test"})
    assert progress[-1] == (3, 3, llm.usage.calls)


def test_apps_problems_are_synthesized_like_puzzles(sandbox, tmp_path):
    tasks = load_tasks("apps", str(APPS), sandbox)
    assert list(tasks) == ["longest_run", "pair_sums", "reverse_words"]
    llm = KnowsSomeAnswersLLM(
        {tasks["pair_sums"].description: PAIR_SUMS, tasks["reverse_words"].description: REVERSE_WORDS}
    )
    synthesize(tasks, llm, SynthesisConfig("gif-mcts", budget=4), tmp_path, llm_spec="fake")
    records = check_run(tasks, llm, tmp_path, budget=4)
    assert [record["strict"] for record in records] == [False, True, True]


def test_a_rerun_replaces_earlier_task_files_and_counts_only_its_own_llm_use(sandbox, tmp_path):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "0003_old.json").write_text("{}")
    puzzle = bundled_puzzles()[0]
    llm = KnowsSomeAnswersLLM({})
    llm.complete(["an earlier prompt"])
    summary = synthesize(
        {puzzle.name: P3Task(puzzle, sandbox)}, llm, SynthesisConfig("sample", budget=2), tmp_path, llm_spec="fake"
    )
    assert list(task_records(tmp_path)) == [f"tasks/0000_{puzzle.name}.json"]  # the earlier run's file is gone
    assert not (tmp_path / "tasks").exists()
    assert summary.llm_calls == 2 and llm.usage.calls == 3


def test_p3_tasks_come_once_per_puzzle_and_bundled_names_the_bundled_set(sandbox):
    names = [entry.name for entry in read_puzzle_file(P3_FILE)]
    assert len(names) > len(set(names))  # the file repeats instances with several reference solutions
    assert list(load_tasks("p3", str(P3_FILE), sandbox)) == list(dict.fromkeys(names))
    bundled = load_tasks("p3", "bundled", sandbox)
    assert list(bundled) == [puzzle.name for puzzle in bundled_puzzles()]
    assert all(isinstance(task, P3Task) for task in bundled.values())


def test_p3_tasks_of_a_split_and_the_first_instance_of_each_class(sandbox):
    split = str(P3_FILE.parent / "split.json")
    test = load_tasks("p3", str(P3_FILE), sandbox, split="test", p3_split=split)
    assert list(test) == ["OddPerfect:0", "ReversedWords:0", "Diagonal:0"]  # HalfOf is in neither split
    train = load_tasks("p3", str(P3_FILE), sandbox, split="train", p3_split=split)
    assert list(train) == ["Greeting:0", "Greeting:1", "DistinctPair:0", "FactorialOf:0"]
    firsts = load_tasks("p3", str(P3_FILE), sandbox, split="train", p3_split=split, first_of_class=True)
    assert list(firsts) == ["Greeting:0", "DistinctPair:0", "FactorialOf:0"]
    with pytest.raises(ValueError, match="only with --task p3"):
        load_tasks("apps", str(APPS), sandbox, first_of_class=True)


def test_task_file_names_keep_only_safe_characters():
    assert safe_name("Mastermind:0") == "Mastermind_0"
    assert safe_name("../a b/c") == "a_b_c"


def test_chat_is_decided_once_in_load_llm(tiny_model_dir, tmp_path, char_tokenizer):
    """Chat for a server, and for a local model exactly when its tokenizer has a chat template."""
    sampling = SamplingConfig(max_new_tokens=4)
    assert load_llm("openai:http://127.0.0.1:8000/v1#m", sampling).chat
    assert not load_llm(str(tiny_model_dir), sampling).chat
    shutil.copytree(tiny_model_dir, tmp_path / "templated")
    with_template = copy.deepcopy(char_tokenizer)
    with_template.chat_template = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
    with_template.save_pretrained(tmp_path / "templated")
    assert load_llm(str(tmp_path / "templated"), sampling).chat
    assert not load_llm(str(tmp_path / "templated"), sampling, chat=False).chat  # told: as told


# ---------------------------------------------------------------- the CLI


def test_cli_synthesizes_the_first_bundled_puzzles_with_a_local_model(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert (
        main(
            [
                "synthesize",
                "--task",
                "p3",
                "bundled",
                "--method",
                "worldcoder",
                "--budget",
                "2",
                "--limit",
                "2",
                "--llm",
                str(tiny_model_dir),
                "--max-new-tokens",
                "8",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert [outcome["name"] for outcome in summary["outcomes"]] == [p.name for p in bundled_puzzles()[:2]]
    assert summary["llm"] == str(tiny_model_dir) and summary["budget"] == 2
    assert summary["llm_calls"] == 4 and summary["completion_tokens"] > 0  # no program of 8 random characters wins
    assert summary["arguments"]["chat"] is False  # the tiny tokenizer has no chat template
    assert summary["arguments"]["limit"] == 2 and summary["arguments"]["task"] == ["p3", "bundled"]
    printed = capsys.readouterr().out
    assert "solved (score 1)   0 (0.0%)" in printed and f"results written to {out}" in printed


def test_cli_synthesizes_apps_problems_into_the_default_directory(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "synthesize",
                "--task",
                "apps",
                str(APPS),
                "--method",
                "sample",
                "--budget",
                "2",
                "--llm",
                str(tiny_model_dir),
                "--max-new-tokens",
                "8",
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "synthesis" / "sample" / "summary.json").read_text())
    assert summary["tasks"] == 3 and summary["llm_calls"] == 6


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--task", "lean", "bundled"], "unknown task kind 'lean'"),
        (["--task", "p3", "missing.jsonl"], "cannot read missing.jsonl"),
        (["--task", "apps", "missing"], "missing is not a directory"),
        (["--task", "p3", "bundled", "--llm", "openai:http://x"], "must be openai:BASE_URL#MODEL"),
        (["--task", "p3", "bundled", "--budget", "0"], "budget must be at least 1"),
        (["--task", "p3", "bundled", "--limit", "0"], "--limit must be at least 1"),
    ],
)
def test_cli_errors_are_one_line(arguments, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["synthesize", *arguments]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and message in error and "\n" not in error


@pytest.mark.parametrize(
    "lines, messages",
    [
        (
            [json.dumps(THREE), "{broken", json.dumps({"g": "def g(): pass"})],
            ["line 2 is not JSON", "line 3 has no string field 'f'"],
        ),
        (
            [json.dumps(THREE), json.dumps(THREE | {"f": "def f(x: int):\n    return x == 4"})],
            ["two different puzzles named 'three'"],
        ),
        ([], ["holds no puzzle"]),
    ],
)
def test_cli_rejects_a_puzzle_file_it_cannot_use_whole(lines, messages, tmp_path, capsys):
    source = tmp_path / "puzzles.jsonl"
    source.write_text("".join(line + "\n" for line in lines))
    assert main(["synthesize", "--task", "p3", str(source)]) == 2
    error = capsys.readouterr().err.strip()
    assert all(message in error for message in messages) and "\n" not in error


def test_cli_chat_on_a_model_without_a_chat_template_is_an_error(tiny_model_dir, tmp_path, capsys):
    assert (
        main(["synthesize", "--task", "p3", "bundled", "--chat", "--llm", str(tiny_model_dir), "--out", str(tmp_path)])
        == 2
    )
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after transformers' loading bar
    assert error.startswith("error: ") and "chat template" in error


# ---------------------------------------------------------------- budgets and the comparison table


class RecordingLLM:
    """An LLM that keeps every batch it was asked for, with its completions."""

    def __init__(self, llm):
        self.llm, self.batches = llm, []

    @property
    def usage(self):
        return self.llm.usage

    def complete(self, prompts: list[str]) -> list[str]:
        completions = self.llm.complete(prompts)
        self.batches.append(list(zip(prompts, completions)))
        return completions


@pytest.mark.parametrize("method", ["gif-mcts", "gif-mcts-no-fix", "worldcoder"])
def test_a_run_at_a_smaller_budget_is_the_first_calls_of_a_larger_one(method, tiny_model_dir, sandbox, tmp_path):
    """What lets one run at budget 16 report budgets 4 and 8: a tree search's first k calls do not depend on its
    budget, and a seeded local model samples the same rows the same way."""

    def batches(budget: int) -> list:
        generator = torch.Generator().manual_seed(0)
        llm = RecordingLLM(load_llm(str(tiny_model_dir), SamplingConfig(max_new_tokens=12), generator=generator))
        tasks = {puzzle.name: P3Task(puzzle, sandbox) for puzzle in bundled_puzzles()[:3]}
        synthesize(tasks, llm, SynthesisConfig(method, budget), tmp_path / str(budget), llm_spec="tiny")
        return llm.batches

    small, large = batches(3), batches(7)
    assert len(small) == 3 and len(large) == 7 and large[:3] == small
    assert len({completion for batch in large for _, completion in batch}) > 10  # sampled, not constant


def write_run(directory: Path, method: str, seed: int, solved_at: dict[str, int | None], tokens: int) -> None:
    """A synthesize output directory by hand: one task file per task, a GIF-MCTS tree whose one child solved."""
    outcomes = []
    (directory / "tasks").mkdir(parents=True)
    for name, first in solved_at.items():
        child = {"action": "improve", "program": "def g(): return 1", "buggy": False, "children": []}
        child["score"] = 1.0 if first else 0.0
        search = {"method": method, "root": {"action": "root", "program": "", "score": 0.0, "children": [child]}}
        if not method.startswith("gif-mcts"):
            search = {"method": method, "samples": []}
        (directory / "tasks" / f"{name}.json").write_text(json.dumps({"search": search}))
        outcomes.append({"name": name, "file": f"tasks/{name}.json", "strict": first is not None, "solved_at": first})
    summary = {"method": method, "budget": 16, "tasks": len(outcomes), "outcomes": outcomes}
    summary |= {"prompt_tokens": tokens, "completion_tokens": tokens, "arguments": {"seed": seed}}
    (directory / "summary.json").write_text(json.dumps(summary))


def test_the_table_counts_solutions_by_budget_with_paired_standard_errors(tmp_path, capsys):
    runs = {
        ("gif-mcts", 0): {"a": 2, "b": 9, "c": None},
        ("gif-mcts", 1): {"a": 5, "b": None, "c": 16},
        ("sample", 0): {"a": 1, "b": None, "c": None},
        ("sample", 1): {"a": None, "b": None, "c": None},
    }
    directories = []
    for (method, seed), solved_at in runs.items():
        directories.append(tmp_path / f"{method}-{seed}")
        write_run(directories[-1], method, seed, solved_at, tokens=300)
    assert main(["synthesis-table", *map(str, directories), "--budgets", "16", "4", "--title", "T"]) == 0
    table, actions = capsys.readouterr().out.split("What each action's calls produced:")
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table.splitlines()}
    assert actions.splitlines()[4:] == ["| gif-mcts | improve | 6 | 0 (0%) | 0 (0%) | 0 (0%) | 4 (67%) |"]
    # gif-mcts per task at 4: a 1/2, b 0, c 0 -> mean 1/6; at 16: a 1, b 1/2, c 1/2 -> mean 2/3
    se_4 = math.sqrt(((1 / 2 - 1 / 6) ** 2 + 2 * (1 / 6) ** 2) / 2 / 3)
    se_16 = math.sqrt(((1 - 2 / 3) ** 2 + 2 * (1 / 2 - 2 / 3) ** 2) / 2 / 3)
    assert rows["gif-mcts"][1:4] == ["2", f"{100 / 6:.1f} ± {100 * se_4:.1f}%", f"{200 / 3:.1f} ± {100 * se_16:.1f}%"]
    # paired differences to sampling (a 1/2, b 0, c 0 at both budgets): at 4 all zero, at 16 (1/2, 1/2, 1/2)
    assert rows["gif-mcts"][4:6] == ["+0.0 ± 0.0", "+50.0 ± 0.0"]
    assert rows["gif-mcts"][6:] == [f"{(2 + 9 + 5 + 16) / 4:.1f}", "200", "improve 4 |"]
    assert rows["sample"][1:7] == ["2", "16.7 ± 16.7%", "16.7 ± 16.7%", "—", "—", "1.0"]


def test_the_action_table_counts_what_each_action_produced(tmp_path, capsys):
    def node(action, program, buggy=False, score=0.0, children=()):
        return {"action": action, "program": program, "buggy": buggy, "score": score, "children": list(children)}

    broken = "def g(:\n    return 1"
    raising = "def g():\n    return 1 / 0"
    tree = node(
        "root",
        "def g():\n",
        children=[
            node("generate", broken, buggy=True, children=[node("fix", broken, buggy=True)]),
            node(
                "generate",
                raising,
                buggy=True,
                children=[node("fix", raising + "\n", buggy=True), node("fix", "def g():\n    return 2", score=1.0)],
            ),
        ],
    )
    assert action_outcomes({"search": {"root": tree}}) == {
        "generate": Counter({"calls": 2, "does not parse": 1, "raises or times out": 1}),
        "fix": Counter(
            {"calls": 3, "does not parse": 1, "raises or times out": 1, "same as its parent": 2} | {"solved": 1}
        ),
    }
    assert solution_action({"search": {"root": tree}}) == "fix"
    samples = {"method": "sample", "samples": [node("", broken, buggy=True), node("", "def g(): return 2", score=1)]}
    assert solution_action({"search": samples}) is None
    assert action_outcomes({"search": samples}) == {"sample": Counter({"calls": 2, "does not parse": 1, "solved": 1})}
    assert action_outcomes({"search": {"method": "worldcoder", "candidates": samples["samples"]}}) == {}
    write_run(tmp_path / "gif", "gif-mcts", 0, {"a": 1}, tokens=1)
    (tmp_path / "gif" / "tasks" / "a.json").write_text(json.dumps({"search": {"method": "gif-mcts", "root": tree}}))
    write_run(tmp_path / "sample", "sample", 0, {"a": 1}, tokens=1)
    (tmp_path / "sample" / "tasks" / "a.json").write_text(json.dumps({"search": samples}))
    assert main(["synthesis-table", str(tmp_path / "gif"), str(tmp_path / "sample")]) == 0
    rows = capsys.readouterr().out.split("What each action's calls produced:")[1].splitlines()[4:]
    assert rows == [
        "| gif-mcts | fix | 3 | 1 (33%) | 1 (33%) | 2 (67%) | 1 (33%) |",
        "| gif-mcts | generate | 2 | 1 (50%) | 1 (50%) | 0 (0%) | 0 (0%) |",
        "| sample | sample | 2 | 1 (50%) | 0 (0%) | 0 (0%) | 1 (50%) |",
    ]


def test_the_table_refuses_runs_on_other_tasks_or_below_the_largest_budget(tmp_path):
    write_run(tmp_path / "gif", "gif-mcts", 0, {"a": 1}, tokens=1)
    write_run(tmp_path / "sample", "sample", 0, {"b": 1}, tokens=1)
    runs = load_runs([tmp_path / "gif", tmp_path / "sample"])
    with pytest.raises(ValueError, match="not on the same tasks"):
        synthesis_table(runs, [4], "T")
    with pytest.raises(ValueError, match="budget below 32: gif-mcts seed 0"):
        synthesis_table(runs[:1], [32], "T")
    with pytest.raises(ValueError, match="no summary.json"):
        load_runs([tmp_path])
