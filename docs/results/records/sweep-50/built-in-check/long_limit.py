"""Judges once more, under a 10 s limit, each captured attempt that timed out under the 1 s limit: does it finish?
(run with PYTHONPATH at the runs' commit, 1682ec0)"""

import json
import sys

from codeplay_lightning.execution import Program, Sandbox

path = sys.argv[1]
attempts = json.load(open(path))
with Sandbox(workers=2, timeout=10.0, require_isolation=True) as sandbox:
    for attempt in attempts:
        if any(status == "timeout" for status, _, _ in attempt["r5"] + attempt["r4"]):
            verdict = sandbox.verify([Program(**attempt["program"])])[0]
            attempt["r5_limit_10s"] = [verdict.status, round(verdict.seconds, 4), verdict.detail[:300]]
json.dump(attempts, open(path, "w"), indent=1)
