"""codeplay_lightning: a PPO-trained puzzle Setter against a few-shot Solver, GIF-MCTS code synthesis and
Code World Models.

Layers, each importing only from the ones below it:

    cli                                      `codeplay`: the table of commands
    commands/                                one module per subcommand: its options, then a call into the layers below
    train, experiments/, integrations/       a training run; the presets' runs, compared, swept; our rewards for TRL
    setter/                                  the Setter's PPO training loop (Lightning)
    solver/, cwm/                            the Solver (few-shot or a code search); Code World Models
    sft/                                     supervised fine-tuning: the warm start, the search's action examples
    search/                                  code search with LLMs: GIF-MCTS, its baselines, their tasks, synthesis
    llm/, archive/                           LLM backends; the novelty archive and its embedder
    models/, corpus/                         causal LMs: loading, sampling, scoring; our generated puzzle corpus
    devices                                  what the machine runs: devices, precision, judges; the run's host
    config, puzzles/                         the typed configuration; puzzles, their files, validation and prompts
    execution/, ppo/, rewards/, allocator    the sandbox (the judge); PPO maths; reward functions; malloc tuning

`benchmarks/` sits beside the package in a clone, outside the wheel (`python -m benchmarks`, `make bench`).

The results that flow between them, from the bottom up:

    Verdict          execution   one program judged (pass | fail | error | timeout | memory | syntax),
                                 or one call's value (returned | error | timeout | memory | syntax)
    PuzzleCheck      puzzles     is a Setter's text a puzzle the judge can check, and if not, why
    Feedback         search      a candidate program's score on a task and its bug: what improve and fix show
    SearchResult     search      one search's best program, its score, calls spent, the call that solved
    ModelScore       cwm         a Code World Model's accuracies on an environment's transitions
    SolverResult     solver      the Solver on one puzzle: passes and difficulty D
                                 (PuzzleResult for few-shot sampling, SearchPuzzleResult for a search)
    ScoredPuzzle     setter      one generated puzzle with D, R_d, R_n and R
    PPOBuffer        setter      one iteration's tokens with old log-probs, values, advantages, returns
"""
