"""codeplay_lightning: a PPO-trained puzzle Setter against a few-shot Solver, and GIF-MCTS code synthesis."""
