"""`codeplay train` (the command, as a user runs it) on the tiny stream model, for tests/integration/test_stopping.py:

    python sigterm_script.py RUN_ROOT READY_FILE [key=value ...]

trains `configs/smoke.yaml` (tiny overrides) for 3 iterations under RUN_ROOT; in its second iteration the Setter's
sampling writes READY_FILE and then waits, so that the test's SIGTERM lands mid-iteration. Exits with the command's
status."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: the tiny model and tokenizer

from support import CONFIGS, build_char_tokenizer, stream_llama  # noqa: E402

from codeplay_lightning import train as train_module  # noqa: E402
from codeplay_lightning.cli import main  # noqa: E402
from codeplay_lightning.setter import rollout_callback  # noqa: E402

WAIT_SECONDS = 120  # the test sends its signal within seconds of READY_FILE


def main_with_stand_ins(run_root: str, ready: Path, overrides: list[str]) -> int:
    tokenizer = build_char_tokenizer()
    train_module.load_causal_lm = lambda name: (stream_llama(tokenizer), tokenizer)
    sampled = rollout_callback.generate_episodes

    def waiting_in_the_second_iteration(*args):
        if ready.exists() or not Path(run_root, "smoke", "version_0", "checkpoints", "last.ckpt").is_file():
            return sampled(*args)
        ready.write_text("sampling iteration 1\n")
        time.sleep(WAIT_SECONDS)
        return sampled(*args)

    rollout_callback.generate_episodes = waiting_in_the_second_iteration
    return main(
        [
            "train",
            str(CONFIGS / "smoke.yaml"),
            f"trainer.run_root={run_root}",
            "name=smoke",  # the folder the test watches, not one named by these overrides
            "trainer.iterations=3",
            "trainer.precision=32-true",
            "model.name=tiny-stream",
            "rollout.n_envs=2",
            "rollout.n_steps=40",
            "solver.max_new_tokens=24",
            *overrides,
        ]
    )


if __name__ == "__main__":
    sys.exit(main_with_stand_ins(sys.argv[1], Path(sys.argv[2]), sys.argv[3:]))
