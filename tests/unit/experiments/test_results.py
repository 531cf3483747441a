"""Every committed report that its raw records can regenerate is what they regenerate: the commands of
docs/results/ run on the committed records give the committed files, character for character; and the findings
table of docs/results/README.md quotes what those records give."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
from support import REPO

from codeplay_lightning.experiments.synthesis_table import load_runs, synthesis_table
from tests.support import markdown_table

ROOT = REPO
SYNTHESIS = ROOT / "docs" / "results" / "synthesis"
COMPARISONS = {  # report: the runs `codeplay compare` is given for it (from the repository's root), its --iterations
    # and its --plan
    "docs/results/sweep/report.md": (["docs/results/records/sweep/seed-*/*"], None, None),
    "docs/results/selfplay-pair/report.md": (["docs/results/records/selfplay/seed-*/*"], None, None),
    "docs/results/sweep-50/report.md": (
        ["docs/results/records/sweep-50/seed-*/*"],
        None,
        "docs/results/plan-50.yaml",
    ),
    "docs/results/sweep-50/first-10/report.md": (["docs/results/records/sweep-50/seed-*/*"], 10, None),
    "docs/results/sweep-50/second-host/report.md": (["docs/results/records/second-host/seed-*/*"], None, None),
    "docs/results/memory/none/report.md": (
        ["docs/results/records/sweep-50/seed-0/none", "docs/results/records/memory/seed-0/none"],
        6,
        None,
    ),
    "docs/results/memory/selfplay/report.md": (
        ["docs/results/records/selfplay/seed-2/selfplay", "docs/results/records/memory/seed-2/selfplay"],
        4,
        None,
    ),
    "docs/results/memory/selfplay-second-host/report.md": (
        ["docs/results/records/selfplay/seed-2/selfplay", "docs/results/records/memory/second-host/seed-2/selfplay"],
        10,
        None,
    ),
    "docs/results/selfplay-difficulty/report.md": (
        ["docs/results/records/selfplay/seed-0/*", "docs/results/records/selfplay-difficulty/seed-0/*"],
        8,
        None,
    ),
}
TABLES = {  # report: (its runs, as `codeplay synthesis-table` is given them in docs/results/synthesis, its title)
    "families/table.md": (
        ["families/gif-mcts/seed*", "families/worldcoder/seed*", "families/sample/seed*"],
        "Held-out families (44 puzzles), seeds 0-2",
    ),
    "families/ablations.md": (
        [
            "families/gif-mcts/seed[01]",
            "families/gif-mcts-no-*/seed*",
            "families/sample/seed[01]",
        ],
        "Ablations (paper table 6) on the held-out families, seeds 0-1",
    ),
    "p3-test/table.md": (["p3-test/*/seed0"], "P3 test split, the first instance of each of its 228 classes (seed 0)"),
}


@pytest.mark.parametrize("report", TABLES)
def test_a_synthesis_table_regenerates_from_its_packed_records(report):
    patterns, title = TABLES[report]
    runs = [path for pattern in patterns for path in sorted(SYNTHESIS.glob(pattern))]
    assert runs and all((run / "tasks.jsonl.gz").is_file() for run in runs)
    assert synthesis_table(load_runs(runs), [4, 8, 16], title) == (SYNTHESIS / report).read_text()


@pytest.mark.parametrize("gzipped", [False, True], ids=["as written", "gzipped"])
def test_the_solver_comparison_regenerates_from_its_records(tmp_path, gzipped):
    """From the records as the runs wrote them, and gzipped as a published run may keep them."""
    from codeplay_lightning.experiments.compare import compare

    runs = [SYNTHESIS / "solver" / "balanced_gif_mcts", SYNTHESIS / "solver" / "balanced_few_shot"]
    if gzipped:
        runs = [packed(run, tmp_path / "runs" / run.name) for run in runs]
    compare(runs, tmp_path / "out")
    assert (tmp_path / "out" / "report.md").read_text() == (SYNTHESIS / "solver" / "report.md").read_text()


def packed(run: Path, copy: Path) -> Path:
    copy.mkdir(parents=True)
    shutil.copy(run / "config.yaml", copy)
    for records in run.glob("*.jsonl"):
        (copy / f"{records.name}.gz").write_bytes(gzip.compress(records.read_bytes()))
    assert {path.name for path in copy.iterdir()} == {"config.yaml", "puzzles.jsonl.gz", "iterations.jsonl.gz"}
    return copy


@pytest.mark.parametrize("report", COMPARISONS)
def test_a_training_comparison_regenerates_from_its_committed_records(tmp_path, monkeypatch, report):
    """Paths as the command gives them (relative to the root): a report names the runs whose labels repeat."""
    from codeplay_lightning.experiments.compare import compare

    monkeypatch.chdir(ROOT)
    runs, iterations = comparison_runs(report)
    assert runs and all((run / "puzzles.jsonl.gz").is_file() for run in runs)
    plan = COMPARISONS[report][2]
    compare(runs, tmp_path / "out", iterations=iterations, plan=None if plan is None else Path(plan))
    assert (tmp_path / "out" / "report.md").read_text() == (ROOT / report).read_text()


def comparison_runs(report: str) -> tuple[list[Path], int | None]:
    """The runs `report` is regenerated from, in the command's order, and its --iterations."""
    patterns, iterations, _ = COMPARISONS[report]
    return [run for pattern in patterns for run in sorted(Path(".").glob(pattern))], iterations


FINDINGS_STATISTICS = ("solved of valid, it. 1+", "mean R_n, same positions")  # the sweep's findings table's columns


def effects_by_run(report: str) -> dict[tuple[str, str], dict]:
    """(run name, statistic) -> its effect by run, over the committed records `report` is regenerated from."""
    from codeplay_lightning.experiments.runs import read_runs
    from codeplay_lightning.experiments.summaries import by_run, selfplay_summaries

    runs = read_runs(*comparison_runs(report))
    _, effects = by_run(runs, selfplay_summaries(runs))
    return {(row["name"], row["label"]): row for row in effects}


def findings_table(heading: str, first_column: str) -> list[list[str]]:
    findings = (ROOT / "docs" / "results" / "README.md").read_text()
    return markdown_table(findings[findings.index(heading) :], first_column)


