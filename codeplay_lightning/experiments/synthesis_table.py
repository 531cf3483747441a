"""`synthesis_table(run_dirs)`: the paper's comparison table from `codeplay synthesize` runs (method × seed).

One run at budget B gives every smaller budget k: a task counts as solved at k when its first program scoring 1
came by call k. For the tree searches (GIF-MCTS, its ablations, WorldCoder) that is exactly the run at budget k:
nothing in them depends on the budget but when they stop, and the LLM's batches are the same up to call k
(tested). For plain sampling it is "solved by one of its first k samples": the same distribution as a run at k
(every sample is an independent draw), not the same numbers.

Per method, over the seeds of each task: the solved fraction at each budget with its standard error across tasks
(each task's mean over seeds is one observation), and the difference to the baseline method on the same tasks
(paired) with its standard error; LLM calls to the first solution, tokens per task, and which action wrote the
solutions (GIF-MCTS trees). A second table says what each GIF-MCTS action's calls (and sampling's) produced:
programs that do not parse, programs that raise or time out, programs identical to the node they improve or fix,
and solutions.
"""

from __future__ import annotations

import ast
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

from codeplay_lightning.experiments.statistics import clustered_mean_and_se, mean_and_se
from codeplay_lightning.search.synthesis import task_records

BASELINE = "sample"


def load_runs(run_dirs: list[Path]) -> list[dict]:
    """Each directory's summary.json, with `seed`, `solution_actions` (the action that made each solved task's
    first solution, GIF-MCTS only) and `action_outcomes` (`action_outcomes` summed over the tasks)."""
    runs = []
    for directory in run_dirs:
        path = directory / "summary.json"
        if not path.is_file():
            raise ValueError(f"{directory} has no summary.json: not a codeplay synthesize output directory")
        run = json.loads(path.read_text())
        run["seed"] = run["arguments"].get("seed", 0)
        run["solution_actions"], run["action_outcomes"] = Counter(), defaultdict(Counter)
        records = task_records(directory)
        for outcome in run["outcomes"]:
            record = records[outcome["file"]]
            if outcome["strict"] and (action := solution_action(record)):
                run["solution_actions"][action] += 1
            for action, counts in action_outcomes(record).items():
                run["action_outcomes"][action] += counts
        runs.append(run)
    return runs


def solution_action(record: dict) -> str | None:
    """The action type of the first node scoring 1 in a GIF-MCTS tree (None for other methods)."""
    return next((node["action"] for node, _ in _tree_edges(record["search"]) if node["score"] >= 1.0), None)


def _tree_edges(search: dict) -> Iterator[tuple[dict, dict]]:
    """Every node below a GIF-MCTS tree's root with its parent, depth first; nothing for the other methods."""
    stack = [search["root"]] if "root" in search else []
    while stack:
        parent = stack.pop()
        for node in parent["children"]:
            yield node, parent
            stack.append(node)


OUTCOMES = ("calls", "does not parse", "raises or times out", "same as its parent", "solved")


def action_outcomes(record: dict) -> dict[str, Counter]:
    """Per action of a GIF-MCTS tree, what its calls produced (`OUTCOMES`); plain sampling's calls as the action
    "sample"; {} for WorldCoder, which does not record which program each call refined. A buggy program that parses
    raised or ran out of time in the sandbox; "same as its parent": an improve or fix that returned the program it
    was given (whitespace aside)."""
    search = record["search"]
    outcomes: dict[str, Counter] = defaultdict(Counter)
    for sample in search.get("samples", []):
        outcomes["sample"] += _outcome(sample, parent_program=None)
    for node, parent in _tree_edges(search):
        outcomes[node["action"]] += _outcome(node, None if parent["action"] == "root" else parent["program"])
    return outcomes


def _outcome(node: dict, parent_program: str | None) -> Counter:
    parses = _parses(node["program"])
    unchanged = parent_program is not None and node["program"].strip() == parent_program.strip()
    counts = {"does not parse": not parses, "raises or times out": parses and node["buggy"]}
    counts |= {"same as its parent": unchanged, "solved": node["score"] >= 1.0}
    return Counter({"calls": 1} | {outcome: int(value) for outcome, value in counts.items()})


def _parses(program: str) -> bool:
    try:
        ast.parse(program)
    except SyntaxError:
        return False
    return True


def solved_at_budget(outcome: dict, budget: int) -> bool:
    return outcome["solved_at"] is not None and outcome["solved_at"] <= budget


def per_task_rates(runs: list[dict], budget: int) -> dict[str, float]:
    """Each task's solved fraction over the runs (seeds) of one method."""
    solved: dict[str, list[bool]] = defaultdict(list)
    for run in runs:
        for outcome in run["outcomes"]:
            solved[outcome["name"]].append(solved_at_budget(outcome, budget))
    return {name: sum(values) / len(values) for name, values in solved.items()}


