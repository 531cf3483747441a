"""`codeplay synthesize` end to end on the real embedded SmolLM2-135M (slow): every method on two
bundled puzzles with a budget of 2 LLM calls, in chat mode (the model has a chat template)."""

from __future__ import annotations

import json

import pytest

from codeplay_lightning.cli import main
from codeplay_lightning.execution import Program, Sandbox
from codeplay_lightning.puzzles import bundled_puzzles

pytestmark = pytest.mark.slow
BUDGET = 2


@pytest.mark.parametrize("method", ["gif-mcts", "worldcoder", "sample"])
def test_synthesize_on_the_embedded_model(tmp_path, capsys, method):
    out = tmp_path / method
    code = main(
        [
            "synthesize",
            "--task",
            "p3",
            "bundled",
            "--method",
            method,
            "--budget",
            str(BUDGET),
            "--limit",
            "2",
            "--max-new-tokens",
            "32",
            "--dtype",
            "bfloat16",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tasks"] == 2 and summary["llm"] == "smollm2-135m"
    assert summary["llm_calls"] == sum(outcome["calls"] for outcome in summary["outcomes"])
    assert summary["prompt_tokens"] > 0 and 0 < summary["completion_tokens"] <= 32 * summary["llm_calls"]
    puzzles = {puzzle.name: puzzle for puzzle in bundled_puzzles()}
    with Sandbox(workers=1, timeout=1.0) as sandbox:
        for outcome in summary["outcomes"]:
            record = json.loads((out / outcome["file"]).read_text())
            assert 1 <= record["calls"] <= BUDGET and record["search"]["method"] == method
            assert (record["solved_at"] is not None) == record["strict"] == (record["score"] == 1.0)
            puzzle = puzzles[record["name"]]
            verdict = sandbox.verify([Program(puzzle.f, record["program"], puzzle.ans_type)])[0]
            assert verdict.passed == record["strict"]  # the reported score holds when re-judged