def assert_quotes(cells: list[str], effect: dict) -> None:
    """`cells` (each seed's effect, "mean ± SE", "t, p = p") give `effect` to the last digit each shows (a
    fraction in points)."""
    summary, scale = effect["summary"], (100 if effect["percent"] else 1)
    *seeds, mean_and_se, t_and_p = cells
    assert len(seeds) == summary.runs
    quoted = [*seeds, *mean_and_se.split("±"), *t_and_p.split(", p =")]
    exact = [value * scale for value in (*summary.effects, summary.mean, summary.se)] + [summary.t, summary.p]
    for text, value in zip(quoted, exact, strict=True):
        shown = text.strip().replace("−", "-")
        decimals = len(shown.partition(".")[2])
        assert abs(float(shown) - value) <= 0.5 * 10**-decimals + 1e-12, (effect["name"], effect["label"], text, value)


def test_the_sweep_findings_table_quotes_what_the_records_give(monkeypatch):
    """Each seed's effect, the mean ± between-seed SE, t and p as docs/results/README.md's table of the re-made sweep
    writes them, against the effects by run of its committed records."""
    monkeypatch.chdir(ROOT)
    effect = effects_by_run("docs/results/sweep/report.md")
    rows = findings_table("**The re-made sweep, with its raw records**", "preset")
    assert len(rows) == 5
    for preset, *cells in rows:
        width = len(cells) // len(FINDINGS_STATISTICS)
        for number, label in enumerate(FINDINGS_STATISTICS):
            assert_quotes(cells[number * width : (number + 1) * width], effect[(preset, label)])


def test_the_selfplay_findings_table_quotes_what_the_records_give(monkeypatch):
    """The same for the re-made self-play pair's table: one row per statistic of `selfplay` by run."""
    monkeypatch.chdir(ROOT)
    effect = effects_by_run("docs/results/selfplay-pair/report.md")
    rows = findings_table("**The re-made self-play pair, with its raw records**", "statistic")
    assert {label for label, *_ in rows} == {label for name, label in effect if name == "selfplay"}
    for label, *cells in rows:
        assert_quotes(cells, effect[("selfplay", label)])


SELFPLAY_PAIR_ROWS = {  # selfplay-pair/README.md's table: a row, and the effect by run it quotes
    "valid, iterations 1–15": "valid, it. 1+",
    "solved of valid, iterations 1–15": "solved of valid, it. 1+",
    "mean R_n at the same archive positions": "mean R_n, same positions",
    "the initial Solver's pass-rate trend per 100 puzzles": (
        "initial Solver's trend per 100 puzzles, − selfplay_fixed's"
    ),
    "current − initial pass rate 1/D on the same puzzles": "current − initial Solver's pass rate, same puzzles",
    "held-out families (100 × 4), pass@1, phase 8 − phase 0": "heldout_families pass@1, last phase − phase 0",
    "held-out families, pass@4, phase 8 − phase 0": "heldout_families pass@4, last phase − phase 0",
}


def test_the_selfplay_pair_page_quotes_what_the_records_give(monkeypatch):
    """selfplay-pair/README.md's table: each effect's row, each seed's puzzle counts and the learning run's peak RSS
    (its highest iteration, and the highest of the others where it names them), from the committed records; and
    speed.md's sentence of the same peaks."""
    from codeplay_lightning.experiments.runs import read_runs

    monkeypatch.chdir(ROOT)
    report = "docs/results/selfplay-pair/report.md"
    page = (ROOT / "docs" / "results" / "selfplay-pair" / "README.md").read_text()
    rows = {row: cells for row, *cells in markdown_table(page, "`selfplay` against `selfplay_fixed` of its seed")}
    effect = effects_by_run(report)
    for row, label in SELFPLAY_PAIR_ROWS.items():
        assert_quotes(rows[row], effect[("selfplay", label)])
    runs = {(run.seed, run.name): run for run in read_runs(*comparison_runs(report))}
    highest = [max(record["peak_rss_gib"] for record in runs[seed, "selfplay"].iterations) for seed in (0, 1, 2)]
    speed = " ".join((ROOT / "docs" / "results" / "speed.md").read_text().split())
    assert f"**at most {highest[0]:.2f} GiB** over seed 0's 16 iterations" in speed
    assert f"Seeds 1 and 2 peaked at **{highest[1]:.2f} and {highest[2]:.2f} GiB**" in speed
    for seed in (0, 1, 2):
        learning, fixed = runs[seed, "selfplay"], runs[seed, "selfplay_fixed"]
        assert rows["puzzles (iterations 0–15)"][seed] == f"{len(learning.puzzles):,} against {len(fixed.puzzles):,}"
        peaks = sorted(record["peak_rss_gib"] for record in learning.iterations)
        cell = rows["peak RSS, the learning run's iterations"][seed]
        assert cell.startswith(f"≤ {peaks[-1]:.2f} GiB"), (seed, cell)
        assert "the rest" not in cell or f"the rest ≤ {peaks[-2]:.2f})" in cell, (seed, cell)


README_ROWS = {  # the README's results rows held to the records: the question, and the effects its numbers quote
    "Do difficulty rewards make puzzles harder to solve?": ("docs/results/sweep/report.md", "solved of valid, it. 1+"),
    "Do novelty rewards raise novelty?": ("docs/results/sweep/report.md", "mean R_n, same positions"),
    "Does a learning Solver keep up (self-play)?": ("docs/results/selfplay-pair/report.md", None),
}


def shown_as(text: str, value: float) -> bool:
    """Whether `text` ("+0.019", "−27") is `value` to the last digit it shows."""
    shown = text.replace("−", "-")
    return abs(float(shown) - value) <= 0.5 * 10 ** -len(shown.partition(".")[2]) + 1e-12


