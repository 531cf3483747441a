"""The `codeplay` command: train the Setter, verify puzzle solutions, solve puzzles with a Solver LM, synthesize
programs with GIF-MCTS, compare and sweep experiments, benchmark, and Code World Models (`codeplay cwm`).

Heavy imports (torch, transformers) happen inside the commands that need them, so
`codeplay verify` starts fast.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from codeplay_lightning.allocator import keep_freed_memory_on_cpu
from codeplay_lightning.cwm.cli import add_commands as add_cwm_commands
from codeplay_lightning.devices import add_device_option

console = Console(stderr=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="codeplay", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train the Setter with PPO (Lightning)")
    train.add_argument("items", nargs="+", metavar="CONFIG.yaml | key=value",
                       help="config files merged in order over configs/base.yaml, then overrides")
    train.add_argument("--resume", help="a checkpoint to continue from, or 'auto': this config's newest last.ckpt")
    train.set_defaults(run=run_train)

    verify = commands.add_parser("verify", help="check (f, g) pairs in the sandbox")
    verify.add_argument("file", help="JSONL of {name?, f, g, ans_type?} or a P3 puzzles.json")
    verify.add_argument("--timeout", type=_seconds, default=1.0, help="seconds per program (P3's judge: 1)")
    verify.add_argument("--workers", type=_workers, default=2, help="sandbox wardens (programs judged at once)")
    verify.add_argument("--require-isolation", action="store_true",
                        help="refuse to run programs with less than full isolation (root: namespaces, cgroup, seccomp)")
    verify.add_argument("--out", help="JSONL of verdicts (default: <file stem>.verdicts.jsonl here)")
    verify.set_defaults(run=run_verify)

    corpus = commands.add_parser("corpus", help="write our own puzzle corpus, verified in the sandbox, as P3 JSON")
    corpus.add_argument("--n", type=int, required=True, help="instances in all (train and held-out)")
    corpus.add_argument("--seed", type=int, default=0)
    corpus.add_argument("--workers", type=_workers, default=2, help="sandbox wardens (programs judged at once)")
    corpus.add_argument("--out", required=True, help="the P3-format JSON file to write")
    corpus.set_defaults(run=run_corpus)

    sft = commands.add_parser("sft", help="supervised fine-tuning on puzzles, in the prompts' few-shot format")
    sft.add_argument("sources", nargs="+", metavar="CORPUS",
                     help="our corpus JSON (its train split), P3's puzzles.json (with --p3-split), or JSONL of {f, g}")
    sft.add_argument("--model", default="smollm2-135m", help="hub id, local directory or smollm2-135m")
    sft.add_argument("--out", required=True, help="output directory: a model spec usable everywhere")
    sft.add_argument("--p3-split", help="P3's split.json: only its train classes of a P3 puzzles.json are used")
    sft.add_argument("--lora-rank", type=int, default=0, help="0: full fine-tune; > 0: LoRA on every linear layer")
    sft.add_argument("--steps", type=int, default=300, help="optimizer steps")
    sft.add_argument("--batch-size", type=int, default=8, help="packed sequences per step")
    sft.add_argument("--block", type=int, default=512, help="tokens per packed sequence at most")
    sft.add_argument("--lr", type=float, default=0.0, help="peak learning rate (default: 1e-3 LoRA, 5e-5 full)")
    sft.add_argument("--precision", default="bf16-mixed", help="Lightning precision: bf16-mixed, 32-true, ...")
    sft.add_argument("--seed", type=int, default=0)
    sft.add_argument("--resume", action="store_true", help="continue OUT/checkpoints/last.ckpt")
    sft.set_defaults(run=run_sft)

    evaluate = commands.add_parser("evaluate", help="Solver pass@1 and pass@K on a puzzle file, or the Setter's "
                                                    "valid, solved, distinct and novelty rates")
    task = evaluate.add_mutually_exclusive_group(required=True)
    task.add_argument("--puzzles", metavar="FILE", help="P3-format JSON, our corpus JSON or JSONL of {f, g?}")
    task.add_argument("--setter", type=int, metavar="N", help="sample N puzzles from the Setter prompt")
    evaluate.add_argument("--split", help="only the entries of a corpus file in this split "
                                          "(train, heldout_instances, heldout_families)")
    evaluate.add_argument("--limit", type=int, metavar="N", help="only the first N puzzles (after --split)")
    evaluate.add_argument("--llm", default="smollm2-135m-sft", help="smollm2-135m-sft (default), smollm2-135m, "
                                                                   "hub id, local directory")
    evaluate.add_argument("--attempts", type=int, default=4, metavar="K", help="Solver samples per puzzle")
    evaluate.add_argument("--fewshot", type=int, default=16, help="bundled few-shot puzzles in the prompts")
    evaluate.add_argument("--batch-size", type=int, default=32, help="rows sampled together")
    evaluate.add_argument("--max-new-tokens", type=int, default=128)
    evaluate.add_argument("--temperature", type=float, default=0.8)
    evaluate.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16",
                          help="model weights; bfloat16 samples ~1.5x faster on CPUs with AMX or on GPUs")
    add_device_option(evaluate)
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument("--workers", type=_workers, default=2, help="sandbox wardens (programs judged at once)")
    evaluate.add_argument("--out", required=True, help="directory for summary.json and puzzles.jsonl")
    evaluate.set_defaults(run=run_evaluate)

    synthesize = commands.add_parser("synthesize", help="write programs for P3 puzzles or APPS problems with "
                                                        "GIF-MCTS or a baseline, searching every task at once")
    synthesize.add_argument("--task", nargs=2, required=True, metavar=("p3|apps", "PATH"),
                            help="p3 with a puzzle file (as for solve) or 'bundled' (the bundled puzzles); "
                                 "apps with an APPS problem directory or a directory of them")
    synthesize.add_argument("--method", default="gif-mcts",
                            help="gif-mcts (default), worldcoder, or sample (B independent samples)")
    synthesize.add_argument("--budget", type=int, default=50, metavar="B", help="LLM calls per task (paper: 50)")
    synthesize.add_argument("--llm", default="smollm2-135m",
                            help="smollm2-135m (default), a hub id, a local directory, "
                                 "or openai:BASE_URL#MODEL for an OpenAI-compatible server")
    synthesize.add_argument("--chat", action=argparse.BooleanOptionalAction,
                            help="send prompts as chat messages (default: on for a server, and for a local model "
                                 "whose tokenizer has a chat template)")
    synthesize.add_argument("--max-new-tokens", type=int, default=256, help="per completion (paper: 1500, on GPUs)")
    synthesize.add_argument("--temperature", type=float, default=1.0, help="paper table 5: 1.0")
    synthesize.add_argument("--top-p", type=float, default=0.8, help="paper table 5: 0.8")
    synthesize.add_argument("--top-k", type=int, default=100, help="paper table 5: 100 (0: no limit)")
    synthesize.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                            help="weights of a local model; bfloat16 samples ~1.5x faster on CPUs with AMX or on GPUs")
    add_device_option(synthesize)
    synthesize.add_argument("--seed", type=int, default=0, help="seeds the LLM's sampling and WorldCoder's choices")
    synthesize.add_argument("--workers", type=_workers, default=2, help="sandbox wardens (programs judged at once)")
    synthesize.add_argument("--timeout", type=_seconds, default=1.0,
                            help="seconds per program in the sandbox (an APPS problem runs one per test)")
    synthesize.add_argument("--limit", type=int, metavar="N", help="only the first N tasks")
    synthesize.add_argument("--out", help="directory for tasks/*.json, summary.json and summary.md "
                                          "(default: synthesis/<method>)")
    synthesize.set_defaults(run=run_synthesize)

    bench = commands.add_parser("bench", help="side-by-side benchmarks; prints ratios, writes JSON")
    bench.add_argument("--out", default="bench/bench.json")
    bench.add_argument("--pairs", type=int, default=3000, help="programs in the sandbox benchmark")
    bench.add_argument("--skip-model", action="store_true", help="only the sandbox benchmark")
    bench.set_defaults(run=run_bench)

    compare = commands.add_parser("compare", help="the paper's figure 2 and appendix C from training runs")
    compare.add_argument("runs", nargs="+", metavar="RUN_DIR", help="runs/<preset>/version_N directories")
    compare.add_argument("--out", required=True, help="directory for figure.png and report.md")
    compare.add_argument("--seed", type=int, default=0, help="seeds the appendix's puzzle samples")
    compare.set_defaults(run=run_compare)

    sweep = commands.add_parser("sweep", help="train the paper's presets one after another (resumable), then compare")
    sweep.add_argument("--presets", help="comma-separated configs/<preset>.yaml names (default: the paper's six, "
                                         "none,difficulty,novelty,balanced,novelty_biased,product)")
    sweep.add_argument("--run-root", default="runs", help="each preset trains into RUN_ROOT/<preset>/version_0")
    sweep.add_argument("--out", default="docs/results", help="where compare writes figure.png and report.md")
    sweep.add_argument("--seed", type=int, default=0, help="trainer.seed of every run, and the compare seed")
    sweep.set_defaults(run=run_sweep)

    add_cwm_commands(commands)

    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, OSError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        print(f"error: {_printable(lines[0])}", file=sys.stderr)
        return 2


def _seconds(text: str) -> float:
    """A timeout: a finite number of seconds above 0 and at most a day."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < seconds <= 86_400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{text!r}: a timeout is above 0 and at most 86400 seconds")
    return seconds


