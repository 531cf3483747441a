"""What the `codeplay cwm` actions read (environment ids, transitions, model files) and the sandbox they run
models in, sized for CPUs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codeplay_lightning.cwm.transitions import Transitions
    from codeplay_lightning.execution import Sandbox

CWM_WORKERS = 2  # sandbox wardens: a model's transitions are scored two at a time
CWM_TIMEOUT = 60.0  # seconds per sandbox call: one transition scored, or one plan
CWM_MEMORY_MB = 2048


def sandbox() -> Sandbox:
    from codeplay_lightning.execution import Sandbox

    return Sandbox(workers=CWM_WORKERS, timeout=CWM_TIMEOUT, memory_mb=CWM_MEMORY_MB, modules=("numpy",))


def env_ids(text: str | None) -> list[str]:
    """The comma-separated ids of `text`, every one a CWMB environment; all 18 without `text`."""
    from codeplay_lightning.cwm.envs import ENVS

    ids = [item.strip() for item in text.split(",") if item.strip()] if text else list(ENVS)
    unknown = [env_id for env_id in ids if env_id not in ENVS]
    if unknown:
        raise ValueError(f"unknown environment {unknown[0]!r}; CWMB has {', '.join(ENVS)}")
    return ids


def transitions(directory: str, env_id: str) -> Transitions:
    from codeplay_lightning.cwm.transitions import Transitions

    (env_id,) = env_ids(env_id)
    path = Path(directory) / f"{env_id}.npz"
    if not path.is_file():
        raise ValueError(f"{path} does not exist: run `codeplay cwm build --out {directory}` first")
    return Transitions.load(path)


def program(path: str) -> str:
    text = Path(path).read_text()
    if "class Environment" not in text:
        raise ValueError(f"{path} defines no class Environment")
    return text