def test_the_readme_results_rows_quote_what_the_records_give(monkeypatch):
    """Every `mean ± SE` and every uncorrected `p = ...` in the README's sweep and self-play rows is an effect by run of
    the committed records (a number that drifts from them fails here), to the digits it shows."""
    monkeypatch.chdir(ROOT)
    rows = {question: found for question, found, _ in markdown_table((ROOT / "README.md").read_text(), "question")}
    for question, (report, statistic) in README_ROWS.items():
        effects = [effect for (_, label), effect in effects_by_run(report).items() if statistic in (None, label)]
        scaled = [(effect["summary"], 100 if effect["percent"] else 1) for effect in effects]
        pairs = re.findall(r"([+−-]?\d+(?:\.\d+)?) ± (\d+(?:\.\d+)?)", rows[question])
        assert len(pairs) >= 3, question
        for mean, se in pairs:
            assert any(shown_as(mean, s.mean * k) and shown_as(se, s.se * k) for s, k in scaled), (question, mean, se)
        for p in re.findall(r"p = (0\.\d+)(?:–(0\.\d+))?", rows[question]):
            for bound in filter(None, p):
                assert any(shown_as(bound, s.p) for s, _ in scaled if s.p is not None), (question, bound)


HOLM_QUOTES = {  # the findings' prose: a report, its family of tests (None: every effect), and how sentences quote them
    "docs/results/sweep/report.md": (
        FINDINGS_STATISTICS,
        "ten",
        [
            ("difficulty", "solved of valid, it. 1+", "(p = {p}; {holm} after Holm over the ten tests)"),
            ("balanced", "solved of valid, it. 1+", "`balanced` +27.8 ± 2.1 (p = {p}; {holm})"),
            ("product", "solved of valid, it. 1+", "`product` +22.9 ± 3.4 (p = {p}; {holm})"),
            ("novelty_biased", "solved of valid, it. 1+", "`novelty_biased` +17.9 ± 3.4 (p = {p}; {holm})"),
            ("novelty", "mean R_n, same positions", "(p = {p} uncorrected, {holm} after Holm)"),
            ("product", "mean R_n, same positions", "(p = {p}, {holm})"),
        ],
    ),
    "docs/results/selfplay-pair/report.md": (
        None,
        "seven",
        [
            (
                "selfplay",
                "current − initial Solver's pass rate, same puzzles",
                "p = {p}, {holm} after Holm over the seven",
            ),
            ("selfplay", "heldout_families pass@4, last phase − phase 0", "(+2.3 ± 0.3; p = {p}, {holm} after Holm)"),
            ("selfplay", "solved of valid, it. 1+", "(p = {p}, {holm} after Holm;"),
        ],
    ),
}


def test_the_findings_holm_corrected_p_values_are_what_the_records_give(monkeypatch):
    """docs/results/README.md's corrected p-values: each p (to the one digit the prose shows) beside its Holm value
    over the family its sentences name, and each family's smallest p and what Holm makes of it, from the effects by
    run of the committed records."""
    from codeplay_lightning.experiments.statistics import holm

    monkeypatch.chdir(ROOT)
    text = " ".join((ROOT / "docs" / "results" / "README.md").read_text().split())
    for report, (statistics, count, quotes) in HOLM_QUOTES.items():
        family = {key: e for key, e in effects_by_run(report).items() if statistics is None or key[1] in statistics}
        assert len(family) == {"ten": 10, "seven": 7}[count]
        corrected = dict(zip(family, holm([effect["summary"].p for effect in family.values()])))
        assert f"{count.capitalize()} tests" in text or f"the {count}" in text
        for name, statistic, quote in quotes:
            p = family[name, statistic]["summary"].p
            assert quote.format(p=f"{p:.1g}", holm=f"{corrected[name, statistic]:.2f}") in text, (name, statistic)
        smallest = min(family, key=lambda key: family[key]["summary"].p)
        p = family[smallest]["summary"].p
        assert f"the smallest p, {p:.3f}, becomes {corrected[smallest]:.2f}" in text


def test_the_readme_synthesis_row_quotes_the_regenerated_families_table():
    """The README's GIF-MCTS-against-sampling row: its solved rates at 16 calls and its distance in clustered SEs are
    those of families/table.md (which `test_a_synthesis_table_regenerates_from_its_packed_records` holds to the
    records)."""
    rows = {question: found for question, found, _ in markdown_table((ROOT / "README.md").read_text(), "question")}
    row = rows["GIF-MCTS against sampling, 16 calls, 44 held-out-family puzzles"]
    table = {cells[0]: cells for cells in markdown_table((SYNTHESIS / "families" / "table.md").read_text(), "method")}
    at_16 = {method: cells[4].split(" ±")[0] + "%" for method, cells in table.items()}  # "solved at 16"
    assert (
        row.startswith(f"{at_16['gif-mcts']} against {at_16['sample']}: ")
        and f"WorldCoder {at_16['worldcoder']}" in row
    )
    delta, clustered = re.fullmatch(r"-?([\d.]+) ± [\d.]+ \(([\d.]+)\)", table["gif-mcts"][7]).groups()
    assert f"({float(delta) / float(clustered):.1f} SE clustered by family)" in row


def repeated(run: Path, record: Path, iterations: range) -> dict:
    """plan-50's built-in check: `run`'s puzzles of `iterations` against those of the same index in `record`: how
    many, how many of the same text, of those how many with fewer or more passes (a higher or lower D; unsolved is
    D = ∞) and the largest difference in R."""
    from codeplay_lightning.experiments.runs import read_run

    recorded = {puzzle["index"]: puzzle for puzzle in read_run(record).puzzles}
    mine = [puzzle for puzzle in read_run(run).puzzles if puzzle["iteration"] in iterations]
    pairs = [  # a puzzle past the record's last cannot repeat it
        (new, recorded[new["index"]])
        for new in mine
        if new["index"] in recorded and new["puzzle"] == recorded[new["index"]]["puzzle"]
    ]
    d = [
        (float("inf") if new["D"] is None else new["D"], float("inf") if old["D"] is None else old["D"])
        for new, old in pairs
    ]
    return {
        "puzzles": len(mine),
        "same": len(pairs),
        "fewer": sum(new > old for new, old in d),
        "more": sum(new < old for new, old in d),
        "R": max((abs(new["R"] - old["R"]) for new, old in pairs), default=0.0),
        "differing": {new["index"] for (new, _), (d_new, d_old) in zip(pairs, d) if d_new != d_old},
    }