def synthesis_table(runs: list[dict], budgets: list[int], title: str) -> str:
    """The markdown table described in the module docstring."""
    by_method: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        by_method[run["method"]].append(run)
    largest = max(budgets)
    too_small = [f"{run['method']} seed {run['seed']}" for run in runs if run["budget"] < largest]
    if too_small:
        raise ValueError(f"runs with a budget below {largest}: {', '.join(too_small)}")
    tasks = {
        method: sorted({o["name"] for run in group for o in run["outcomes"]}) for method, group in by_method.items()
    }
    if len({tuple(names) for names in tasks.values()}) != 1:
        raise ValueError("the runs are not on the same tasks: every method must search the same task set")
    baseline = by_method.get(BASELINE)
    header = ["method", "seeds", *[f"solved at {k}" for k in budgets]]
    header += [f"Δ vs {BASELINE} at {k}" for k in budgets] if baseline else []
    header += ["calls to 1st solution", "tokens per task", "solutions by action"]
    lines = [f"## {title}", "", "| " + " | ".join(header) + " |", "|---|" + "--:|" * (len(header) - 1)]
    for method, group in sorted(by_method.items(), key=lambda item: _order(item[0])):
        cells = [method, str(len(group))]
        for budget in budgets:
            mean, se = mean_and_se(list(per_task_rates(group, budget).values()))
            cells.append(f"{100 * mean:.1f} ± {100 * se:.1f}%")
        for budget in budgets if baseline else []:
            ours, theirs = per_task_rates(group, budget), per_task_rates(baseline, budget)
            differences = [ours[name] - theirs[name] for name in ours]
            mean, se = mean_and_se(differences)
            cell = f"{100 * mean:+.1f} ± {100 * se:.1f}"
            if (clustered := _family_clustered_se(list(ours), differences)) is not None:
                cell += f" ({100 * clustered:.1f})"
            cells.append("—" if method == BASELINE else cell)
        firsts = [o["solved_at"] for run in group for o in run["outcomes"] if solved_at_budget(o, largest)]
        cells.append(f"{sum(firsts) / len(firsts):.1f}" if firsts else "—")
        tokens = sum(run["prompt_tokens"] + run["completion_tokens"] for run in group)
        cells.append(f"{tokens / sum(run['tasks'] for run in group):,.0f}")
        actions = sum((run["solution_actions"] for run in group), Counter())
        cells.append(", ".join(f"{action} {count}" for action, count in sorted(actions.items())) or "—")
        lines.append("| " + " | ".join(cells) + " |")
    names = next(iter(tasks.values()))
    if baseline and _family_clustered_se(names, [0.0] * len(names)) is not None:
        lines += [
            "",
            f"Δ: the paired difference to {BASELINE} in points ± its standard error over tasks; in brackets, clustered "
            "by family (a task's name before ':', a corpus family or a P3 class), whose tasks are alike.",
        ]
    return "\n".join(lines) + "\n" + action_table(by_method)


def _family_clustered_se(names: list[str], differences: list[float]) -> float | None:
    """The standard error of the mean difference clustered by family (a name's part before ':'); None when no
    family holds two tasks (then it is the ordinary one)."""
    families = [name.split(":")[0] for name in names]
    if len(set(families)) == len(families):
        return None
    return clustered_mean_and_se(differences, families)[1]


def action_table(by_method: dict[str, list[dict]]) -> str:
    """What the calls of each action produced (`action_outcomes`), summed over seeds and tasks ("" without any)."""
    rows = []
    for method, group in sorted(by_method.items(), key=lambda item: _order(item[0])):
        totals: dict[str, Counter] = defaultdict(Counter)
        for run in group:
            for action, counts in run["action_outcomes"].items():
                totals[action] += counts
        for action, counts in sorted(totals.items()):
            share = [f"{counts[o]} ({100 * counts[o] / counts['calls']:.0f}%)" for o in OUTCOMES[1:]]
            rows.append(f"| {method} | {action} | {counts['calls']} | " + " | ".join(share) + " |")
    if not rows:
        return ""
    header = "| method | action | " + " | ".join(OUTCOMES) + " |"
    return "\n".join(["", "What each action's calls produced:", "", header, "|---|---|" + "--:|" * 5, *rows]) + "\n"


def _order(method: str) -> tuple[int, str]:
    """The paper's order: GIF-MCTS, its ablations, WorldCoder, sampling."""
    rank = 0 if method == "gif-mcts" else 1 if method.startswith("gif-mcts") else 2 if method == "worldcoder" else 3
    return rank, method
