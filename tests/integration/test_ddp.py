"""DDP with 2 CPU processes on the tiny stream model, end to end. Lightning's `ddp` strategy
re-executes the command line as rank 1, so each run is `ddp_script.py` in a subprocess.

Three runs: two iterations ("first"), the same continued to three from its checkpoint, and three
straight through (beside the first, to save time). Each must finish without a hang and leave no
process behind; both ranks must end with the same archive, steps and weights, and puzzles.jsonl
(rank 0) must hold every rank's puzzles. The resumed run must continue exactly like the straight one.

Self-play (`ddp_script.py ... selfplay`: scripted Solvers, a BC phase every iteration) likewise: two
iterations straight, and one continued to two. Every rank's verified pairs must enter both ranks' replay
buffers once, in rank order; both ranks' Solver adapters must stay bit for bit alike through the BC phases,
and the resumed run must end with the straight one's buffer and adapters.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from codeplay_lightning.experiments.sweep import completed_iterations

SCRIPT = Path(__file__).with_name("ddp_script.py")
NODES_TIMEOUT = 30  # ddp_script.py's trainer.collective_timeout with `nodes`
TIMEOUT = 300  # seconds per run; one takes about 20 s (the script itself gives up on a hang after 240 s)
# set by a launcher around pytest, they would point both runs at one rendezvous: Lightning picks a free port
LAUNCHER_ENV = {
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "LOCAL_RANK",
    "GLOBAL_RANK",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "PL_GLOBAL_SEED",
    "TORCHELASTIC_RUN_ID",
    "SLURM_NTASKS",
    "SLURM_JOB_NAME",
}
SUPERVISOR = re.compile(r'"supervisor_pid": (\d+)')

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="needs torch.distributed with gloo",
)


class Runs:
    """Launches `ddp_script.py` runs, their ranks given the session's reference set; kills whatever is still
    running when the test ends."""

    def __init__(self, reference_file: Path):
        self.processes: list[subprocess.Popen] = []
        self.reference_file = reference_file

    def environment(self, **extra: str) -> dict[str, str]:
        kept = {key: value for key, value in os.environ.items() if key not in LAUNCHER_ENV}
        return kept | {"DDP_SCRIPT_REFERENCE": str(self.reference_file), **extra}

    def launch(self, out: Path, iterations: int, *words: str) -> tuple[subprocess.Popen, Path]:
        """`words`: `auto` (resume), `selfplay` (the script's self-play mode)."""
        out.mkdir(parents=True, exist_ok=True)
        with (out / "log.txt").open("w") as log:
            process = subprocess.Popen(
                [sys.executable, str(SCRIPT), str(out), str(iterations), *words],
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(process)
        return process, out

    def finish(self, run: tuple[subprocess.Popen, Path]) -> list[dict]:
        """Each rank's record, once the run has ended well and left no process behind."""
        process, out = run
        try:
            code = process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill(process)
            code = f"a hang (killed after {TIMEOUT} s)"
        log = (out / "log.txt").read_text(errors="replace")
        assert code == 0, f"the DDP run in {out} ended with {code}; the end of its log:\n{log[-6000:]}"
        ranks = [torch.load(out / f"rank{rank}.pt", map_location="cpu", weights_only=False) for rank in (0, 1)]
        left = processes_of(out, {process.pid, *(record["pid"] for record in ranks)})
        assert not left, f"processes left behind by the run in {out}: {left}"
        return ranks

    def kill(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # rank 0 and the rank 1 it started (the sandboxes follow)
            process.wait()

    def close(self) -> None:
        for process in self.processes:
            self.kill(process)


@pytest.fixture
def runs(smoke_reference_file):
    runs = Runs(smoke_reference_file)
    yield runs
    runs.close()


def processes_of(out: Path, pids: set[int]) -> list[str]:
    """Live processes with `out` in their command line or one of `pids` as their sandbox supervisor."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:  # gone meanwhile
            continue
        supervisor = SUPERVISOR.search(" ".join(args))
        if str(out) in args or (supervisor and int(supervisor.group(1)) in pids):
            found.append(f"{entry.name}: {' '.join(args)[:200]}")
    return found


def run_dir(out: Path) -> Path:
    versions = sorted((out / "runs" / "smoke").iterdir())
    assert [path.name for path in versions] == ["version_0"]  # a resumed run continues its run's folder
    return versions[0]


def read_records(out: Path, name: str = "puzzles.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run_dir(out) / name).read_text().splitlines()]


def read_puzzles(out: Path) -> list[dict]:
    return read_records(out)


def check_run(out: Path, ranks: list[dict], iterations: int) -> None:
    """Both ranks agree, and rank 0's files hold both ranks' puzzles."""
    zero, one = ranks
    assert zero["world_size"] == one["world_size"] == 2
    returned = [json.loads((out / f"rank{n}.returned.json").read_text()) for n in (0, 1)]
    assert [Path(rank["run_dir"]) for rank in returned] == [run_dir(out)] * 2  # rank 0's folder
    # a gloo group left to the interpreter's exit can abort a finished rank (SIGABRT), failing its torchrun node
    assert [rank["group_left"] for rank in returned] == [False, False]
    assert zero["archive"]["texts"] == one["archive"]["texts"]  # the same puzzles in the same order
    assert torch.equal(zero["archive"]["embeddings"], one["archive"]["embeddings"])
    assert zero["global_step"] == one["global_step"] == iterations * zero["steps_per_iteration"]
    assert zero["batch_sizes"] and len(zero["batch_sizes"]) == len(one["batch_sizes"])
    assert zero["state_dict"].keys() == one["state_dict"].keys()
    for name, value in zero["state_dict"].items():  # DDP keeps the weights bit for bit in sync
        assert torch.equal(value, one["state_dict"][name]), name

    puzzles = read_puzzles(out)
    texts = [puzzle["puzzle"] for puzzle in puzzles]
    assert texts == zero["archive"]["texts"]  # every puzzle of every rank, as archived
    assert [puzzle["index"] for puzzle in puzzles] == list(range(1, len(puzzles) + 1))
    first_iteration = iterations - len(zero["buffer_sizes"])  # > 0 when resumed
    for iteration, mine, theirs in zip(range(first_iteration, iterations), zero["buffer_sizes"], one["buffer_sizes"]):
        this = [puzzle["puzzle"] for puzzle in puzzles if puzzle["iteration"] == iteration]
        assert len(this) == mine + theirs  # rank 0's puzzles, then rank 1's
        if mine and theirs:  # each rank samples its own puzzles (a resumed rank too)
            assert this[:mine] != this[mine:]

    checkpoint = torch.load(run_dir(out) / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert completed_iterations(run_dir(out) / "checkpoints" / "last.ckpt") == iterations
    assert checkpoint["global_step"] == zero["global_step"]
    assert checkpoint["callbacks"]["RolloutCallback"]["archive"]["texts"] == texts
    assert checkpoint["state_dict"].keys() == zero["state_dict"].keys()
    for name, value in checkpoint["state_dict"].items():
        assert torch.equal(value, zero["state_dict"][name]), name


def one_rank_empty(ranks: list[dict]) -> int:
    """How many steps had an empty minibatch on exactly one rank (it steps with a zero loss)."""
    return sum((a == 0) != (b == 0) for a, b in zip(ranks[0]["batch_sizes"], ranks[1]["batch_sizes"]))


def test_ddp_two_cpu_processes_agree_and_resume_exactly(tmp_path, runs):
    first = runs.launch(tmp_path / "first", 2)
    straight = runs.launch(tmp_path / "straight", 3)
    first_ranks = runs.finish(first)
    resumed = runs.launch(tmp_path / "first", 3, "auto")  # continues first's run from its last.ckpt
    straight_ranks, resumed_ranks = runs.finish(straight), runs.finish(resumed)

    check_run(tmp_path / "first", resumed_ranks, 3)
    check_run(tmp_path / "straight", straight_ranks, 3)
    assert one_rank_empty(first_ranks) + one_rank_empty(straight_ranks) > 0  # the zero-loss step was exercised

    # resumed = straight: the same puzzles from both ranks, the same archive and weights
    assert read_puzzles(tmp_path / "first") == read_puzzles(tmp_path / "straight")
    assert len(first_ranks[0]["archive"]["texts"]) < len(resumed_ranks[0]["archive"]["texts"])
    for resumed_rank, straight_rank in zip(resumed_ranks, straight_ranks):
        assert resumed_rank["archive"]["texts"] == straight_rank["archive"]["texts"]
        assert torch.equal(resumed_rank["archive"]["embeddings"], straight_rank["archive"]["embeddings"])
        assert resumed_rank["global_step"] == straight_rank["global_step"]
        assert resumed_rank["batch_sizes"] == straight_rank["batch_sizes"][-len(resumed_rank["batch_sizes"]) :]
        for name, value in straight_rank["state_dict"].items():
            torch.testing.assert_close(resumed_rank["state_dict"][name], value)


# as ddp_script.py's self-play mode: rank r's Setter streams write these two puzzles every iteration
def rank_puzzles(rank: int) -> list[str]:
    return [f"def f(x: int):\n    return x == {7 + rank}", f"def f(x: int):\n    return x * x == -{1 + rank}"]


SOLVER_ATTEMPTS, BC_BATCH_SIZE = 4, 4  # solver.attempts and selfplay.bc_batch_size of that mode


def solves(f: str, g: str) -> bool:
    """Whether g() satisfies f, run here (both are the script's own scripted texts)."""
    namespace: dict = {}
    exec(f"{f}\n\n{g}", namespace)
    return namespace["f"](namespace["g"]()) is True


def without_seconds(record):
    if isinstance(record, dict):
        return {key: without_seconds(value) for key, value in record.items() if not key.endswith("seconds")}
    return record


def check_selfplay(out: Path, ranks: list[dict], iterations: int) -> None:
    """A self-play run from its first iteration: every rank's verified pairs in both replay buffers once, in
    iteration then rank order; the same adapters on both ranks, moved by BC; a phase logged per iteration."""
    zero, one = ranks
    # each rank's own Solver passed only right answers, to its own solvable puzzle only, as the judge counted;
    # none when it passed at every attempt (BC learns from the puzzles it passed at some)
    puzzles = read_puzzles(out)
    assert [puzzle["puzzle"] for puzzle in puzzles] == [*rank_puzzles(0), *rank_puzzles(1)] * iterations
    for rank, record in enumerate(ranks):
        assert len(record["verified"]) == iterations
        for iteration, pairs in enumerate(record["verified"]):
            assert all(f == rank_puzzles(rank)[0] and solves(f, g) for f, g in pairs)
            judged = puzzles[4 * iteration + 2 * rank]  # this rank's solvable puzzle of the iteration
            passes = round(SOLVER_ATTEMPTS / judged["D"])
            assert judged["valid"] and len(pairs) == (passes if passes < SOLVER_ATTEMPTS else 0)
            assert puzzles[4 * iteration + 2 * rank + 1]["D"] is None  # the unsolvable one: nothing to verify
        assert any(record["verified"])
    assert any(puzzle["D"] not in (None, 1) for puzzle in puzzles)  # a wrong answer was judged and left out

    # (a) both buffers alike: every distinct pair of every rank once, in arrival order (iteration, then rank)
    assert zero["replay"] == one["replay"]
    pairs = [(f, g) for _, f, g, _ in zero["replay"]]
    arrivals = [pair for iteration in zip(zero["verified"], one["verified"]) for mine in iteration for pair in mine]
    assert pairs == list(dict.fromkeys(arrivals))
    assert len(pairs) < len(arrivals), "no pair was found twice: the buffer's deduplication went untested"
    assert {f for f, _ in pairs} == {rank_puzzles(0)[0], rank_puzzles(1)[0]}

    # (b) the same adapters on both ranks, bit for bit: at the start (seeded alike, every B at 0) and after BC
    assert zero["phases"] == one["phases"] == iterations
    for name, value in zero["adapters"].items():
        assert torch.equal(value, one["adapters"][name]), name
        assert torch.equal(zero["initial_adapters"][name], one["initial_adapters"][name]), name
        if "lora_B" in name:
            assert not zero["initial_adapters"][name].any(), name
            assert value.any(), f"{name}: BC left it at 0"
    assert any("lora_B" in name for name in zero["adapters"])

    # (c) rank 0's solver.jsonl: a phase per iteration, with steps where there were new pairs
    phases = read_records(out, "solver.jsonl")
    assert [phase["iteration"] for phase in phases] == list(range(iterations))
    assert [phase["phase"] for phase in phases] == list(range(1, iterations + 1))
    assert ["initial" in phase for phase in phases] == [True] + [False] * (iterations - 1)
    seen: set = set()
    for phase, iteration in zip(phases, zip(zero["verified"], one["verified"])):
        new = {pair for mine in iteration for pair in mine} - seen
        seen |= new
        bc = phase["bc"]
        assert bc["new_pairs"] == len(new)
        sequences = bc["new_pairs"] + bc["replayed"] + bc["from_corpus"]
        assert bc["steps"] == (math.ceil(sequences / BC_BATCH_SIZE) if bc["new_pairs"] else 0)
        assert phase["learned"]["heldout_families"]["puzzles"] == 2  # both ranks' shares of the evaluation
    assert any(phase["bc"]["steps"] > 0 for phase in phases)


def test_ddp_selfplay_ranks_share_pairs_and_adapters_and_resume_exactly(tmp_path, runs):
    straight = runs.launch(tmp_path / "straight", 2, "selfplay")
    first = runs.launch(tmp_path / "first", 1, "selfplay")
    straight_ranks, first_ranks = runs.finish(straight), runs.finish(first)
    resumed = runs.launch(tmp_path / "first", 2, "auto", "selfplay")
    resumed_ranks = runs.finish(resumed)

    for out in (tmp_path / "straight", tmp_path / "first"):  # no rank makes a run folder of its own
        assert sorted(path.name for path in (out / "runs" / "smoke").iterdir()) == ["version_0"], out
    check_run(tmp_path / "straight", straight_ranks, 2)
    check_selfplay(tmp_path / "straight", straight_ranks, 2)
    check_run(tmp_path / "first", resumed_ranks, 2)

    # resumed = straight: the same puzzles, passes, phases, replay buffer and adapters (the first had fewer)
    for first_rank, straight_rank in zip(first_ranks, straight_ranks):
        assert first_rank["verified"] == straight_rank["verified"][:1] and first_rank["phases"] == 1
        assert first_rank["replay"] == straight_rank["replay"][: len(first_rank["replay"])]
    assert read_puzzles(tmp_path / "first") == read_puzzles(tmp_path / "straight")
    assert [without_seconds(r) for r in read_records(tmp_path / "first", "solver.jsonl")] == [
        without_seconds(r) for r in read_records(tmp_path / "straight", "solver.jsonl")
    ]
    for first_rank, resumed_rank, straight_rank in zip(first_ranks, resumed_ranks, straight_ranks):
        assert first_rank["verified"] + resumed_rank["verified"] == straight_rank["verified"]
        assert resumed_rank["replay"] == straight_rank["replay"] and resumed_rank["phases"] == 2
        assert resumed_rank["adapters"].keys() == straight_rank["adapters"].keys()
        for name, value in straight_rank["adapters"].items():
            assert torch.equal(resumed_rank["adapters"][name], value), name


# ---------------------------------------------------------------- several nodes


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch_nodes(runs: Runs, out: Path, iterations: int, *words: str) -> list[subprocess.Popen]:
    """Two torchrun "nodes" on this host (loopback, gloo), one rank each, as `ddp_script.py ... nodes`."""
    out.mkdir(parents=True, exist_ok=True)
    env = runs.environment(OMP_NUM_THREADS="1")
    port, nodes = free_port(), []
    for node in (0, 1):
        with (out / f"node{node}.txt").open("w") as log:
            nodes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}"]
                    + ["--nproc-per-node=1", "--master-addr=127.0.0.1", f"--master-port={port}"]
                    + [str(SCRIPT), str(out), str(iterations), "nodes", *words],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    runs.processes += nodes
    return nodes


def finish_nodes(out: Path, nodes: list[subprocess.Popen]) -> list[dict]:
    for node, process in enumerate(nodes):
        code = process.wait(timeout=TIMEOUT)
        log = (out / f"node{node}.txt").read_text(errors="replace")
        assert code == 0, f"node {node} ended with {code}; the end of its log:\n{log[-6000:]}"
    return [torch.load(out / f"rank{rank}.pt", map_location="cpu", weights_only=False) for rank in (0, 1)]


def test_two_nodes_of_one_process_train_as_one_node_of_two_and_a_lost_node_stops_the_run(tmp_path, runs, monkeypatch):
    """torchrun's 2 nodes × 1 process against Lightning's 1 node × 2 processes: the same puzzles, rewards and
    weights (both with one thread a process, as torchrun sets: other thread counts round differently). Then a node
    killed after its first checkpoint: the other stops with an error within the collective timeout, and the run
    resumes from that checkpoint for two more iterations."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one = runs.launch(tmp_path / "one", 2)
    nodes = launch_nodes(runs, tmp_path / "nodes", 2)
    one_ranks, node_ranks = runs.finish(one), finish_nodes(tmp_path / "nodes", nodes)
    check_run(tmp_path / "nodes", node_ranks, 2)
    by_nodes, by_one = read_puzzles(tmp_path / "nodes"), read_puzzles(tmp_path / "one")
    exact = ("iteration", "index", "puzzle", "valid", "D", "R_d")
    assert [[p[key] for key in exact] for p in by_nodes] == [[p[key] for key in exact] for p in by_one]
    for key in ("R_n", "R"):  # (float32 distances, rounded apart in the last digits by the two launchers)
        assert [p[key] for p in by_nodes] == pytest.approx([p[key] for p in by_one], rel=1e-6)
    for node_rank, one_rank in zip(node_ranks, one_ranks):
        assert node_rank["archive"]["texts"] == one_rank["archive"]["texts"]
        assert node_rank["global_step"] == one_rank["global_step"]
        for name, value in one_rank["state_dict"].items():
            torch.testing.assert_close(node_rank["state_dict"][name], value, rtol=1e-3, atol=1e-4)

    lost = tmp_path / "lost"
    agents = launch_nodes(runs, lost, 30)
    checkpoint = lost / "runs" / "smoke" / "version_0" / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + TIMEOUT
    while not checkpoint.is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(agents[1].pid, signal.SIGKILL)  # node 1 goes: its torchrun agent, and its rank in a session of its own
    for pid in ranks_of(lost, rank=1):
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    code = agents[0].wait(timeout=NODES_TIMEOUT + 60)
    log = (lost / "node0.txt").read_text(errors="replace")
    assert code != 0 and time.monotonic() - killed < NODES_TIMEOUT + 60, log[-4000:]
    assert re.search(r"RankLost: rank 0 of 2 lost another rank \(.+\): the run stops; .* --resume \S+version_0", log)
    stopped_at = completed_iterations(checkpoint)
    assert 1 <= stopped_at < 30
    resumed_to = stopped_at + 2  # (not the 30: the resume is what is tested, not its length)
    check_run(lost, finish_nodes(lost, launch_nodes(runs, lost, resumed_to, "auto")), resumed_to)


def ranks_of(out: Path, rank: int) -> list[int]:
    """The pids of the `ddp_script.py` processes of run `out` that torchrun started as global rank `rank`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(out) in (entry / "cmdline").read_bytes().decode(errors="replace"):
                if f"RANK={rank}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:  # gone meanwhile
            continue
    return found