def test_the_built_in_checks_are_what_the_records_give():
    """docs/results/sweep-50/README.md's built-in check (plan-50): the 50-iteration runs' first iterations against
    their round-4 records, as the committed records of both give them."""
    text = " ".join((ROOT / "docs" / "results" / "sweep-50" / "README.md").read_text().split())
    records = ROOT / "docs" / "results" / "records"
    finished = sorted((records / "sweep-50").glob("seed-*/none"))
    assert finished
    for run in finished:
        seed = run.parent.name.removeprefix("seed-")
        none = repeated(run, records / "sweep" / run.parent.name / "none", range(10))
        assert none["same"] == none["puzzles"] and none["R"] == 0
        assert (
            f"iterations 0–9 of `none` seed {seed} against its round-4 record, the same {none['same']} texts: "
            f"{none['fewer'] + none['more']} puzzles differ in D ({none['fewer']} fewer passes, {none['more']} more)"
        ) in text
    balanced, round_4 = records / "sweep-50/seed-0/balanced", records / "sweep/seed-0/balanced"
    first = repeated(balanced, round_4, range(1))
    assert first["same"] == first["puzzles"] and first["fewer"] == first["more"] == 0
    assert f"({first['same']} of {first['puzzles']} texts, D equal)" in text
    assert f"by up to {first['R']:.1e}" in text
    later = repeated(balanced, round_4, range(1, 10))
    assert f"({later['same']} of the next {later['puzzles']} equal)" in text
    itself = repeated(balanced, records / "sweep-50-stopped/seed-0/balanced", range(6))
    assert itself["same"] == itself["puzzles"] and itself["fewer"] == itself["more"] == 0 and itself["R"] == 0
    assert f"{itself['same']} of {itself['puzzles']} puzzles, D and R equal" in text
    difficulty, round_4 = records / "sweep-50/seed-0/difficulty", records / "sweep/seed-0/difficulty"
    first = repeated(difficulty, round_4, range(1))
    assert first["same"] == first["puzzles"] and first["fewer"] == first["more"] == 0 and first["R"] == 0
    assert f"round-4 iteration 0 exactly ({first['same']} of {first['puzzles']} texts, D and R equal)" in text
    then = repeated(difficulty, round_4, range(1, 2))
    assert then["same"] == then["puzzles"]
    assert (
        f"iteration 1's texts repeat too ({then['same']} of {then['puzzles']}), but {then['fewer'] + then['more']} "
        f"of them differ in D ({then['fewer']} fewer passes, {then['more']} more"
    ) in text
    later = repeated(difficulty, round_4, range(2, 10))
    assert f"from iteration 2 the texts do ({later['same']} of the next {later['puzzles']} equal)" in text
    difficulty, round_4 = records / "sweep-50/seed-1/difficulty", records / "sweep/seed-1/difficulty"
    first, then, later = (repeated(difficulty, round_4, r) for r in (range(1), range(1, 2), range(2, 10)))
    assert first["same"] == first["puzzles"] and first["fewer"] + first["more"] > 0
    assert (
        f"`difficulty` seed 1 repeated its round-4 iteration 0's texts ({first['same']} of {first['puzzles']}), but "
        f"{first['fewer'] + first['more']} of them differ in D ({first['fewer']} fewer passes, {first['more']} more), "
        f"so its rewards (by up to {first['R']:.1f} in R) and first PPO update differ from the record's, and from "
        f"iteration 1 the texts do ({then['same']} of the next {then['puzzles']} equal, {later['same']} of the "
        f"{later['puzzles']} after)"
    ) in text


def test_the_sweep_50_runs_said_finished_are_the_committed_records():
    """sweep-50/README.md's table of what has run, and docs/results/README.md's count of finished runs, say
    "records committed" of exactly the runs whose records are committed."""
    runs = ROOT / "docs" / "results" / "records" / "sweep-50"
    rows = markdown_table((ROOT / "docs" / "results" / "sweep-50" / "README.md").read_text(), "seed")
    presets = ["none", "balanced", "difficulty", "novelty"]
    for seed, *cells in rows:
        for preset, cell in zip(presets, cells, strict=True):
            assert ("records committed" in cell) == (runs / f"seed-{seed}" / preset).is_dir(), (seed, preset)
    finished = len(list(runs.glob("seed-*/*")))
    assert len(rows) == 3 and finished
    results = " ".join((ROOT / "docs" / "results" / "README.md").read_text().split())
    assert f"ended with {finished} of its 12 runs finished" in results


