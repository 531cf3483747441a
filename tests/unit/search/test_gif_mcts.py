"""GIF-MCTS, WorldCoder and plain sampling on a ScriptedLLM (deterministic), plus P3Task on a real Sandbox.

`FakeTask` scores a program by its last `# score X` comment and calls it buggy when it contains `BUG`,
so every scripted completion says what it will score."""

from __future__ import annotations

import json
import math
import random
import re
import zlib

import pytest
from support import ScriptedLLM

from codeplay_lightning.puzzles import bundled_puzzles
from codeplay_lightning.search import (
    Feedback,
    GifMcts,
    GifMctsConfig,
    Node,
    P3Task,
    PlainSampling,
    SearchResult,
    WorldCoder,
    make_search,
    run_searches,
)
from codeplay_lightning.search.gif_mcts import FIX, GENERATE, IMPROVE
from codeplay_lightning.search.tasks import DescribedTask, extract_code, generated_program


class FakeTask(DescribedTask):
    description = "a fake task"
    root_code = "def g():\n"

    def evaluate(self, program: str) -> Feedback:
        if "BUG" in program:
            return Feedback(0.0, buggy=True, error="ZeroDivisionError: boom")
        scores = re.findall(r"# score ([0-9.]+)", program)
        score = float(scores[-1]) if scores else 0.0
        return Feedback(score, buggy=False, failing_example=None if score == 1 else f"wrong answer ({score})")


def gen(score: float | str) -> str:
    """A generate completion: three lines, then the closing fence and chatter."""
    return f"    x = 1\n    # score {score}\n    return x\n```\nThat is all."


def rewrite(score: float | str) -> str:
    """An improve / fix completion with a fenced corrected program."""
    return (
        f"## What went wrong\n...\n## Corrected program\n```python\ndef g():\n    # score {score}\n    return 2\n```\n"
    )


BUG = "    x = 1\n    BUG\n    return x\n"


def search(script: list[str], budget: int = 50) -> tuple[GifMcts, ScriptedLLM]:
    return GifMcts(FakeTask(), GifMctsConfig(budget=budget)), ScriptedLLM(script)


def run(tree, llm):
    return run_searches([tree], llm)[0]


def iterate(tree: GifMcts, llm: ScriptedLLM) -> Node:
    """One iteration as `run_searches` makes it: selection's prompt, one LLM call, then the rest."""
    return tree.receive(llm.complete(tree.prompts()))


def bonus(parent_visits: int, same_type: int) -> float:
    return 0.1 * math.sqrt(math.log(parent_visits) / (same_type + 1.0))


# ---------------------------------------------------------------- GIF-MCTS


def test_generate_keeps_two_new_lines_as_state_and_the_rest_as_rollout():
    tree, llm = search([gen(0.4)])
    child = iterate(tree, llm)
    assert (child.action, child.rollout) == (GENERATE, "    return x\n")
    assert child.state == "def g():\n    x = 1\n    # score 0.4\n"
    assert child.program == "def g():\n    x = 1\n    # score 0.4\n    return x\n"  # what was evaluated
    assert child.score == 0.4 and tree.root.children == [child]
    assert llm.prompts[0].endswith("```python\ndef g():\n")  # the root's state, continued


