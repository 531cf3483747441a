"""The sandboxes the containment suites share, module by module, and a fake warden for the tests of what
the supervisor trusts."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sandbox_support import FAKE_WARDEN_START, FAST

import codeplay_lightning.execution.sandbox as sandbox_module
from codeplay_lightning.execution import Sandbox


@pytest.fixture(scope="module")
def mixed():
    """Two workers: hostile programs share the pool with ordinary ones."""
    with Sandbox(workers=2, timeout=2.0) as box:
        yield box


@pytest.fixture(scope="module")
def solo():
    """One worker: whatever follows a hostile program runs on its worker (or its replacement).
    Smaller memory limit: memory exhaustion is reached sooner."""
    with Sandbox(workers=1, timeout=2.0, memory_mb=256) as box:
        yield box


@pytest.fixture(scope="module")
def fast():
    """For programs expected to time out."""
    with Sandbox(workers=2, timeout=FAST) as box:
        yield box


@pytest.fixture(scope="module")
def namespaced(mixed):
    """The module's `mixed` sandbox, for tests of full isolation: skipped where it is not available (without root)."""
    if not mixed.isolation.startswith("namespaces"):
        pytest.skip(f"needs full isolation (root); here: {mixed.isolation}")
    return mixed


@pytest.fixture
def fake_warden(monkeypatch, tmp_path) -> Callable[[str], None]:
    """`fake_warden(body)`: the sandboxes the test starts run a fake warden, which starts as the real one does
    (imports its framing, announces its pid) and then runs `body`, with `requests`, `replies`, `pack`,
    `read_frame`, `write_all` and `ANSWER_BYTES` at hand."""

    def install(body: str) -> None:
        script = tmp_path / "fake_warden.py"
        script.write_text(FAKE_WARDEN_START.format(execution=str(sandbox_module.EXECUTION)) + body)
        monkeypatch.setattr(sandbox_module, "WARDEN", (str(script),))

    return install
