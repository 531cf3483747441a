"""train(): a sandbox that cannot isolate programs fully, local or on Ray, is refused in one line before any model
loads."""

import importlib.util
from pathlib import Path

import pytest

from codeplay_lightning import train as training
from codeplay_lightning.config import ConfigError, load_config
from codeplay_lightning.execution import IsolationError

SMOKE = Path(__file__).parents[2] / "configs" / "smoke.yaml"


class BasicSandbox:
    """Stands in for a sandbox on a machine without user namespaces: its first report refuses."""

    closed = False

    def __init__(self, **settings):
        self.settings = settings

    @property
    def isolation(self) -> str:
        raise IsolationError(
            "full isolation is required, and here a program runs as this user: it can read and write this user's "
            "files (basic (no namespaces))"
        )

    def close(self) -> None:
        BasicSandbox.closed = True


def test_training_refuses_a_basic_sandbox_before_any_model_loads(monkeypatch, tmp_path):
    def load(*_):
        raise AssertionError("a model was loaded before the sandbox was checked")

    monkeypatch.setattr(training, "Sandbox", BasicSandbox)
    monkeypatch.setattr(training, "load_causal_lm", load)
    monkeypatch.setattr(training, "load_embedder", load)
    config = load_config([SMOKE], [f"trainer.run_root={tmp_path}"])
    with pytest.raises(ConfigError) as refusal:
        training.train(config)
    message = str(refusal.value)
    assert "\n" not in message and message.endswith("; sandbox.allow_partial_isolation=true trains anyway")
    assert "basic (no namespaces)" in message and BasicSandbox.closed
    assert not list(tmp_path.iterdir())  # no run folder either


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the ray extra is not installed")
def test_training_with_the_ray_backend_builds_a_ray_sandbox_and_refuses_it_alike(monkeypatch, tmp_path):
    built = []
    monkeypatch.setattr(training, "Sandbox", lambda **_: pytest.fail("the local sandbox was built"))
    monkeypatch.setattr(training, "RaySandbox", lambda **settings: built.append(settings) or BasicSandbox(**settings))
    overrides = [
        "sandbox.backend=ray",
        "sandbox.workers=3",
        "sandbox.ray_address=local",
        f"trainer.run_root={tmp_path}",
    ]
    with pytest.raises(ConfigError, match="; sandbox.allow_partial_isolation=true trains anyway$"):
        training.train(load_config([SMOKE], overrides))
    assert built == [{"workers": 3, "timeout": 1.0, "require_isolation": True, "address": "local"}]