def test_uct_choice_priors_and_weight_fit_hand_computed():
    tree, llm = search([gen(0.4), gen(0.0)])
    first = iterate(tree, llm)
    assert (tree.root.visits, first.visits) == (2, 1)  # visits count at backpropagation, the root from 1
    scores = {id(choice) if isinstance(choice, Node) else choice: uct for uct, choice in tree.uct_scores(tree.root)}
    v_global = (0.5 * 2 + 0.4) / 3  # generate prior 0.5 with count 2, plus the first child's 0.4
    v_local = 0.4
    assert tree.global_value(GENERATE) == pytest.approx(v_global)
    assert tree.global_value(IMPROVE) == pytest.approx(0.55)  # untouched prior
    assert scores[id(first)] == pytest.approx(0.4 + bonus(2, 1))
    assert scores[GENERATE] == pytest.approx((v_global + v_local) / 2 + bonus(2, 1))  # w_G = w_L = 1
    assert tree.select(tree.root) == GENERATE  # 0.4333 > 0.4: a second generate at the root
    second = iterate(tree, llm)
    assert tree.root.children == [first, second]
    assert tree.global_value(GENERATE) == pytest.approx((1.0 + 0.4 + 0.0) / 4)
    # one gradient step on log w of ½(prediction − 0)², prediction = 0.4333
    prediction = (v_global + v_local) / 2
    w_global = math.exp(-prediction * (v_global - prediction) / 2)
    w_local = math.exp(-prediction * (v_local - prediction) / 2)
    assert tree.weights[GENERATE] == pytest.approx([w_global, w_local])
    assert tree.weights[IMPROVE] == [1.0, 1.0]
    # the estimate now uses the fitted weights
    v_global2, v_local2 = tree.global_value(GENERATE), (0.4 + 0.0) / 2
    assert tree.unexplored_value(tree.root, GENERATE) == pytest.approx(
        (w_global * v_global2 + w_local * v_local2) / (w_global + w_local)
    )


def test_root_only_generates_and_expansion_adds_a_sibling_of_the_same_type():
    tree, llm = search([gen(0.4), rewrite(0.5)])
    assert tree.actions(tree.root) == [GENERATE]
    child = iterate(tree, llm)
    assert tree.actions(child) == [GENERATE, IMPROVE]
    assert GENERATE in [choice for _, choice in tree.uct_scores(tree.root)]  # a fresh generate next to `child`
    improved = tree.expand(child, IMPROVE, llm.complete([tree.prompt(child, IMPROVE)])[0])
    assert improved.action == IMPROVE and child.children == [improved]
    assert tree.actions(child) == [GENERATE, IMPROVE]  # a new improve sibling is open again
    # improve got the full program and one failing example; its state is the first 1 + L + L lines
    assert "    return x" in llm.prompts[1] and "wrong answer (0.4)" in llm.prompts[1]
    assert improved.program == "def g():\n    # score 0.5\n    return 2\n"
    assert improved.state == improved.program and improved.rollout == ""


def test_buggy_nodes_get_fixes_with_decreasing_temporary_values_never_backpropagated():
    tree, llm = search([BUG, rewrite("BUG"), rewrite("BUG"), rewrite("BUG"), gen(1)])
    buggy = iterate(tree, llm)
    assert buggy.buggy and buggy.temp_value == pytest.approx(0.99) and tree.actions(buggy) == [FIX]
    assert tree.root.value_count == 0 and tree.root.value == 0.0  # neither 0.99 nor 0 went up
    temps = []
    for _ in range(3):  # the buggy chain wins UCT over a fresh generate until its fixes run out
        fixed = iterate(tree, llm)
        assert fixed.action == FIX and fixed.buggy
        temps.append(buggy.temp_value)
        assert tree.root.value_count == 0
    assert temps == pytest.approx([0.66, 0.33, 0.0])
    assert fixed.fix_depth == 3 and tree.actions(fixed) == []  # at most f = 3 fixes in a row
    assert not tree.alive(buggy)
    assert "ZeroDivisionError: boom" in llm.prompts[1]  # the fix prompt carries the error
    result = run(tree, llm)  # the dead chain is never selected again: the root generates
    assert tree.root.children[1].action == GENERATE
    assert (result.score, result.calls) == (1.0, 5)


def test_successful_fix_sets_the_chain_value_and_backpropagates():
    tree, llm = search([BUG, rewrite(0.7)])
    buggy = iterate(tree, llm)
    fixed = iterate(tree, llm)
    assert fixed.action == FIX and not fixed.buggy
    assert buggy.value == pytest.approx(0.7) and buggy.selection_value == pytest.approx(0.7)
    assert tree.root.value == pytest.approx(0.7) and tree.root.value_count == 1
    assert (tree.root.visits, buggy.visits, fixed.visits) == (3, 2, 1)  # the root starts at 1


