"""`codeplay cwm build`: seeded transitions of the CWMB environments, and optionally the official buffers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from codeplay_lightning.commands.cwm.args import env_ids

HELP = "collect seeded transitions of the CWMB environments"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="directory for <env id>.npz and summary.json")
    parser.add_argument("--envs", help="comma-separated environment ids (default: all 18)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--official",
        metavar="DIR",
        help="also convert the official buffers: DIR/<env id>/train_buffer.pkl to DIR_OUT/official/",
    )


def run(args: argparse.Namespace) -> int:
    from codeplay_lightning.cwm.collect import build
    from codeplay_lightning.cwm.official import read_official_buffer

    out, ids = Path(args.out), env_ids(args.envs)
    official = {env_id: Path(args.official) / env_id / "train_buffer.pkl" for env_id in ids} if args.official else {}
    if official and not any(path.is_file() for path in official.values()):
        raise ValueError(f"{args.official} holds no <env id>/train_buffer.pkl")
    rows = build(out, ids, seed=args.seed)
    for env_id, pickle_path in official.items():
        if pickle_path.is_file():  # the official data lacks some environments (Humanoid's buffers are empty)
            (out / "official").mkdir(parents=True, exist_ok=True)
            read_official_buffer(pickle_path, env_id).save(out / "official" / f"{env_id}.npz")
        else:
            print(f"  no official buffer for {env_id} in {args.official}")
    (out / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    for row in rows:
        print(
            "  "
            + "  ".join(
                f"{key}={value:.2f}" if isinstance(value, float) else f"{key}={value}" for key, value in row.items()
            )
        )
    print(f"transitions written to {out}")
    return 0