def _workers(text: str) -> int:
    try:
        workers = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= workers <= 256:
        raise argparse.ArgumentTypeError(f"{text!r}: between 1 and 256 sandbox wardens")
    return workers


def _printable(text: str) -> str:
    """Text a program wrote, safe for a terminal: control characters (escape sequences among
    them) and lone surrogates shown as escapes, never interpreted."""
    return "".join(char if char.isprintable() or char == "\n" else repr(char)[1:-1] for char in text)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), console=console, transient=True)


def _default_out(file: str, suffix: str) -> Path:
    return Path(Path(file).stem + suffix)


def run_train(args: argparse.Namespace) -> int:
    import logging

    from codeplay_lightning.config import load_config

    files = [item for item in args.items if "=" not in item]
    overrides = [item for item in args.items if "=" in item]
    config = load_config(files, overrides)  # every config error before the heavy imports below
    keep_freed_memory_on_cpu(config.trainer.accelerator)  # PPO updates a fifth faster on CPU

    from codeplay_lightning.train import train

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    run_dir = train(config, resume=args.resume)
    print(f"run directory: {run_dir}  (tensorboard --logdir {Path(config.trainer.run_root)})")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from codeplay_lightning.execution import Program, Sandbox, Verdict
    from codeplay_lightning.puzzles.files import read_puzzle_file

    entries = read_puzzle_file(args.file)
    pairs = [e for e in entries if e.g is not None or e.problem]
    if not pairs:
        raise ValueError(f"{args.file} holds no (f, g) pair to verify ({len(entries)} puzzles without a solution)")
    programs = [Program(e.puzzle.f, e.g, e.puzzle.ans_type, e.name) for e in pairs if not e.problem]
    out = Path(args.out) if args.out else _default_out(args.file, ".verdicts.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as handle:  # opened first: a bad --out fails before the batch, not after it
        started = time.perf_counter()
        with (Sandbox(workers=args.workers, timeout=args.timeout, require_isolation=args.require_isolation) as sandbox,
              _progress() as progress):
            isolation = sandbox.isolation
            task = progress.add_task("verifying", total=len(programs))
            verdicts = iter(sandbox.verify(programs, on_verdict=lambda *_: progress.advance(task)))
        elapsed = time.perf_counter() - started
        counts: Counter[str] = Counter()
        failures = []
        for entry in pairs:
            verdict = Verdict("syntax", entry.problem, 0.0) if entry.problem else next(verdicts)
            counts[verdict.status] += 1
            if not verdict.passed:
                failures.append((entry.name, verdict))
            handle.write(json.dumps({"name": entry.name, "status": verdict.status,
                                     "detail": verdict.detail, "seconds": round(verdict.seconds, 6)}) + "\n")
    total = sum(counts.values())
    print(f"{total} pairs in {elapsed:.1f} s ({len(programs) / elapsed:.0f} verdicts/s), isolation: {isolation}")
    print("  " + "  ".join(f"{status}: {counts[status]}" for status in sorted(counts)))
    if total:
        print(f"  pass rate: {100 * counts['pass'] / total:.2f}%")
    skipped = len(entries) - len(pairs)
    if skipped:
        print(f"  {skipped} puzzles without a reference solution were skipped")
    for name, verdict in failures[:20]:
        last_line = verdict.detail.splitlines()[-1] if verdict.detail else ""
        print(f"  {verdict.status:8} {_printable(name)}: {_printable(last_line)}"[:160])
    if len(failures) > 20:
        print(f"  ... {len(failures) - 20} more in {out}")
    print(f"verdicts written to {out}")
    return 0


def run_corpus(args: argparse.Namespace) -> int:
    from codeplay_lightning.corpus import FAMILIES, HELDOUT_FAMILIES
    from codeplay_lightning.corpus.build import build_corpus
    from codeplay_lightning.execution import Sandbox

    if args.n < 1:
        raise ValueError(f"--n must be at least 1, got {args.n}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with Sandbox(workers=args.workers, timeout=2.0) as sandbox:
        entries, lost = build_corpus(FAMILIES, HELDOUT_FAMILIES, args.n, args.seed, sandbox)
    out.write_text(json.dumps(entries, indent=1) + "\n")
    splits = Counter(entry["split"] for entry in entries)
    print(f"{len(entries)} verified puzzles from {len(FAMILIES)} families in {time.perf_counter() - started:.1f} s: "
          + ", ".join(f"{name} {count}" for name, count in sorted(splits.items())))
    if lost:
        print(f"  dropped by verification: {sum(lost.values())} ({', '.join(f'{k} {v}' for k, v in lost.most_common(5))})")
    print(f"written to {out}")
    return 0


def run_sft(args: argparse.Namespace) -> int:
    import logging

    from codeplay_lightning.sft import SFTConfig, fine_tune

    config = SFTConfig(lora_rank=args.lora_rank, steps=args.steps, batch_size=args.batch_size, block=args.block,
                       lr=args.lr, precision=args.precision, seed=args.seed)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    keep_freed_memory_on_cpu("auto")  # the accelerator fine_tune asks Lightning for
    out = fine_tune(args.sources, args.model, args.out, config, p3_split=args.p3_split, resume=args.resume)
    record = json.loads((out / "sft.json").read_text())
    print(f"{record['steps']} steps in {record['seconds']:.0f} s, final loss {record['final_loss']:.3f}; "
          f"model written to {out} (use it as a model spec; tensorboard --logdir {out / 'logs'})")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    import torch

    from codeplay_lightning.execution import Sandbox
    from codeplay_lightning.llm import load_llm
    from codeplay_lightning.puzzles import fewshot_puzzles
    from codeplay_lightning.solver import FewShotSolver, SolverConfig, solver_sampling

    for flag, value in (("--attempts", args.attempts), ("--setter", args.setter), ("--limit", args.limit)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    examples = fewshot_puzzles()[:args.fewshot]
    config = SolverConfig(attempts=args.attempts, batch_size=args.batch_size,
                          max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    generator = torch.Generator().manual_seed(args.seed)
    llm = load_llm(args.llm, solver_sampling(config), chat=False, dtype=getattr(torch, args.dtype), device=args.device,
                   batch_size=config.batch_size, generator=generator)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with Sandbox(workers=args.workers) as sandbox, _progress() as progress:
        solver = FewShotSolver(llm, sandbox, examples, config)
        if args.setter is not None:
            summary, rows = _evaluate_setter(args, llm, solver, examples, progress)
        else:
            summary, rows = _evaluate_solver(args, solver, progress)
    summary |= {"llm": args.llm, "attempts": args.attempts, "seconds": round(time.perf_counter() - started, 1)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with (out / "puzzles.jsonl").open("w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    for key, value in summary.items():
        if key != "groups":
            print(f"  {key:<16} {value:.3f}" if isinstance(value, float) else f"  {key:<16} {value}")
    print(f"results written to {out} (summary.json, puzzles.jsonl)")
    return 0


def _evaluate_solver(args: argparse.Namespace, solver, progress) -> tuple[dict, list[dict]]:
    from codeplay_lightning.solver.evaluation import solver_summary
    from codeplay_lightning.puzzles.files import read_puzzle_file, split_and_groups

    entries = read_puzzle_file(args.puzzles)
    for entry in entries:
        if entry.problem:
            console.print(f"[yellow]skipped:[/yellow] {entry.problem}", highlight=False)
    splits, groups = split_and_groups(args.puzzles)
    if args.split is not None:
        if not splits:
            raise ValueError(f"--split: {args.puzzles} has no split field")
        if args.split not in set(splits.values()):
            raise ValueError(f"--split {args.split!r}: {args.puzzles} has the splits {sorted(set(splits.values()))}")
    puzzles = list({e.name: e.puzzle for e in entries if not e.problem
                    and (args.split is None or splits.get(e.name) == args.split)}.values())[:args.limit]
    if not puzzles:
        raise ValueError(f"{args.puzzles} holds no usable puzzle")
    task = progress.add_task("solving", total=len(puzzles) * args.attempts)
    results = solver.solve(puzzles, on_batch_done=lambda done, total: progress.update(task, completed=done))
    rows = [{"name": r.puzzle.name, "group": groups.get(r.puzzle.name), "attempts": r.attempts, "passes": r.passes,
             "statuses": dict(Counter(v.status for v in r.verdicts)),
             "tries": [{"g": p.g, "status": v.status, "detail": v.detail} for p, v in zip(r.programs, r.verdicts)]}
            for r in results]
    return solver_summary(results, groups), rows


def _evaluate_setter(args: argparse.Namespace, llm, solver, examples, progress) -> tuple[dict, list[dict]]:
    from dataclasses import replace

    from codeplay_lightning.archive import NoveltyArchive, embed, load_embedder, reference_mean_distance
    from codeplay_lightning.corpus import reference_puzzles
    from codeplay_lightning.setter.evaluation import setter_summary
    from codeplay_lightning.llm import HFLLM
    from codeplay_lightning.models import token_consistent_prompt
    from codeplay_lightning.puzzles import SETTER_STOP, check_puzzle, setter_prompt
    from codeplay_lightning.rewards import novelty_reward

    task = progress.add_task("setting", total=None)
    setter_llm = copy.copy(llm)
    setter_llm.sampling = replace(llm.sampling, stop_strings=SETTER_STOP)
    prompt = setter_prompt(examples)
    if isinstance(llm, HFLLM):  # the prompt training samples from; a server's tokenizer is not ours to check
        prompt = token_consistent_prompt(llm.tokenizer, prompt, examples[0].f)
    texts = [text.rstrip() for text in setter_llm.complete([prompt] * args.setter)]
    checks = [check_puzzle(text, f"setter:{index}") for index, text in enumerate(texts)]
    valid = [check.puzzle for check in checks if check.valid]
    progress.update(task, description="solving")
    solved = [result.passes > 0 for result in solver.solve(valid)]
    embedder = load_embedder()
    reference = reference_mean_distance(embed(embedder, [p.f for p in reference_puzzles()]))
    archive = NoveltyArchive(embedder.get_embedding_dimension())
    distances = archive.score_and_add(texts, embed(embedder, texts))
    novelty = [novelty_reward(d.tolist(), reference) for d in distances]
    solved_by_text = iter(solved)
    rows = [{"f": text, "valid": check.valid, "reason": check.reason,
             "solved": next(solved_by_text) if check.valid else False, "r_n": r_n}
            for text, check, r_n in zip(texts, checks, novelty)]
    return setter_summary(texts, [c.valid for c in checks], solved, novelty), rows


def run_synthesize(args: argparse.Namespace) -> int:
    import torch

    from codeplay_lightning.execution import Sandbox
    from codeplay_lightning.llm import load_llm
    from codeplay_lightning.models import SamplingConfig
    from codeplay_lightning.search.synthesis import SynthesisConfig, load_tasks, synthesize

    config = SynthesisConfig(args.method, args.budget, args.seed)
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {args.limit}")
    sampling = SamplingConfig(args.max_new_tokens, args.temperature, args.top_p, top_k=args.top_k)
    kind, path = args.task
    out = Path(args.out or f"synthesis/{args.method}")
    with Sandbox(workers=args.workers, timeout=args.timeout) as sandbox:
        tasks = dict(list(load_tasks(kind, path, sandbox).items())[:args.limit])
        llm = load_llm(args.llm, sampling, chat=args.chat, dtype=getattr(torch, args.dtype), device=args.device,
                       generator=torch.Generator().manual_seed(args.seed))
        arguments = {key: value for key, value in vars(args).items() if key not in ("command", "run")}
        with _progress() as progress:
            bar = progress.add_task("synthesizing", total=len(tasks))

            def show(finished: int, total: int, calls: int) -> None:
                progress.update(bar, completed=finished, description=f"synthesizing ({calls} LLM calls)")

            summary = synthesize(tasks, llm, config, out, llm_spec=args.llm,
                                 arguments=arguments | {"chat": llm.chat, "out": str(out)}, on_progress=show)
    for label, value in summary.rows():
        print(f"  {label:<18} {value}")
    print(f"results written to {out} (summary.md, summary.json, tasks/)")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    from codeplay_lightning.experiments.compare import compare

    _print_comparison(compare([Path(run) for run in args.runs], Path(args.out), seed=args.seed))
    return 0


def run_sweep(args: argparse.Namespace) -> int:
    import logging

    from codeplay_lightning.experiments.sweep import PRESETS, sweep

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    presets = [preset.strip() for preset in args.presets.split(",") if preset.strip()] if args.presets else PRESETS
    result = sweep(presets, Path(args.run_root), Path(args.out), seed=args.seed)
    _print_comparison(result["comparison"])
    return 0


def _print_comparison(result: dict) -> None:
    for run in result["runs"]:
        final = "  ".join(f"{key}={'-' if value is None else f'{value:.3f}'}" for key, value in run["final"].items())
        print(f"{run['label']}: {run['puzzles']} puzzles  {final}")
        for note in run["notes"]:
            print(f"  note: {note}")
    print(f"figure: {result['figure']}\nreport: {result['report']}")


def run_bench(args: argparse.Namespace) -> int:
    from benchmarks import run_benchmarks

    run_benchmarks(Path(args.out), pairs=args.pairs, with_model=not args.skip_model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