def test_the_re_judged_attempts_are_what_the_records_give():
    """The built-in check attempt by attempt (records/sweep-50/built-in-check/): each puzzle of a `none` seed whose
    D differs from its round-4 record, its attempts re-sampled from the run's seeds and judged three times by the
    runs' judge (`r5`) and three times by round 4's (`r4`); a timeout judged once more under a 10 s limit."""
    text = " ".join((ROOT / "docs" / "results" / "sweep-50" / "README.md").read_text().split())
    records = ROOT / "docs" / "results" / "records"
    with gzip.open(records / "sweep-50" / "built-in-check" / "attempts.jsonl.gz", "rt") as lines:
        attempts = [json.loads(line) for line in lines]
    puzzles: dict[tuple[int, int], list[dict]] = {}
    for attempt in attempts:
        puzzles.setdefault((attempt["seed"], attempt["index"]), []).append(attempt)
    seeds = sorted({seed for seed, _ in puzzles})
    differing = {
        (seed, index)
        for seed in seeds
        for index in repeated(
            records / "sweep-50" / f"seed-{seed}" / "none", records / "sweep" / f"seed-{seed}" / "none", range(10)
        )["differing"]
    }
    assert set(puzzles) == differing
    assert f"re-judged attempt by attempt for seeds {', '.join(map(str, seeds[:-1]))} and {seeds[-1]}" in text
    assert all(sorted(attempt["attempt"] for attempt in group) == [0, 1, 2, 3] for group in puzzles.values())
    verdicts = [attempt["r5"] + attempt["r4"] for attempt in attempts]
    statuses = [[status for status, *_ in judged] for judged in verdicts]
    split = [(attempt, kinds) for attempt, kinds in zip(attempts, statuses) if len(set(kinds)) > 1]
    timeouts = [attempt for attempt, kinds in zip(attempts, statuses) if set(kinds) == {"timeout"}]
    finished = sum(attempt["r5_limit_10s"][0] != "timeout" for attempt in timeouts)
    assert (
        f"the {len(puzzles)} puzzles' {len(attempts)} attempts: {len(attempts) - len(split)} get the same verdict "
        f"all six times, and {finished} of the {len(timeouts)} that time out each time finish under a 10 s limit"
    ) in text
    passes = [[seconds for status, seconds, _ in judged if status == "pass"] for judged in verdicts]
    near: dict[tuple[int, int], list[tuple[int, list[float]]]] = {}  # passes over half the 1 s limit
    for attempt, seconds in zip(attempts, passes):
        if seconds and max(seconds) > 0.5:
            near.setdefault((attempt["seed"], attempt["index"]), []).append((attempt["attempt"], seconds))
    for (seed, index), slow in near.items():
        numbers = [str(number) for number, _ in slow]
        named = numbers[0] if len(numbers) == 1 else ", ".join(numbers[:-1]) + " and " + numbers[-1]
        lowest, highest = min(min(seconds) for _, seconds in slow), max(max(seconds) for _, seconds in slow)
        assert (
            f"seed {seed}'s puzzle {index}, attempt{'s' if len(numbers) > 1 else ''} {named} "
            f"({lowest:.2f}–{highest:.2f} s of CPU)"
        ) in text
    others = max(max(seconds) for seconds in passes if seconds and max(seconds) <= 0.5)
    assert f"every other pass takes at most {others:.3f} s" in text
    for attempt, kinds in split:
        assert (
            f"seed {attempt['seed']}'s puzzle {attempt['index']}, attempt {attempt['attempt']}, passed "
            f"{kinds.count('pass')} of 6 times and timed out {kinds.count('timeout')}"
        ) in text

    def replayed(group: list[dict]) -> float | None:
        passes = sum(attempt["r5"][0][0] == "pass" for attempt in group)
        return len(group) / passes if passes else None

    as_recorded = sum(replayed(group) == group[0]["D_r5"] for group in puzzles.values())
    as_round_4 = sum(replayed(group) == group[0]["D_r4"] for group in puzzles.values())
    assert (
        f"The replayed attempts give {as_recorded} of the {len(puzzles)} puzzles their plan-50 record's D and "
        f"{as_round_4} their round-4 record's"
    ) in text


def test_the_sweep_50_page_quotes_its_regenerated_report():
    """sweep-50/README.md's memory of each run is the row of the report that
    test_a_training_comparison_regenerates_from_its_committed_records holds to the records."""
    page = " ".join((ROOT / "docs" / "results" / "sweep-50" / "README.md").read_text().split())
    report = (ROOT / "docs" / "results" / "sweep-50" / "report.md").read_text()
    runs = ROOT / "docs" / "results" / "records" / "sweep-50"
    memory = markdown_table(report[report.index("## Memory") :], "run")
    assert len(memory) == len(list(runs.glob("seed-*/*")))
    for run, iterations, first, last, highest, growth, _, over in memory:
        preset = run.partition(" ")[0]
        if ", seed " in run:
            seed = run.rpartition("seed ")[2]
        else:  # a preset's only run: the report names no seed
            seed = next(runs.glob(f"seed-*/{preset}")).parent.name.removeprefix("seed-")
        assert (
            f"`{preset}` seed {seed} {first} → {last} GiB, {growth}, highest {highest}, over the goal in {over} of "
            f"{iterations} iterations"
        ) in page, run


def pre_registered_tests() -> list[list[str]]:
    """The rows of the regenerated sweep-50 report's pre-registered tests, all families in its order."""
    report = (ROOT / "docs" / "results" / "sweep-50" / "report.md").read_text()
    tests = report[report.index("## Pre-registered tests") : report.index("## Effects by run")]
    families = re.findall(r"^### (.+) \(Holm over \d+\)$", tests, flags=re.MULTILINE)
    return [row for family in families for row in markdown_table(tests[tests.index(f"### {family}") :], "endpoint")]


def test_the_sweep_50_page_states_every_test_that_has_its_seeds():
    """sweep-50/README.md states each pre-registered test whose three seeds have run, as the regenerated report gives
    it (test_a_training_comparison_regenerates_from_its_committed_records holds the report to the records), and
    states no test that has fewer."""
    page = " ".join((ROOT / "docs" / "results" / "sweep-50" / "README.md").read_text().split())
    tested = 0
    for endpoint, statistic, _, against, *seeds, mean, interval, t_and_df, p, holm in pre_registered_tests():
        quote = f"**{endpoint}** ({statistic}, against {against}): {mean} (95% interval {interval}; t = "
        if "–" in seeds:
            assert f"**{endpoint}** (" not in page, endpoint
            continue
        t_value, _, df = t_and_df.rstrip(")").partition(" (")
        assert f"{quote}{t_value} on {df} df, p = {p}, Holm {holm})" in page, endpoint
        tested += 1
    assert tested


SIDE_BY_SIDE = {  # sweep-50/README.md's 10 against 50 iterations: a column, and the report whose effects it quotes
    "round 4, 10 iterations": "docs/results/sweep/report.md",
    "plan-50, its first 10": "docs/results/sweep-50/first-10/report.md",
    "plan-50, 50 iterations": "docs/results/sweep-50/report.md",
}


def test_the_10_and_50_iteration_effects_side_by_side_are_what_the_records_give(monkeypatch):
    """sweep-50/README.md's table of each finished preset's effect in seed 0 after 10 and after 50 iterations: each
    cell the seed's effect by run in the regenerated report of its column."""
    monkeypatch.chdir(ROOT)
    header = "effect in seed 0 (against `none`)"
    page = (ROOT / "docs" / "results" / "sweep-50" / "README.md").read_text()
    heading = next(line for line in page.splitlines() if line.startswith(f"| {header} |"))
    assert [cell.strip() for cell in heading.strip("|").split("|")][1:] == list(SIDE_BY_SIDE)
    cells = side_by_side_cells(header)
    assert cells
    for row, name, cell, effect in cells:
        value = effect["summary"].effects[effect["seeds"].index(0)] * (100 if effect["percent"] else 1)
        assert shown_as(cell.removesuffix(" pt"), value), (row, name, cell, value)


