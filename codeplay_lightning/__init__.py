"""codeplay_lightning: a PPO-trained puzzle Setter against a few-shot Solver, and GIF-MCTS code synthesis.

Layers, each importing only from the ones below it:

    cli, train, synthesize, compare, sweep, bench     the faces: commands and what they run
    setter/                                           the Setter's training loop (Lightning)
    solver/, search/, archive/, rewards/, ppo/         the parts: Solver, code search, novelty, maths
    llm/, models/                                     language models: loading, sampling, backends
    execution/, puzzles/, config                      the judge, the puzzles, the typed configuration

The results that flow between them, from the bottom up:

    Verdict          execution   one program judged: pass | fail | error | timeout | memory | syntax
    PuzzleCheck      puzzles     is a Setter's text a puzzle the judge can check, and if not, why
    Evaluation       search      a candidate program's score on a task, or its bug
    SearchResult     search      one search's best program, its score, calls spent, the call that solved
    SolverResult     solver      the Solver on one puzzle: passes and difficulty D
                                 (PuzzleResult for few-shot sampling, SearchPuzzleResult for a search)
    ScoredPuzzle     setter      one generated puzzle with D, R_d, R_n and R
    PPOBuffer        setter      one iteration's tokens with old log-probs, values, advantages, returns
"""
