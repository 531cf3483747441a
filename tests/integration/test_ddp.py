"""DDP with 2 CPU processes on the tiny stream model, end to end. Lightning's `ddp` strategy
re-executes the command line as rank 1, so each run is `ddp_script.py` in a subprocess.

Three runs: two iterations ("first"), the same continued to three from its checkpoint, and three
straight through (beside the first, to save time). Each must finish without a hang and leave no
process behind; both ranks must end with the same archive, steps and weights, and puzzles.jsonl
(rank 0) must hold every rank's puzzles. The resumed run must continue exactly like the straight one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from codeplay_lightning.experiments.sweep import completed_iterations

SCRIPT = Path(__file__).with_name("ddp_script.py")
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
    """Launches `ddp_script.py` runs; kills whatever is still running when the test ends."""

    def __init__(self):
        self.processes: list[subprocess.Popen] = []

    def launch(self, out: Path, iterations: int, *resume: str) -> tuple[subprocess.Popen, Path]:
        out.mkdir(parents=True, exist_ok=True)
        env = {key: value for key, value in os.environ.items() if key not in LAUNCHER_ENV}
        with (out / "log.txt").open("w") as log:
            process = subprocess.Popen(
                [sys.executable, str(SCRIPT), str(out), str(iterations), *resume],
                env=env,
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
def runs():
    runs = Runs()
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


def read_puzzles(out: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir(out) / "puzzles.jsonl").read_text().splitlines()]


def check_run(out: Path, ranks: list[dict], iterations: int) -> None:
    """Both ranks agree, and rank 0's files hold both ranks' puzzles."""
    zero, one = ranks
    assert zero["world_size"] == one["world_size"] == 2
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
    assert checkpoint["ArchiveDataModule"]["archive"]["texts"] == texts
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