def side_by_side_cells(header: str) -> list[tuple[str, str, str, dict]]:
    """Each cell of sweep-50/README.md's table headed `header`: its row, its column, its text, and the effect by run
    it quotes (a row names a preset and a statistic; a column, the report of SIDE_BY_SIDE)."""
    page = (ROOT / "docs" / "results" / "sweep-50" / "README.md").read_text()
    effects = {name: effects_by_run(report) for name, report in SIDE_BY_SIDE.items()}
    found = []
    for row, *cells in markdown_table(page, header):
        preset, _, label = row.partition(", ")
        for name, cell in zip(SIDE_BY_SIDE, cells, strict=True):
            found.append((row, name, cell, effects[name][(preset.strip("`"), label)]))
    return found


def test_the_readme_50_iteration_row_quotes_the_pre_registered_tests():
    """The README's plan-50 row: each "mean ± SE (p = p, Holm p)" it quotes is a test of the regenerated sweep-50
    report that has its three seeds, as the report writes it."""
    rows = {question: found for question, found, _ in markdown_table((ROOT / "README.md").read_text(), "question")}
    row = rows["At the paper's 50 iterations, what does `balanced` do?"]
    quoted = re.findall(r"([+-]?\d[\d.]* ± \d[\d.]*(?: points)?) \(p = (\d[\d.]*), Holm (\d[\d.]*)\)", row)
    stated = {
        (f"{mean.replace(' pt', '')} points" if " pt " in mean else mean, p, holm)
        for _, _, _, _, *seeds, mean, _, _, p, holm in pre_registered_tests()
        if "–" not in seeds
    }
    assert len(quoted) >= 5
    assert set(quoted) <= stated, set(quoted) - stated


def test_the_10_and_50_iteration_effects_over_three_seeds_are_what_the_records_give(monkeypatch):
    """sweep-50/README.md's table of `balanced`'s effects over three seeds after 10 and after 50 iterations: each
    cell the mean ± between-seed SE and uncorrected p of the effect by run in the regenerated report of its column."""
    monkeypatch.chdir(ROOT)
    cells = side_by_side_cells("effect over three seeds (against `none`)")
    assert len(cells) == 3 * len(SIDE_BY_SIDE)
    for row, name, cell, effect in cells:
        summary, scale = effect["summary"], (100 if effect["percent"] else 1)
        mean, se, p = re.fullmatch(r"(\S+)(?: pt)? ± (\S+), p = (\S+)", cell).groups()
        assert summary.runs == 3, (row, name)
        assert shown_as(mean, summary.mean * scale) and shown_as(se, summary.se * scale), (row, name, cell)
        assert shown_as(p, summary.p), (row, name, cell)


def sweep_50_evaluation() -> list[list[str]]:
    """The rows of the regenerated sweep-50 report's evaluation table (the Setter evaluated apart from its reward)."""
    report = (ROOT / "docs" / "results" / "sweep-50" / "report.md").read_text()
    return markdown_table(report[report.index("## The Setter evaluated apart from its reward") :], "run")


def test_the_sweep_50_page_quotes_the_last_evaluation_of_every_balanced_seed():
    """sweep-50/README.md's sentence on the evaluation after iteration 49: each `balanced` seed's solved of valid and
    R_n against the fixed reference set, and `none`'s, as the regenerated report's evaluation table gives them."""
    page = " ".join((ROOT / "docs" / "results" / "sweep-50" / "README.md").read_text().split())
    last = {run: (solved, r_n) for run, after, _, _, solved, _, _, r_n in sweep_50_evaluation() if after == "49"}
    balanced = [last[f"balanced (w_d=1, w_n=1), seed {seed}"] for seed in (0, 1, 2)]
    assert {last[run] for run in last if run.startswith("none")} == {("28.1", "0.277")}
    assert (
        f"are {balanced[0][0]}%, {balanced[1][0]}% and {balanced[2][0]}% solved of valid in seeds 0, 1 and 2 "
        f"(`none`: 28.1%), and their R_n against the fixed reference set is {balanced[0][1]}, {balanced[1][1]} and "
        f"{balanced[2][1]} (`none`: 0.277)"
    ) in page


DIFFICULTY_SEEDS = sorted(
    int(run.parent.name.removeprefix("seed-"))
    for run in (ROOT / "docs" / "results" / "records" / "sweep-50").glob("seed-*/difficulty")
)


def difficulty_beside_its_seed(seed: int) -> dict[str, str]:
    """`difficulty` seed `seed` beside `balanced` and `none` of that seed, as the regenerated sweep-50 report gives
    them: in training (distinct of the last 100, mean R_n at the positions all runs of the seed share) and apart from
    its reward (the evaluation after iterations 9 and 49)."""
    report = (ROOT / "docs" / "results" / "sweep-50" / "report.md").read_text()
    section = report[report.index(f"## Against the unrewarded run, seed {seed}") :]
    section = section[: section.index("\n## ")]
    training = {
        run: (r_n.partition(" (")[0], distinct) for run, _, _, _, r_n, _, distinct in markdown_table(section, "run")
    }
    balanced, none = f"balanced (w_d=1, w_n=1), seed {seed}", f"none (w_d=0, w_n=0), seed {seed}"
    difficulty = next(  # the report names no seed while a preset has one run
        run for run in training if run.startswith("difficulty (") and run.rpartition(", seed ")[2] in (str(seed), run)
    )
    evaluation = {(run, after): cells for run, after, _, *cells in sweep_50_evaluation()}
    _, solved, hard, distinct_49, r_n = evaluation[(difficulty, "49")]
    return {
        "positions": re.search(r"\| mean R_n, (\d+–\d+) \|", section).group(1),
        "distinct": training[difficulty][1],
        "balanced distinct": training[balanced][1],
        "none distinct": training[none][1],
        "R_n": training[difficulty][0],
        "balanced R_n": training[balanced][0],
        "none R_n": training[none][0],
        "evaluation distinct 9": evaluation[(difficulty, "9")][3],
        "evaluation distinct 49": distinct_49,
        "balanced evaluation distinct 49": evaluation[(balanced, "49")][3],
        "evaluation solved 49": solved,
        "evaluation hard 49": hard,
        "evaluation R_n 49": r_n,
        "balanced evaluation R_n 49": evaluation[(balanced, "49")][4],
        "none evaluation R_n 49": evaluation[(none, "49")][4],
    }


