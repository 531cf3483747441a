"""How well a model sets puzzles: N puzzles sampled from the Setter prompt, then the share that is valid, solved
by the same model as Solver, distinct, and their mean novelty R_n (each puzzle against the ones sampled before it,
normalised like the training reward)."""

from __future__ import annotations

from collections.abc import Sequence


def setter_summary(texts: Sequence[str], valid: Sequence[bool], solved: Sequence[bool],
                   novelty: Sequence[float]) -> dict:
    """Shares of the N sampled puzzles that are valid, solved (of all N) and distinct (valid ones whose
    whitespace-normalised text is new), and their mean R_n. `solved` is per valid puzzle, in order."""
    if not texts or len(texts) != len(valid) or len(novelty) != len(texts) or len(solved) != sum(valid):
        raise ValueError("setter_summary needs one valid flag and one R_n per text, one solved flag per valid one")
    distinct = {" ".join(text.split()) for text, ok in zip(texts, valid, strict=True) if ok}
    n = len(texts)
    return {"puzzles": n, "valid": sum(valid) / n, "solved": sum(solved) / n,
            "solved_of_valid": sum(solved) / sum(valid) if any(valid) else 0.0,
            "distinct": len(distinct) / n, "mean_r_n": sum(novelty) / n}
