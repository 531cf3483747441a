"""The run's console without a training run: the live line in a terminal, a heartbeat elsewhere, the iteration line."""

from __future__ import annotations

import io
import time

from codeplay_lightning.setter import progress as progress_module
from codeplay_lightning.setter.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_written_to_a_file_a_run_names_its_phase_at_least_once_a_minute(monkeypatch, caplog):
    monkeypatch.setattr(progress_module, "HEARTBEAT_SECONDS", 0.3)
    console = Progress(iterations=5, stream=io.StringIO())
    with caplog.at_level("INFO", logger="codeplay_lightning"):
        console.phase(1, "the Solver attempts 40 puzzles, the sandbox judges")
        deadline = time.monotonic() + 10
        while "min into the run" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.1)
        console.summary()
        console.heartbeat.join(timeout=5)
    assert "iteration 2/5: the Solver attempts 40 puzzles, the sandbox judges (0.0 min into the run)" in caplog.text
    assert not console.heartbeat.is_alive()  # the summary ends it
    assert console.stream.getvalue() == ""  # no terminal control codes in a file


def test_in_a_terminal_the_phase_is_one_live_line_and_no_heartbeat():
    console = Progress(iterations=3, stream=Terminal())
    console.phase(0, "the Setter samples 29 streams of 128 tokens")
    assert console.stream.getvalue() == "\r\x1b[Kiteration 1/3: the Setter samples 29 streams of 128 tokens"
    assert console.heartbeat is None


def test_a_rank_that_does_not_show_says_nothing(caplog):
    console = Progress(iterations=3, stream=io.StringIO())
    console.shows = False
    console.phase(0, "the Setter samples")
    console.iteration({"iteration": 0, "seconds": 1.0, "peak_rss_gib": 1.0})
    assert console.heartbeat is None and caplog.text == ""