def test_an_explored_childs_bonus_counts_its_own_visits_as_in_the_authors_code():
    tree, llm = search([gen(0.4), gen(0.4)])
    first, second = iterate(tree, llm), iterate(tree, llm)
    first.visits, second.visits, tree.root.visits = 15, 1, 17
    scores = {id(choice): uct for uct, choice in tree.uct_scores(tree.root) if isinstance(choice, Node)}
    assert scores[id(first)] == pytest.approx(0.4 + 0.1 * math.sqrt(math.log(17) / 16))
    assert scores[id(second)] == pytest.approx(0.4 + 0.1 * math.sqrt(math.log(17) / 2))
    assert tree.select(tree.root) is not first  # the less visited sibling (or a fresh generate) wins


def test_uct_ties_are_broken_at_random_reproducibly_by_seed():
    def picks(seed: int) -> list[int]:
        tree = GifMcts(FakeTask(), GifMctsConfig(budget=50), seed=seed)
        llm = ScriptedLLM([gen(0.4)] * 3)
        children = [iterate(tree, llm) for _ in range(3)]
        for child in children:  # three identical siblings: equal UCT, and above every fresh action
            child.value_sum, child.value_count, child.visits = 0.9, 1, 1
        return [children.index(tree.select(tree.root)) for _ in range(30)]

    assert picks(0) == picks(0)
    assert set(picks(0)) == {0, 1, 2} and picks(0) != picks(1)


def test_early_stop_at_value_one():
    tree, llm = search([gen(0.2), gen(1), gen(0.3)], budget=10)
    result = run(tree, llm)
    assert (result.score, result.calls, llm.usage.calls) == (1.0, 2, 2)
    assert result.program.endswith("# score 1\n    return x\n")


def test_budget_is_respected_exactly():
    tree, llm = search([gen(0.2)] * 7 + [gen(1)], budget=7)
    result = run(tree, llm)
    assert result.calls == 7 and llm.usage.calls == 7 and len(llm.prompts) == 7
    assert sum(1 for _ in tree.root.walk()) == 8  # the root + one node per call
    assert result.score == pytest.approx(0.2)


def test_json_records_the_whole_tree():
    tree, llm = search([gen(0.4), BUG, rewrite(0.5), gen(0.1), rewrite(0.3)], budget=5)
    run(tree, llm)
    data = json.loads(tree.to_json())
    assert (data["method"], data["calls"], data["solved_at"], data["weights"]) == ("gif-mcts", 5, None, tree.weights)

    def walk(node: dict):
        yield node
        for child in node["children"]:
            yield from walk(child)

    recorded = [
        (node["action"], node["program"], node["score"], node["value"], node["visits"], node["buggy"])
        for node in walk(data["root"])
    ]
    assert recorded == [
        (node.action, node.program, node.score, node.value, node.visits, node.buggy) for node in tree.root.walk()
    ]
    assert len(recorded) == 6  # the root + one node per call


def test_extract_code_takes_the_last_fenced_block():
    assert extract_code("a\n```python\nx = 1\n```\nb\n```python\ny = 2\n```") == "y = 2\n"
    assert extract_code("```python\nz = 3\n") == "z = 3\n"  # unclosed
    assert extract_code("no fence") == "no fence"


# ---------------------------------------------------------------- baselines


def test_worldcoder_beta_posteriors_hand_computed():
    coder, llm = WorldCoder(FakeTask(), budget=3, seed=1), ScriptedLLM([gen(0.4), rewrite(0.0), rewrite(1)])
    coder.receive(llm.complete(coder.prompts()))
    coder.receive(llm.complete(coder.prompts()))
    first, second = coder.candidates  # the only candidate is selected and improved: a failed trial
    assert (first.alpha, first.beta) == pytest.approx((1 + 5 * 0.4, 1 + 5 * (1 - 0.4) + 1))
    assert (second.alpha, second.beta) == pytest.approx((1 + 5 * 0.0, 1 + 5 * 1.0))
    assert "wrong answer (0.4)" in llm.prompts[1]  # healthy: improve with its failing example
    coder.prompts()
    parent, prior = coder.parent, (coder.parent.alpha, coder.parent.beta)
    coder.receive(llm.complete(coder.prompts()))  # the pending selection is kept: the same prompt
    assert (parent.alpha, parent.beta) == pytest.approx((prior[0] + 1, prior[1]))  # a solved trial
    assert coder.finished and coder.prompts() == []
    assert coder.result() == SearchResult("def g():\n    # score 1\n    return 2\n", 1.0, 3, solved_at=3)


