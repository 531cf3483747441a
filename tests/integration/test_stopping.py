"""Stopping and resuming as a job scheduler expects: SIGTERM stops `codeplay train` at once with status 143, the
last finished iteration's checkpoint standing and the resume command printed; a resume of a finished run says so
and trains nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from training_runs import finished_iterations, read_puzzles, run

SCRIPT = Path(__file__).with_name("sigterm_script.py")


def test_sigterm_stops_at_once_with_143_and_the_resume_command(tmp_path):
    ready = tmp_path / "ready"
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(tmp_path / "runs"), str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ready.exists(), process.communicate(timeout=60)
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert time.monotonic() - started < 30  # at once, not after the 120 s iteration
    assert process.returncode == 143, stderr
    last = stderr.strip().splitlines()[-1]
    run_dir = tmp_path / "runs" / "smoke" / "version_0"
    assert last.startswith("stopped by SIGTERM: the last finished iteration's checkpoint stands; resume with: ")
    assert last.endswith(f"--resume {run_dir}")  # this run's folder, whatever run is newest later
    assert finished_iterations(run_dir) == 1
    assert {puzzle["iteration"] for puzzle in read_puzzles(run_dir)} == {0}


def test_resuming_a_finished_run_trains_nothing_and_says_so(tmp_path, stream_model, char_tokenizer, caplog):
    run_dir = run(tmp_path, stream_model, char_tokenizer, "trainer.iterations=1")
    before = (run_dir / "checkpoints" / "last.ckpt").stat().st_mtime_ns
    with caplog.at_level("INFO", logger="codeplay_lightning"):
        again = run(tmp_path, stream_model, char_tokenizer, "trainer.iterations=1", resume="auto")
    assert again == run_dir and (run_dir / "checkpoints" / "last.ckpt").stat().st_mtime_ns == before
    assert "finished its 1 iterations: nothing to train (resume with trainer.iterations=N, N > 1" in caplog.text
    assert not (run_dir / "config.resumed-1.yaml").exists()