@pytest.mark.parametrize("seed", DIFFICULTY_SEEDS)
def test_the_sweep_50_page_describes_each_difficulty_seed_as_the_report_gives_it(seed):
    """sweep-50/README.md's bullet on each committed `difficulty` seed: its distinct puzzles and mean R_n in
    training, and its evaluation after iterations 9 and 49, beside `balanced`'s and `none`'s of its seed."""
    page = " ".join((ROOT / "docs" / "results" / "sweep-50" / "README.md").read_text().split())
    bullet = page[page.index(f"- **`difficulty` seed {seed}**") :]
    bullet = bullet[: bullet.index(" - **")]
    n = difficulty_beside_its_seed(seed)
    assert (
        f"of the last 100 it wrote in training, {n['distinct']} are distinct (`balanced` seed {seed}: "
        f"{n['balanced distinct']}, `none` seed {seed}: {n['none distinct']}), and their mean R_n at the archive "
        f"positions all runs of the seed share (puzzles {n['positions']}) is {n['R_n']}, against `none`'s "
        f"{n['none R_n']} and `balanced`'s {n['balanced R_n']}"
    ) in bullet
    assert (
        f"its 32 fixed-prompt puzzles are {n['evaluation distinct 9']}% distinct after iteration 9 and "
        f"{n['evaluation distinct 49']}% after iteration 49 (`balanced` seed {seed}: "
        f"{n['balanced evaluation distinct 49']}%), {n['evaluation solved 49']}% of the valid ones solved by the "
        f"frozen initial Solver ({n['evaluation hard 49']}% hard but solvable), with R_n against the fixed reference "
        f"set {n['evaluation R_n 49']} (`balanced` seed {seed}: {n['balanced evaluation R_n 49']}, `none`: "
        f"{n['none evaluation R_n 49']})"
    ) in bullet


def test_the_sweep_50_page_reads_difficulty_seed_0_as_the_report_gives_it():
    """The bullet's reading of seed 0 holds: all its valid fixed-prompt puzzles solved, their R_n below `none`'s,
    and `balanced` keeping most of its last 100 distinct."""
    page = " ".join((ROOT / "docs" / "results" / "sweep-50" / "README.md").read_text().split())
    n = difficulty_beside_its_seed(0)
    assert n["evaluation solved 49"] == "100.0" and float(n["evaluation R_n 49"]) < float(n["none evaluation R_n 49"])
    assert f"`balanced` keeps {n['balanced distinct']} of its last 100 distinct" in page


def test_the_sweep_50_page_reads_difficulty_seed_1_beside_seed_0_as_the_report_gives_it():
    """The bullet's reading of seed 1: it does not repeat itself as seed 0 does, and in both seeds its R_n at the
    shared positions is below `none`'s, by the ratios the bullet gives."""
    page = " ".join((ROOT / "docs" / "results" / "sweep-50" / "README.md").read_text().split())
    seed_0, seed_1 = difficulty_beside_its_seed(0), difficulty_beside_its_seed(1)
    assert int(seed_1["distinct"]) > 50 > int(seed_0["distinct"])
    ratio = {seed: float(n["R_n"]) / float(n["none R_n"]) for seed, n in ((0, seed_0), (1, seed_1))}
    assert max(ratio.values()) < 1
    assert (
        f"({seed_1['distinct']} of its last 100 distinct, seed 0's {seed_0['distinct']}), yet its R_n at the shared "
        f"positions is {ratio[1]:.2f} of `none`'s (seed 0: {ratio[0]:.2f})"
    ) in page