def test_worldcoder_thompson_sampling_seeded_and_fix_for_buggy():
    coder = WorldCoder(FakeTask(), budget=5, seed=7)
    coder.add("def g():\n    # score 0.6\n")  # Beta(4, 3)
    coder.add("def g():\n    BUG\n")  # Beta(1, 6)
    coder.add("def g():\n    # score 0.2\n")  # Beta(2, 5)
    assert [(c.alpha, c.beta) for c in coder.candidates] == [(4.0, 3.0), (1.0, 6.0), (2.0, 5.0)]
    rng = random.Random(7)
    draws = [rng.betavariate(a, b) for a, b in [(4, 3), (1, 6), (2, 5)]]
    expected = max(range(3), key=draws.__getitem__)
    assert coder.select() is coder.candidates[expected]
    # a buggy pick is fixed: force it by making its posterior dominate
    coder.candidates[1].alpha, coder.candidates[1].beta = 1e6, 1.0
    (prompt,) = coder.prompts()
    assert coder.parent is coder.candidates[1] and "## Error\nZeroDivisionError: boom" in prompt


def test_plain_sampling_is_pass_at_b():
    llm = ScriptedLLM([gen(0.0), gen(1), gen(0.5)])
    result = run(PlainSampling(FakeTask(), budget=3), llm)
    assert (result.score, result.calls, result.solved_at, llm.usage.calls) == (1.0, 3, 2, 3)
    assert len(set(llm.prompts)) == 1  # B independent samples of the same root prompt
    assert "# score 1" in result.program


# ---------------------------------------------------------------- P3Task on a real sandbox


@pytest.mark.parametrize(
    "name, correct, wrong, wrong_answer",
    [
        ("good_morning", 'def g():\n    return "morning"\n', 'def g():\n    return "evening"\n', "'evening'"),
        ("negative_square_root", "def g():\n    return -12\n", "def g():\n    return 12\n", "12"),
    ],
)
def test_p3_task_scores_fails_and_bugs(sandbox, name, correct, wrong, wrong_answer):
    puzzle = next(p for p in bundled_puzzles() if p.name == name)
    task = P3Task(puzzle, sandbox)
    assert task.evaluate(correct) == Feedback(1.0, buggy=False)
    failed = task.evaluate(wrong)
    example = (
        "Input:\nnone (g takes no arguments)\nExpected:\nf(answer) to be True\n"
        f"Got:\ng() returned {wrong_answer}, and f returned False for it"
    )
    assert (failed.score, failed.buggy, failed.failing_example) == (0.0, False, example)
    raised = task.evaluate("def g():\n    return 1 // 0\n")
    assert raised.buggy and raised.score == 0.0 and "ZeroDivisionError" in raised.error
    mistyped = task.evaluate("def g():\n    return [1]\n")
    assert not mistyped.buggy and "is not of type" in mistyped.failing_example
    assert puzzle.f.strip() in task.generate_prompt(task.root_code)


def test_gif_mcts_solves_a_p3_puzzle_through_the_sandbox(sandbox):
    puzzle = next(p for p in bundled_puzzles() if p.name == "negative_square_root")
    # generate: buggy; fix: runs but fails (the chain's value becomes 0); then a fresh root generate wins
    llm = ScriptedLLM(
        ["    return 1 // 0\n```", "```python\ndef g():\n    return 12\n```", "    return -12\n```", "    return 0\n"]
    )
    result = run(GifMcts(P3Task(puzzle, sandbox), GifMctsConfig(budget=4)), llm)
    assert (result.program, result.score, result.calls) == ("def g():\n    return -12\n", 1.0, 3)


# ---------------------------------------------------------------- many searches, one LLM


