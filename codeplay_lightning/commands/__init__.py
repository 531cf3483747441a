"""The `codeplay` commands, one module each: `HELP` (its line in `codeplay --help`), `add_arguments(parser)`
and `run(args) -> int`. A module imports torch, transformers and Lightning only inside `run`, so building the
parser stays fast. `args.py` holds the options several commands share, each with one default.
"""
