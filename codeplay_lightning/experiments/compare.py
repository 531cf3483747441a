"""`compare(run_dirs, out)`: the paper's figure 2 and appendix C from training runs' `puzzles.jsonl`.

    compare([Path("runs/balanced/version_0"), Path("runs/none/version_0")], Path("docs/results"))

Writes `figure.png` (R_d, R_n and R against the number of puzzles generated, each a trailing mean
over the last 200 puzzles, one line per run) and `report.md` (a summary table, the effects by run, then 10
puzzles per run sampled without replacement from its last 100); with runs of two seeds or more, `effects.png`
(each seed's effect against its baseline, and their mean with a 95% interval from the spread between seeds).
The runs are read by `runs`, summarised by `summaries` (their statistics in `statistics`), drawn by `figures`
and written out by `report`.

When a run's Solver learned (`selfplay.learn_every` > 0), the self-play runs (their records say which puzzles
the initial, frozen Solver also attempted; a fixed Solver's too) add `selfplay.png` and a "Self-play" section:
the pass rate 1/D of the current and of the initial Solver on those puzzles, each evaluation set's pass@1 and
pass@K over BC phases (`solver.jsonl`; phase 0 is the initial Solver), and R_n; the effects by run then measure
each seed's learning run against the fixed-Solver run of its seed and against its own initial Solver. With fixed
Solvers only, as in the preset sweep, current and initial are one Solver: no section.
Runs from before self-play are reported as they always were. Where the runs' `iterations.jsonl` give each
iteration's peak resident memory, `memory.png` and a "Memory" section show it against its goal. Given a plan of
pre-registered endpoints (`plan=`, `endpoints`), a "Pre-registered tests" section tests them, Holm-corrected.
"""

from __future__ import annotations

from pathlib import Path

from codeplay_lightning.experiments.endpoints import plan_tests, read_plan
from codeplay_lightning.experiments.figures import plot, plot_effects, plot_memory, plot_selfplay
from codeplay_lightning.experiments.report import report
from codeplay_lightning.experiments.runs import PANELS, read_runs
from codeplay_lightning.experiments.summaries import (
    by_run,
    memory_summary,
    sample_last,
    selfplay_summaries,
    spread_between_seeds,
    summary,
)


def compare(
    run_dirs: list[Path], out: Path, seed: int = 0, iterations: int | None = None, plan: Path | None = None
) -> dict:
    """Write `out/figure.png` and `out/report.md`, and `out/selfplay.png` when a run's Solver learned; returns
    what was written, per run (`selfplay`: None when no Solver learned). `iterations`: each run's first N only.
    `plan`: a file of pre-registered endpoints (`endpoints`), tested in the report's first section of findings."""
    if not run_dirs:
        raise ValueError("give at least one run directory")
    runs = read_runs(run_dirs, iterations)
    planned = plan_tests(read_plan(plan), runs) if plan is not None else None
    out.mkdir(parents=True, exist_ok=True)
    plot(runs, out / "figure.png")
    selfplay = selfplay_summaries(runs)
    if selfplay:
        plot_selfplay(runs, out / "selfplay.png")
    findings = by_run(runs, selfplay)
    if spread_between_seeds(findings[1]):
        plot_effects(findings[1], out / "effects.png")
    memory = [row for row in map(memory_summary, runs) if row is not None]
    if memory:
        plot_memory(runs, out / "memory.png")
    summaries = [summary(run) | {"sampled": sample_last(run.puzzles, seed)} for run in runs]
    (out / "report.md").write_text(report(runs, summaries, selfplay, findings, memory, seed, planned))
    return {
        "figure": out / "figure.png",
        "report": out / "report.md",
        "panels": list(PANELS),
        "runs": summaries,
        "selfplay": {"figure": out / "selfplay.png", "runs": selfplay} if selfplay else None,
        "memory": {"figure": out / "memory.png", "runs": memory} if memory else None,
        "plan": planned,
    }