def test_the_second_host_check_is_what_the_records_give(monkeypatch):
    """sweep-50/README.md's check on a second kind of host (plan-50's addendum of 2026-12-07): the one seed's
    `balanced` effect there against the 95% interval for one more seed of the pooled runs' first 10 iterations, its
    `none` against the first kind's record, and both runs' seconds, all as the committed records give them."""
    from codeplay_lightning.experiments.runs import read_run

    monkeypatch.chdir(ROOT)
    records = ROOT / "docs" / "results" / "records"
    second_host = records / "second-host" / "seed-0"
    for preset in ("none", "balanced"):
        host = json.loads((second_host / preset / "host.json").read_text())
        assert not host["native_bf16"] and "avx2" in host["cpu_flags"] and "avx512f" not in host["cpu_flags"]
        assert host["commit"].startswith("1682ec0")
    page = (ROOT / "docs" / "results" / "sweep-50" / "README.md").read_text()
    section = page[page.index("## A second kind of host") :]
    pooled = effects_by_run("docs/results/sweep-50/first-10/report.md")
    second = effects_by_run("docs/results/sweep-50/second-host/report.md")
    rows = markdown_table(section, "`balanced` against `none`")
    assert [row[0] for row in rows] == ["valid, it. 1+", "solved of valid, it. 1+", "mean R_n, same positions"]
    for label, seeds, mean, interval, elsewhere, inside in rows:
        effect, scale = pooled[("balanced", label)], (100 if pooled[("balanced", label)]["percent"] else 1)
        summary, one = effect["summary"], second[("balanced", label)]["summary"]
        assert effect["seeds"] == [0, 1, 2] and one.runs == 1
        for text, value in zip(seeds.removesuffix(" pt").split(", "), summary.effects, strict=True):
            assert shown_as(text, value * scale), (label, text)
        assert shown_as(mean.removesuffix(" pt"), summary.mean * scale), label
        low, high = (summary.mean + sign * summary.prediction_half_interval for sign in (-1, 1))
        low_text, high_text = interval.removesuffix(" pt").split(" to ")
        assert shown_as(low_text, low * scale) and shown_as(high_text, high * scale), label
        assert shown_as(elsewhere.removesuffix(" pt"), one.mean * scale), label
        assert inside == ("yes" if low <= one.mean <= high else "no"), label
    text = " ".join(section.split())
    first = repeated(second_host / "none", records / "sweep-50" / "seed-0" / "none", range(1))
    later = repeated(second_host / "none", records / "sweep-50" / "seed-0" / "none", range(1, 10))
    assert (
        f"`none`'s iteration 0 there against its record on the first kind: {first['same']} of {first['puzzles']} "
        f"texts equal at the same position, and {later['same']} of the {later['puzzles']} of iterations 1–9"
    ) in text
    # each run's first 10 iterations, read once: this host's (key None) and the first kind's seeds 0, 1 and 2
    runs = {
        (seed, preset): read_run(
            second_host / preset if seed is None else records / "sweep-50" / f"seed-{seed}" / preset, 10
        )
        for seed in (None, 0, 1, 2)
        for preset in ("none", "balanced")
    }

    def minutes(seed: int | None, preset: str) -> str:
        return f"{sum(record['seconds'] for record in runs[(seed, preset)].iterations) / 60:.1f}"

    def solved_of_valid(seed: int | None, preset: str) -> str:
        """Over iterations 1–9, in %: the reports' "solved of valid, it. 1+" over a run's first 10."""
        valid = [puzzle for puzzle in runs[(seed, preset)].puzzles if puzzle["iteration"] >= 1 and puzzle["valid"]]
        return f"{100 * sum(puzzle['D'] is not None for puzzle in valid) / len(valid):.1f}%"

    def peaks(seed: int | None, preset: str) -> list[float]:
        return [record["peak_rss_gib"] for record in runs[(seed, preset)].iterations]

    for preset in ("none", "balanced"):
        assert f"`{preset}` {minutes(None, preset)} min (first kind, seed 0: {minutes(0, preset)} min)" in text
    first_kind = {
        preset: ", ".join(solved_of_valid(seed, preset) for seed in (0, 1, 2)) for preset in ("none", "balanced")
    }
    assert (
        f"`none` {solved_of_valid(None, 'none')} solved of valid over iterations 1–9 (first kind: "
        f"{first_kind['none']}) and `balanced` {solved_of_valid(None, 'balanced')} ({first_kind['balanced']})"
    ) in text
    none, balanced = peaks(None, "none"), peaks(None, "balanced")
    firsts, lasts = [peaks(seed, "none")[0] for seed in (0, 1, 2)], [peaks(seed, "none")[-1] for seed in (0, 1, 2)]
    highest = [max(peaks(seed, "balanced")) for seed in (0, 1, 2)]
    assert (
        f"Peak RSS: `none` {none[0]:.2f} → {none[-1]:.2f} GiB (first kind: {min(firsts):.2f}–{max(firsts):.2f} → "
        f"{min(lasts):.2f}–{max(lasts):.2f}), `balanced` {balanced[0]:.2f} → {balanced[-1]:.2f} GiB, highest "
        f"{max(balanced):.2f} (first kind: highest {min(highest):.2f}–{max(highest):.2f})"
    ) in text


def test_the_selfplay_memory_check_on_the_second_host_is_what_the_records_give():
    """memory/README.md's self-play run with both memory fixes (plan-50's addendum of 2026-12-07, evening): its host,
    and each BC iteration's peak and the highest peak beside the record's same iterations, as the committed records
    give them."""
    from codeplay_lightning.experiments.runs import read_run

    records = ROOT / "docs" / "results" / "records"
    checked = records / "memory" / "second-host" / "seed-2" / "selfplay"
    host = json.loads((checked / "host.json").read_text())
    assert not host["native_bf16"] and "avx512f" not in host["cpu_flags"] and host["commit"].startswith("1b3e30d")
    fixed = read_run(checked)
    record = read_run(records / "selfplay" / "seed-2" / "selfplay", len(fixed.iterations))
    assert [r["iteration"] for r in fixed.iterations] == [r["iteration"] for r in record.iterations]

    def by_phase(run, key: str, phase: bool) -> list:
        """`key` of the run's iterations with a BC phase (`phase`), or of those without."""
        return [r[key] for r in run.iterations if bool(r.get("solver_learning_seconds")) == phase]

    def bc_peaks(run) -> str:
        return ", ".join(f"{peak:.2f}" for peak in by_phase(run, "peak_rss_gib", True))

    def highest(run) -> str:
        top = max(run.iterations, key=lambda r: r["peak_rss_gib"])
        return f"highest {top['peak_rss_gib']:.2f} GiB (iteration {top['iteration']})"

    phases = by_phase(fixed, "iteration", True)
    assert phases == by_phase(record, "iteration", True)
    text = " ".join((ROOT / "docs" / "results" / "memory" / "README.md").read_text().split())
    assert (
        f"its {len(fixed.iterations)} iterations, BC phases in iterations {', '.join(map(str, phases))}: "
        f"{bc_peaks(record)} GiB in the record, {bc_peaks(fixed)} with both fixes; {highest(record)} against "
        f"{highest(fixed)}"
    ) in text

    def span(values, form: str = ".2f") -> str:
        return f"{min(values):{form}}–{max(values):{form}}"

    over = sum(peak > 8 for peak in by_phase(record, "peak_rss_gib", True))
    with gzip.open(checked / "solver.jsonl.gz", "rt") as lines:
        bc = [json.loads(line) for line in lines]
    speed = " ".join((ROOT / "docs" / "results" / "speed.md").read_text().split())
    assert (
        f"every BC iteration peaked at {span(by_phase(fixed, 'peak_rss_gib', True))} GiB, against "
        f"{span(by_phase(record, 'peak_rss_gib', True))} in the record (bf16, before the fixes), and none reached "
        f"the 8 GiB goal (the record: {over} of {len(phases)})"
    ) in speed
    assert max(by_phase(fixed, "peak_rss_gib", True)) < 8
    assert (
        f"an iteration without a phase {span(by_phase(fixed, 'seconds', False), ',.0f')} s, with one "
        f"{span(by_phase(fixed, 'seconds', True), ',.0f')} s, of which the held-out evaluation "
        f"{span([phase['eval_seconds'] for phase in bc], ',.0f')} s and BC itself "
        f"{span([phase['bc']['seconds'] for phase in bc], ',.0f')} s (the record, on the AVX512-BF16 kind: "
        f"{span(by_phase(record, 'seconds', False), ',.0f')} and {span(by_phase(record, 'seconds', True), ',.0f')} s)"
    ) in speed
