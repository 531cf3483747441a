"""`python -m benchmarks.gpu.prepare .gpu`: the files of `prepare.sh` that come from this installation: SmolLM2's
tokenizer (from the embedded model) and CartPole's transitions for `cwm synthesize` (gymnasium collects them)."""

from __future__ import annotations

import sys
from pathlib import Path

from transformers import AutoTokenizer

from codeplay_lightning.cli import main as codeplay
from codeplay_lightning.models.loading import embedded_model_dir

CWM_ENV = "CartPole-v1"


def prepare(directory: Path) -> None:
    tokenizer = directory / "tokenizer"
    if not (tokenizer / "tokenizer.json").is_file():
        AutoTokenizer.from_pretrained(embedded_model_dir()).save_pretrained(tokenizer)
    if not (directory / "cwm" / f"{CWM_ENV}.npz").is_file():
        if codeplay(["cwm", "build", "--out", str(directory / "cwm"), "--envs", CWM_ENV, "--seed", "0"]) != 0:
            raise SystemExit("cwm build failed")


if __name__ == "__main__":
    prepare(Path(sys.argv[1]))
