"""`report.md`: the comparison's summaries as markdown: the summary table, the effects by run, each seed against its
baseline run, self-play's tables, and puzzles at the end of training (the paper's appendix C)."""

from __future__ import annotations

import re

from codeplay_lightning.experiments.runs import PANELS, WINDOW, TrainingRun
from codeplay_lightning.experiments.summaries import LAST, SAMPLES, spread_between_seeds


def report(
    runs: list[TrainingRun],
    summaries: list[dict],
    selfplay: list[dict],
    by_run: tuple[dict[int | None, list[dict]], list[dict]],
    memory: list[dict],
    seed: int,
    planned: dict | None = None,
) -> str:
    """The report of `compare`'s findings: each run's `summaries`, `selfplay`'s summaries, `by_run` (each seed's
    rows against its baseline, the effects by run), the runs' `memory` summaries and the `planned` tests
    (`endpoints.plan_tests`; None: no plan given), with `seed` the seed of the appendix's samples."""
    lines = [
        "# Setter training runs compared",
        "",
        "![R_d, R_n and R against puzzles generated](figure.png)",
        "",
        f"As the paper's figure 2: R_d, R_n and R against puzzles generated, each the mean of the last "
        f"{WINDOW} puzzles (fewer at the start). Each puzzle `index` counts once (the last logged).",
        "",
        f"| run | puzzles | valid % | solved % | R_d | R_n | R | distinct in last {LAST} |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for run, row in zip(runs, summaries):
        final = [_number(row["final"][key]) for key in PANELS]
        lines.append(
            f"| {run.label} | {row['puzzles']} | {_percent(row['valid_frac'])} | "
            f"{_percent(row['solved_frac'])} | {' | '.join(final)} | "
            f"{row['distinct_last']} of {min(LAST, row['puzzles'])} |"
        )
    lines += [
        "",
        "R_d, R_n, R: the smoothed values at the last puzzle. Solved: D is finite (the Solver passed at least once).",
        "",
    ]
    noted = [f"- **{run.label}** (`{run.path}`): " + "; ".join(run.notes) for run in runs if run.notes]
    lines += [*noted, ""] if noted else []
    within, effects = by_run
    lines += plan_report(planned) if planned else []
    lines += effects_report(effects) if effects else []
    several = len({run.seed for run in runs}) > 1
    for run_seed, rows in within.items():
        lines += baseline_report(rows, run_seed if several else None)
    lines += selfplay_report(selfplay) if selfplay else []
    lines += evaluation_report(runs) if any(run.evaluations for run in runs) else []
    lines += memory_report(memory) if memory else []
    lines += [
        "## Puzzles at the end of training (as the paper's appendix C)",
        "",
        f"{SAMPLES} per run, drawn without replacement from its last {LAST} (seed {seed}; all of them when fewer).",
        "",
    ]
    for run, row in zip(runs, summaries):
        lines += [f"### {run.label}", ""]
        if not row["sampled"]:
            lines += ["No puzzles logged yet.", ""]
        for puzzle in row["sampled"]:
            lines += [
                f"Puzzle {puzzle['index']}: {_difficulty(puzzle)}, R_d = {puzzle['R_d']:.2f}, "
                f"R_n = {puzzle['R_n']:.2f}",
                "",
                *_fenced(puzzle["puzzle"].strip("\n")),
                "",
            ]
    return "\n".join(lines)


def plan_report(planned: dict) -> list[str]:
    """The "Pre-registered tests" section: each family's endpoints per seed, over the seeds, and Holm-corrected."""
    plan, seeds = planned["plan"], planned["seeds"]
    lines = [
        "## Pre-registered tests",
        "",
        f"The endpoints of `{plan.path}`, written down before the runs: each measured per seed (a preset against its "
        f"seed's `{plan.baseline}` run, or against zero; several presets: their mean within the seed), then the mean "
        "over seeds ± the between-seed SE, its 95% interval, Student's t on n − 1 degrees of freedom (two-sided), and "
        "p corrected by "
        f"Holm within its family beside the uncorrected. Only runs that finished {plan.iterations} iterations count. "
        f"An endpoint is tested once all the plan's seeds ({', '.join(map(str, plan.seeds))}) have run; until then it "
        "gives the mean of those that have, no test (–), and counts as p = 1 in its family's correction. "
        "Fractions in points.",
        "",
        *(f"- {note}" for note in planned["notes"]),
        *([""] if planned["notes"] else []),
    ]
    for family, tests in planned["families"].items():
        lines += [
            f"### {family} (Holm over {len(tests)})",
            "",
            "| endpoint | statistic, iterations | preset(s) | against | "
            + "".join(f"seed {seed} | " for seed in seeds)
            + "mean ± SE | 95% interval | t (df) | p | p, Holm |",
            "|---|---|---|---|" + "--:|" * (len(seeds) + 5),
        ]
        for test in tests:
            endpoint, effect, holm = test["endpoint"], test["effect"], test["holm"]
            scale, unit = (100, " pt") if endpoint.percent else (1, "")
            window = "" if endpoint.window is None else f", {endpoint.window[0]}–{endpoint.window[1]}"
            per_seed = [
                "–" if seed not in test["values"] else f"{scale * test['values'][seed]:+.3g}{unit}" for seed in seeds
            ]
            mean = "–" if not effect.effects else f"{scale * effect.mean:+.3g}{unit}"
            mean += f" ± {scale * effect.se:.2g}" if effect.se is not None else ""
            half = effect.half_interval
            interval = (
                "–" if half is None else f"{scale * (effect.mean - half):+.3g} to {scale * (effect.mean + half):+.3g}"
            )
            t = "–" if effect.t is None else f"{effect.t:+.2f} ({effect.runs - 1})"
            p = "–" if effect.p is None else f"{effect.p:.3f}"
            corrected = "–" if holm is None else f"{holm:.3f}"
            against = "zero" if endpoint.against == "zero" else f"`{plan.baseline}`"
            lines.append(
                f"| {endpoint.name} | {endpoint.statistic}{window} | {', '.join(endpoint.presets)} | {against} | "
                + "".join(f"{cell} | " for cell in per_seed)
                + f"{mean} | {interval} | {t} | {p} | {corrected} |"
            )
        lines.append("")
    return lines


def effects_report(effects: list[dict]) -> list[str]:
    """The "Effects by run" section: per seed, then the mean over seeds with the between-seed SE and t."""
    seeds = list(dict.fromkeys(seed for effect in effects for seed in effect["seeds"]))
    lines = [
        "## Effects by run",
        "",
        "The unit of a reward's effect is the training run: each run against the baseline run of its own seed (the "
        "unrewarded `none`; for a learning Solver, the same self-play run with a fixed Solver, or, for what the "
        "Solver learned, its own initial Solver), then the mean over seeds with the between-seed standard error and "
        "Student's t (n − 1 degrees of freedom). In brackets, secondary: the within-run binomial (or, for means, "
        "per-puzzle) standard error, which counts the puzzles of one trajectory as independent: it is not the "
        "uncertainty of a reward's effect, which only the seeds give (they may differ by more than it, or by less). "
        "With one seed there is no between-run uncertainty to report.",
        "",
        *(
            ["![Effects by run: each seed's, and their mean with its 95% interval](effects.png)", ""]
            if spread_between_seeds(effects)
            else []
        ),
        "| run | statistic | " + " | ".join(f"seed {seed}" for seed in seeds) + " | mean over seeds | t (df), p |",
        "|---|---|" + "--:|" * len(seeds) + "--:|--:|",
    ]
    for effect in effects:
        scale, unit = (100, " pt") if effect["percent"] else (1, "")
        summary = effect["summary"]
        cells = dict(zip(effect["seeds"], zip(summary.effects, effect["within_se"])))
        per_seed = [
            "–" if seed not in cells else f"{scale * cells[seed][0]:+.3g}{unit}" + _within(cells[seed][1], scale)
            for seed in seeds
        ]
        mean = f"{scale * summary.mean:+.3g}{unit}"
        mean += f" ± {scale * summary.se:.2g}" if summary.se is not None else " (one seed)"
        test = f"{summary.t:+.2f} ({summary.runs - 1}), {summary.p:.3f}" if summary.t is not None else "–"
        lines.append(f"| {effect['name']} | {effect['label']} | " + " | ".join(per_seed) + f" | {mean} | {test} |")
    return [*lines, ""]


def baseline_report(rows: list[dict], seed: int | None = None) -> list[str]:
    """The section of `against_baseline`'s rows of one seed: each number with its difference to the baseline in
    within-run standard errors."""
    first, last, middle = rows[0]["positions"]
    baseline = next(row["name"] for row in rows if row["baseline"])
    against = "the unrewarded run" if baseline == "none" else f"`{baseline}`"
    lines = [
        f"## Against {against}" + (f", seed {seed}" if seed is not None else ""),
        "",
        "Fractions over the iterations after the first (identical in runs of one seed); R_n over the same archive "
        f"positions in every run, puzzles {first}–{last}, and {middle}–{last}. In brackets: the difference to "
        f"{against} in within-run standard errors (binomial for fractions; of the means for R_n, neighbouring "
        "puzzles counted as independent): this run against that one, not the reward's effect (see Effects by "
        "run).",
        "",
        f"| run | solved of valid, by iteration | valid, it. 1+ | solved of valid, it. 1+ | mean R_n, {first}–{last} | "
        f"mean R_n, {middle}–{last} | distinct in last {LAST} |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]

    def cell(statistic: tuple[float, float, float], baseline: bool, percent: bool = False) -> str:
        ours, theirs, se = statistic
        text = f"{100 * ours:.1f}%" if percent else f"{ours:.3f}"
        return text if baseline else f"{text} ({(ours - theirs) / se if se else 0.0:+.1f} SE)"

    for row in rows:
        by_iteration = " ".join("–" if value is None else f"{value:.2f}" for value in row["solved_by_iteration"])
        cells = [
            row["label"],
            by_iteration,
            cell(row["valid"], row["baseline"], percent=True),
            cell(row["solved"], row["baseline"]),
            cell(row["R_n"], row["baseline"]),
            cell(row["R_n_second_half"], row["baseline"]),
            str(row["distinct_last"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def selfplay_report(rows: list[dict]) -> list[str]:
    """The "Self-play" section: a table per self-play run, its initial Solver beside its current one."""
    lines = [
        "## Self-play",
        "",
        "![The Solvers' pass rates, their evaluations over BC phases, and R_n](selfplay.png)",
        "",
        "Left: the pass rate 1/D (0: unsolved) of the current Solver (solid) and of the initial one (dashed) on "
        f"the valid puzzles the initial Solver also attempted, each the mean of the last {WINDOW} of them. Middle: "
        "each evaluation set's pass@1 (solid) and pass@K (dashed) after each BC phase (`solver.jsonl`), phase 0 "
        "being the initial Solver. Right: R_n, as in the figure above. In the tables, the evaluations are phase "
        "0's and the last phase's.",
        "",
    ]
    for row in rows:
        attempted, rate = row["attempted"], row["pass_rate"]
        every = {None: "", 0: " (fixed: `selfplay.learn_every` 0)"}.get(
            row["learn_every"], f" (one after every {row['learn_every']} iterations)"
        )
        lines += [
            f"| {row['label']} | initial Solver | current Solver |",
            "|---|--:|--:|",
            f"| BC phases | 0 | {row['phases']}{every} |",
            f"| pass rate 1/D, mean of the last {min(LAST, attempted)} of the {attempted} puzzles the initial "
            f"Solver attempted | {_number(rate['initial'])} | {_number(rate['current'])} |",
            f"| its trend per 100 puzzles generated (least-squares slope ± SE) | {_estimate(row['trend']['initial'])} "
            f"| {_estimate(row['trend']['current'])} |",
            f"| current − initial on the same puzzles, first half / second half (± SE) | | "
            f"{_estimate(row['gap']['first_half'])} / {_estimate(row['gap']['second_half'])} |",
        ]
        for name, keys in row["evaluations"].items():
            lines += [f"| {name} {key} | {_number(first)} | {_number(last)} |" for key, (first, last) in keys.items()]
        lines.append("")
    return lines


def evaluation_report(runs: list[TrainingRun]) -> list[str]:
    """The section of the Setter's evaluations apart from its reward (`eval.jsonl`): a row per evaluation."""
    lines = [
        "## The Setter evaluated apart from its reward",
        "",
        "Every `evaluation.every` iterations the current policy writes the same number of puzzles from a fixed "
        "prompt and sampling seed, judged by the frozen initial Solver (`eval.jsonl`, `eval/*` in TensorBoard); "
        "R_n against a fixed reference set, not the run's archive. Hard but solvable: solved, but not by every "
        "attempt (D > 1). Shares in % of the puzzles written; solved of valid in % of the valid ones.",
        "",
        "| run | after iteration | puzzles | valid % | solved of valid % | hard but solvable % | distinct % | "
        "mean R_n |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for run in runs:
        for record in run.evaluations:
            summary = record["summary"]
            shares = (summary[key] for key in ("valid", "solved_of_valid", "hard_but_solvable", "distinct"))
            lines.append(
                f"| {run.label} | {record['iteration']} | {summary['puzzles']} | "
                f"{' | '.join(map(_percent, shares))} | {_number(summary['mean_r_n'])} |"
            )
    return [*lines, ""]


def memory_report(rows: list[dict]) -> list[str]:
    """The "Memory" section: each run's peak resident memory per iteration in brief, against its goal."""
    lines = [
        "## Memory",
        "",
        "![Peak resident memory per iteration](memory.png)",
        "",
        "Each iteration's peak resident memory (`peak_rss_gib` in `iterations.jsonl`), in GiB, against the goals "
        "for the CPU scale (`docs/results/speed.md`): 6 GiB for a run that trains the Setter alone, 8 GiB for one "
        "whose Solver also learns. Growth: the least-squares slope per 10 iterations, ± its SE.",
        "",
        "| run | iterations | first | last | highest (iteration) | growth per 10 iterations | goal | "
        "iterations over it |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        growth = "–" if row["growth"] is None else f"{row['growth'][0]:+.3f} ± {row['growth'][1]:.3f}"
        lines.append(
            f"| {row['label']} | {row['iterations']} | {row['first']:.2f} | {row['last']:.2f} | "
            f"{row['highest']:.2f} ({row['highest_at']}) | {growth} | {row['goal']:g} | {row['over']} |"
        )
    return [*lines, ""]


def _within(se: float | None, scale: int) -> str:
    """A per-seed effect's within-run SE in brackets (none where the records give none)."""
    return "" if se is None else f" (±{scale * se:.2g})"


def _estimate(value: tuple[float, float] | None) -> str:
    return "–" if value is None else f"{value[0]:+.3f} ± {value[1]:.3f}"


def _difficulty(puzzle: dict) -> str:
    if not puzzle["valid"]:
        return f"invalid ({puzzle.get('reason') or 'rejected'})"
    return "D = ∞ (unsolved)" if puzzle["D"] is None else f"D = {puzzle['D']:.2f}"


def _fenced(text: str) -> list[str]:
    """A fence longer than any run of backticks in the text, so a puzzle cannot close it."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "python", text, fence]


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{100 * fraction:.1f}"
