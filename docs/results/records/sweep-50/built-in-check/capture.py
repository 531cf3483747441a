"""plan-50's built-in check, attempt by attempt: re-creates the Solver's attempts at the puzzles of a `none` seed
whose D differs from its round-4 record (iterations 0-9) and judges each `repeats` times with the runs' judge.

The rollout generator is replayed draw for draw as the run made them (rank 0's seed, then per iteration the
Setter's stream seeds and one seed per Solver row, in the Solver's calls of ROWS_PER_CALL x batch_size rows); the
rows of each differing puzzle are then sampled from their own seeds, as the run's frozen bf16 Solver under bf16
autocast. `rows` samples those rows alone; `call` samples the run's whole call, whose batch the run's was.
Run from a checkout of the runs' commit (1682ec0): PYTHONPATH=. python capture.py SEED rows 3
Writes /tmp/rejudge/attempts-SEED-MODE.json; judge_r4.py and long_limit.py add to it.
"""

import copy
import gzip
import json
import sys
import time
from pathlib import Path

import torch

from codeplay_lightning.config import load_config
from codeplay_lightning.execution import Sandbox
from codeplay_lightning.llm.backends import MAX_BATCH_SLOTS
from codeplay_lightning.models.loading import load_causal_lm
from codeplay_lightning.models.sampling import sample
from codeplay_lightning.puzzles import check_puzzle, fewshot_puzzles, solver_prompt
from codeplay_lightning.solver.few_shot import ROWS_PER_CALL, candidate_program
from codeplay_lightning.solver.strategies import solver_sampling

seed, mode, repeats = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
R = Path("/work/main/docs/results/records")
run = R / f"sweep-50/seed-{seed}/none"


def load(path):
    return [json.loads(line) for line in gzip.open(path / "puzzles.jsonl.gz", "rt")]


new, old = load(run), {p["index"]: p for p in load(R / f"sweep/seed-{seed}/none")}
differing = {p["index"] for p in new if p["iteration"] <= 9 and old[p["index"]]["D"] != p["D"]}
last = max(p["iteration"] for p in new if p["index"] in differing)
config = load_config([run / "config.yaml"])
solver = config.solver
policy, tokenizer = load_causal_lm(config.model.name)
frozen = copy.deepcopy(policy).requires_grad_(False).eval().to(torch.bfloat16)
del policy
examples = fewshot_puzzles()[: config.rollout.fewshot]
generator = torch.Generator().manual_seed(config.trainer.seed)
generator.manual_seed(config.trainer.seed * 1000)  # RolloutCallback.setup, rank 0
out = []
with Sandbox(workers=2, timeout=config.sandbox.timeout, require_isolation=True) as sandbox:
    for iteration in range(last + 1):
        torch.randint(0, 2**62, (config.rollout.n_envs,), generator=generator)  # the Setter's streams
        puzzles = [p for p in new if p["iteration"] == iteration]
        valid = [(p, check_puzzle(p["puzzle"]).puzzle) for p in puzzles if p["valid"]]
        rows = [(record, puzzle) for record, puzzle in valid for _ in range(solver.attempts)]
        per_call = ROWS_PER_CALL * solver.batch_size
        calls = [rows[start : start + per_call] for start in range(0, len(rows), per_call)]
        for call in calls:
            seeds = torch.randint(0, 2**62, (len(call),), generator=generator).tolist()
            wanted = [i for i, (record, _) in enumerate(call) if record["index"] in differing]
            if not wanted:
                continue
            chosen = range(len(call)) if mode == "call" else wanted
            prompts = [solver_prompt(examples, call[i][1]) for i in chosen]
            started = time.time()
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=True):
                samples = sample(
                    frozen,
                    tokenizer,
                    prompts,
                    solver_sampling(solver),
                    [torch.Generator().manual_seed(seeds[i]) for i in chosen],
                    rows=solver.batch_size,
                    max_slots=MAX_BATCH_SLOTS,
                )
            texts = dict(zip(chosen, samples.texts))
            print(f"iteration {iteration}: {len(prompts)} rows sampled in {time.time() - started:.0f} s", flush=True)
            for i in wanted:
                record, puzzle = call[i]
                program = candidate_program(puzzle, texts[i])
                verdicts = [sandbox.verify([program])[0] for _ in range(repeats)]
                out.append(
                    {
                        "seed": seed,
                        "iteration": iteration,
                        "index": record["index"],
                        "attempt": i % solver.attempts,
                        "D_r5": record["D"],
                        "D_r4": old[record["index"]]["D"],
                        "program": {"f": program.f, "g": program.g, "ans_type": program.ans_type, "name": program.name},
                        "r5": [[v.status, round(v.seconds, 4), v.detail[:300]] for v in verdicts],
                    }
                )
json.dump(out, open(f"/tmp/rejudge/attempts-{seed}-{mode}.json", "w"), indent=1)
by = {}
for a in out:
    by.setdefault(a["index"], []).append(a)
for index, attempts in by.items():
    passes = sum(a["r5"][0][0] == "pass" for a in attempts)
    d = 4 / passes if passes else None
    print(
        index,
        "D_r5",
        attempts[0]["D_r5"],
        "replayed",
        d,
        "| D_r4",
        attempts[0]["D_r4"],
        [a["r5"][0][0] for a in attempts],
    )
