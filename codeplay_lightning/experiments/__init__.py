"""Published experiments over training runs: the six presets trained one after another, and their comparison
(the paper's figure 2 and appendix C)."""
