"""A local OpenAI-compatible llama.cpp server (the `server` extra: llama-cpp-python) for tests and
benchmarks of `OpenAILLM`."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from codeplay_lightning.models.loading import EMBEDDED_GGUF, embedded_gguf_dir

CONTEXT_TOKENS = 2048  # room for a Solver prompt (~830 tokens) and its completion
STARTUP_SECONDS = 120.0
LOG_TAIL_CHARS = 3000  # of the server's output, shown when it does not come up


def embedded_gguf() -> Path:
    """The GGUF file of the embedded SmolLM2-135M."""
    return embedded_gguf_dir() / EMBEDDED_GGUF


@contextmanager
def llama_server(gguf: Path, *, threads: int) -> Iterator[str]:
    """Serve `gguf` on a free local port while the block runs; yields the base URL (`http://.../v1`)."""
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(CONTEXT_TOKENS),
        "--n_threads",
        str(threads),
    ]
    base_url = f"http://127.0.0.1:{port}/v1"
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: a full pipe would block the server
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_until_serving(server, base_url, log)
            yield base_url
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_serving(server: subprocess.Popen, base_url: str, log: IO[bytes]) -> None:
    """Poll `/models` until it answers; raise with the tail of the server's output if it exits or times out."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited with code {server.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    raise RuntimeError(f"llama.cpp server at {base_url} did not answer within {STARTUP_SECONDS:.0f} s:\n{_tail(log)}")


def _tail(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-LOG_TAIL_CHARS:]
