"""`StreamingCheckpointIO`: checkpoints written straight to disk (no serialized copy in memory), atomically."""

from __future__ import annotations

import signal

import pytest
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from codeplay_lightning.allocator import peak_rss_gib, reset_peak_rss
from codeplay_lightning.setter.checkpoint import StreamingCheckpointIO


def saving_adds_gib(writer, checkpoint: dict, path) -> float:
    """The peak resident memory that saving `checkpoint` adds to this process."""
    assert reset_peak_rss()  # Linux
    before = peak_rss_gib()
    writer.save_checkpoint(checkpoint, path)
    return peak_rss_gib() - before


def test_a_checkpoint_goes_to_disk_without_a_copy_in_memory(tmp_path):
    checkpoint = {"weights": torch.ones(50 << 20)}  # 200 MB
    streaming = saving_adds_gib(StreamingCheckpointIO(), checkpoint, tmp_path / "streaming.ckpt")
    in_memory = saving_adds_gib(TorchCheckpointIO(), checkpoint, tmp_path / "lightning.ckpt")
    assert in_memory > 0.17  # Lightning's writer: the whole checkpoint serialized in memory first
    assert streaming < 0.05
    assert torch.equal(torch.load(tmp_path / "streaming.ckpt")["weights"], checkpoint["weights"])


def test_a_failed_save_keeps_the_old_checkpoint_whole(tmp_path):
    writer, path = StreamingCheckpointIO(), tmp_path / "checkpoints" / "last.ckpt"
    writer.save_checkpoint({"step": 1}, path)
    with pytest.raises(Exception):  # noqa: B017 - whatever pickling raises for a lambda
        writer.save_checkpoint({"step": 2, "unpicklable": lambda: None}, path)
    assert writer.load_checkpoint(path)["step"] == 1
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]  # no partial file left behind


def test_a_sigterm_while_a_checkpoint_is_written_stops_the_run_once_it_is_whole(tmp_path, monkeypatch):
    """A preemption just after an iteration's line: the signal lands mid-write, the run's handler meets it after."""

    class Stopped(BaseException):
        pass

    def stop(number, frame):
        raise Stopped

    save = torch.save

    def save_signalled_midway(obj, handle):
        signal.raise_signal(signal.SIGTERM)  # delivered now, in the middle of the write
        save(obj, handle)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        monkeypatch.setattr(torch, "save", save_signalled_midway)
        writer, path = StreamingCheckpointIO(), tmp_path / "last.ckpt"
        with pytest.raises(Stopped):
            writer.save_checkpoint({"step": 3, "weights": torch.arange(10)}, path)
        assert signal.getsignal(signal.SIGTERM) is stop  # the run's own handler, back in place
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert writer.load_checkpoint(path)["step"] == 3 and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
