"""Judges the captured attempts `repeats` times with round 4's judge (run from a checkout of 8a06a55:
PYTHONPATH=. python judge_r4.py /tmp/rejudge/attempts-SEED-rows.json 3); adds each attempt's `r4` verdicts."""

import json
import sys

from codeplay_lightning.execution import Program, Sandbox

path, repeats = sys.argv[1], int(sys.argv[2])
attempts = json.load(open(path))
with Sandbox(workers=2, timeout=1.0, require_isolation=True) as sandbox:
    for a in attempts:
        program = Program(**a["program"])
        verdicts = (sandbox.verify([program])[0] for _ in range(repeats))
        a["r4"] = [[v.status, round(v.seconds, 4), v.detail[:300]] for v in verdicts]
json.dump(attempts, open(path, "w"), indent=1)
