"""The sandbox against the machine's bare fork speed, a naive process-per-program harness and
unsandboxed in-process judging."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from codeplay_lightning.execution import Program, Sandbox
from codeplay_lightning.execution.api import usable_cores
from codeplay_lightning.execution.warden.answers import answer_type_of
from codeplay_lightning.execution.warden.programs import judge_answer, run_g
from codeplay_lightning.puzzles import bundled_puzzles

NAIVE_THREADS = 4
# The naive harness's deadline also covers starting its Manager and Process, which under load can
# take longer than a program's 1 s: it gets more, so that its verdicts are comparable (no program
# in the benchmark mix runs long).
NAIVE_DEADLINE = 5.0
WORKERS = 2
ITERATION_PROGRAMS = 184  # a CPU-scale iteration judges about 46 puzzles x N_a = 4 attempts
# What a process costs on this machine: a minimal Python (no site, nothing imported) forking a child
# that exits at once, and waiting for it, in a loop; run as WORKERS loops at once, as the sandbox runs.
BARE_FORK_LOOP = """
import os, sys, time
started = time.perf_counter()
for _ in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
print(time.perf_counter() - started)
"""


def benchmark_programs(count: int) -> list[Program]:
    """A deterministic mix over the bundled puzzles: reference solutions (pass), wrong answers
    (fail), raising solutions (error) and broken ones (syntax), cycled to `count` programs, each
    with an f of its own (a comment numbers it): nothing is reused from one program to the next."""
    mix = []
    for puzzle in bundled_puzzles():
        mix += [Program(puzzle.f, g, puzzle.ans_type, puzzle.name) for g in puzzle.solutions]
        mix.append(Program(puzzle.f, "def g():\n    return None", puzzle.ans_type, puzzle.name))
        mix.append(Program(puzzle.f, "def g():\n    return [][0]", puzzle.ans_type, puzzle.name))
    mix.append(Program("def f(x: int):\n    return x > 0", "def g(:\n    return 1", "int", "broken"))
    return [_numbered(mix[index % len(mix)], index) for index in range(count)]


def _numbered(program: Program, index: int) -> Program:
    return Program(f"{program.f.rstrip()}\n# program {index}\n", program.g, program.ans_type, program.name)


def bare_forks_per_second(forks: int, loops: int = WORKERS) -> float:
    """Forks per second of `loops` bare fork loops of a minimal Python at once, `forks` each."""
    runs = [
        subprocess.Popen(
            [sys.executable, "-S", "-I", "-c", BARE_FORK_LOOP, str(forks)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(loops)
    ]
    return loops * forks / max(float(run.communicate()[0]) for run in runs)


def judge_in_process(program: Program) -> str:
    """The sandbox's verdict logic with no isolation at all: what the naive harness runs in each of
    its processes, and the in-process ceiling."""
    try:
        answer_type = answer_type_of(program.f, program.ans_type)
    except ValueError:
        return "error"
    status, answer, _, shared = run_g(program.g, b"", answer_type)
    return judge_answer(program.f, b"", answer_type, answer, shared)[0] if status == "answer" else status


def _naive_child(program: Program, result) -> None:
    result["status"] = judge_in_process(program)


def _naive_verify(program: Program) -> str:
    with multiprocessing.Manager() as manager:
        result = manager.dict()
        process = multiprocessing.get_context("fork").Process(target=_naive_child, args=(program, result))
        process.start()
        process.join(NAIVE_DEADLINE)
        if process.is_alive():
            process.kill()
            process.join()
            return "timeout"
        return result.get("status", "error")


def bench_sandbox(count: int) -> dict:
    programs = benchmark_programs(count)
    bare_before = bare_forks_per_second(count)
    with Sandbox(workers=WORKERS) as sandbox:
        sandbox.verify(programs[:50])  # start-up and compile caches are not what is measured
        started = time.perf_counter()
        verdicts = sandbox.verify(programs)
        sandbox_seconds = time.perf_counter() - started
        isolation = sandbox.isolation
    bare = (bare_before + bare_forks_per_second(count)) / 2  # on each side of the sandbox's run
    started = time.perf_counter()
    with ThreadPoolExecutor(NAIVE_THREADS) as pool:
        naive_statuses = list(pool.map(_naive_verify, programs))
    naive_seconds = time.perf_counter() - started
    # Forking from a multi-threaded process occasionally deadlocks the child (about 1 in 1,000
    # here): such hangs are re-run once, alone, and counted, not taken as the program's verdict.
    hung = [index for index, status in enumerate(naive_statuses) if status == "timeout"]
    for index in hung:
        naive_statuses[index] = _naive_verify(programs[index])
    started = time.perf_counter()
    inprocess_statuses = [judge_in_process(program) for program in programs]
    inprocess_seconds = time.perf_counter() - started
    statuses = [v.status for v in verdicts]
    mismatches = [
        f"{p.name}: sandbox {a}, naive {b}, in-process {c}"
        for p, a, b, c in zip(programs, statuses, naive_statuses, inprocess_statuses)
        if not a == b == c
    ]
    return {
        "programs": count,
        "isolation": isolation,
        "sandbox_verdicts_per_s": count / sandbox_seconds,
        "bare_forks_per_s": bare,
        "fraction_of_bare_forks": count / sandbox_seconds / bare,
        "naive_verdicts_per_s": count / naive_seconds,
        "inprocess_verdicts_per_s": count / inprocess_seconds,
        "speedup_vs_naive": naive_seconds / sandbox_seconds,
        "fraction_of_inprocess": inprocess_seconds / sandbox_seconds,
        "identical_verdicts": not mismatches,
        "naive_hangs_rerun": len(hung),
        "mismatches": mismatches[:20],
        "status_counts": {s: statuses.count(s) for s in sorted(set(statuses))},
    }


def bench_workers(count: int = ITERATION_PROGRAMS) -> dict:
    """An iteration's worth of programs judged with 1 worker, 2, and `auto`'s (one per usable core), each on a
    warmed-up sandbox of its own: seconds, and the speed-up over one worker."""
    programs = benchmark_programs(count)
    seconds = {}
    for workers in sorted({1, 2, usable_cores()}):
        with Sandbox(workers=workers) as sandbox:
            sandbox.verify(programs[:20])
            started = time.perf_counter()
            sandbox.verify(programs)
            seconds[workers] = time.perf_counter() - started
    return {
        "programs": count,
        "usable_cores": usable_cores(),
        "seconds": seconds,
        "speedup_over_one": {workers: seconds[1] / value for workers, value in seconds.items()},
    }


def bench_ray(count: int) -> dict:
    """The same programs judged by the local backend and the Ray backend (`sandbox.backend: ray`, WORKERS actors on
    a Ray instance of WORKERS CPUs started on this machine), each warmed up: verdicts/s side by side, the local
    backend's the mean of a run on each side of Ray's. Skipped, with the reason, without the ray extra."""
    try:
        import ray

        from codeplay_lightning.execution.ray_backend import RaySandbox
    except ImportError as error:
        return {"skipped": str(error)}
    programs = benchmark_programs(count)

    def verdicts_per_second(sandbox) -> tuple[float, list[str]]:
        sandbox.verify(programs[:50])
        started = time.perf_counter()
        statuses = [verdict.status for verdict in sandbox.verify(programs)]
        return count / (time.perf_counter() - started), statuses

    with Sandbox(workers=WORKERS) as sandbox:
        local_before, local_statuses = verdicts_per_second(sandbox)
    ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False)
    try:
        with RaySandbox(workers=WORKERS) as sandbox:
            remote, remote_statuses = verdicts_per_second(sandbox)
    finally:
        ray.shutdown()
    with Sandbox(workers=WORKERS) as sandbox:
        local_after, _ = verdicts_per_second(sandbox)
    local = (local_before + local_after) / 2
    return {
        "programs": count,
        "workers": WORKERS,
        "local_verdicts_per_s": local,
        "local_runs_verdicts_per_s": [local_before, local_after],  # how far the host's load moved it meanwhile
        "ray_verdicts_per_s": remote,
        "ray_over_local": remote / local,
        "identical_verdicts": remote_statuses == local_statuses,
    }