def answer_by_hash(prompt: str) -> str:
    """An answer that depends on the prompt alone, so a search's completions do not depend on its
    neighbours in a batch."""
    digest = zlib.crc32(prompt.encode()) % 10
    if digest == 0:
        return BUG
    return rewrite(digest / 10) if prompt.rstrip().endswith("## What went wrong") else gen(digest / 10)


def test_run_searches_batches_every_search_and_matches_solo_runs():
    def searches():
        return [
            make_search("gif-mcts", FakeTask(), budget=6),
            make_search("gif-mcts", FakeTask(), budget=3),
            make_search("worldcoder", FakeTask(), budget=5, seed=3),
            make_search("sample", FakeTask(), budget=4),
        ]

    solo = [run_searches([search], ScriptedLLM(answer_by_hash))[0] for search in searches()]
    llm, rounds = ScriptedLLM(answer_by_hash), []
    together = run_searches(
        searches(), llm, on_round=lambda all_searches: rounds.append(sum(search.finished for search in all_searches))
    )
    assert together == solo
    assert llm.batches[0] == 1 + 1 + 1 + 4  # one prompt per tree search, B for plain sampling
    assert len(llm.batches) == max(result.calls for result in solo if result.calls != 4)
    assert sum(llm.batches) == sum(result.calls for result in solo) == llm.usage.calls
    assert rounds == sorted(rounds) and rounds[-1] == 4


def test_ablations_leave_one_action_type_out_below_the_root():
    """Paper app. B: two of the three actions; the root generates the first program in every variant."""
    for missing in (GENERATE, IMPROVE, FIX):
        tree = make_search(f"gif-mcts-no-{missing}", FakeTask(), budget=20)
        llm = ScriptedLLM([BUG, gen(0.4), rewrite(0.5)] * 7)
        run(tree, llm)
        below_root = [node for node in tree.root.walk() if node is not tree.root]
        assert tree.root.children[0].action == GENERATE and len(below_root) == 20
        assert missing not in {node.action for node in below_root if node not in tree.root.children}
        if missing != GENERATE:
            assert {node.action for node in below_root} == {GENERATE, IMPROVE, FIX} - {missing}


def test_without_generate_a_dead_tree_generates_again_at_the_root():
    tree = make_search("gif-mcts-no-generate", FakeTask(), budget=6)
    llm = ScriptedLLM([BUG, rewrite("BUG"), rewrite("BUG"), rewrite("BUG"), gen(0.3), rewrite(1)])
    result = run(tree, llm)
    assert [child.action for child in tree.root.children] == [GENERATE, GENERATE]  # the fixes ran out
    assert tree.actions(tree.root) == [] and tree.actions(tree.root.children[1]) == [IMPROVE]
    assert (result.score, result.calls) == (1.0, 6)


def test_an_ablation_needs_generate_or_improve():
    with pytest.raises(ValueError, match="with generate or improve"):
        GifMctsConfig(actions=("fix",))
    with pytest.raises(ValueError, match="some of generate, improve, fix"):
        GifMctsConfig(actions=("generate", "rewrite"))


def test_make_search_rejects_unknown_methods():
    with pytest.raises(ValueError, match="unknown search method 'beam'"):
        make_search("beam", FakeTask(), budget=2)


@pytest.mark.parametrize(
    "completion, program",
    [
        ("    return 1\n```\nchatter", "def g():\n    return 1\n"),  # a completion model continues the fence
        ("```python\ndef g():\n    return 2\n```\nchatter", "def g():\n    return 2\n"),  # chat: restated whole
        ("\n```python\n    return 3\n```", "def g():\n    return 3\n"),  # chat: only the continuation
        ("```\nno code here", "def g():\nno code here"),  # a bare fence opens a block too
        ("Let us think.\n```python\ndef g():\n    return 4\n```\n", "def g():\n    return 4\n"),  # chat: prose first
        ("    return 5\n```\nMore:\n```python\nx = 1\n```", "def g():\n    return 5\n"),  # continuation, then chatter
    ],
)
def test_generated_program_from_completion_and_chat_answers(completion, program):
    assert generated_program("def g():\n", completion) == program
