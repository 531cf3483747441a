"""The Setter's reward (Codeplay §2): R = w_d·R_d + w_n·R_n, or the product R_d·R_n.

- Difficulty D(p) = N_a / (number of the Solver's N_a attempts that pass), ∞ when none passes.
  R_d (`reward.difficulty`), −1 for an invalid puzzle in all three:
  - `codeplay` (the paper): −1 also when unsolved, else the cosine ramp ½(1 − cos(π·min(D − 1, 2)/2)):
    0 for a trivial puzzle (D = 1), 1 from D = 3 on;
  - `learnability` (Absolute Zero, eq. 4): 1 − s of the pass rate s = 1/D, 0 when s is 0 or 1;
  - `uncertainty` (R-Zero): 1 − 2|s − ½|, 1 at s = ½ and 0 at s = 0 or 1.
- Novelty R_n = mean cosine distance from p to its (up to) 5 nearest puzzles in the archive of
  previously generated puzzles, divided by the mean pairwise distance of a reference puzzle set
  (P3 train in the paper), so that R_n is about 1 for a puzzle as far from the archive as two
  reference puzzles are from each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

NOVELTY_NEIGHBOURS = 5  # paper: R_n averages the distances to the 5 nearest archived puzzles
EMPTY_ARCHIVE_NOVELTY = 1.0  # R_n of a puzzle with nothing to compare to: see `novelty_reward`

Combine = Literal["sum", "product"]
DifficultyReward = Literal["codeplay", "learnability", "uncertainty"]  # `reward.difficulty`


def codeplay_difficulty(difficulty: float) -> float:
    """The paper's R_d of a valid puzzle: −1 when unsolved (D = ∞), else ½(1 − cos(π·min(D − 1, 2)/2)): 0 at D = 1
    (solved on every attempt), ½ at D = 2 and 1 from D = 3 on, with zero slope at both ends.

    >>> [round(codeplay_difficulty(d), 6) for d in (1.0, 1.5, 2.0, 3.0, 10.0, math.inf)]
    [0.0, 0.146447, 0.5, 1.0, 1.0, -1.0]
    """
    if pass_rate(difficulty) == 0:
        return -1.0
    return 0.5 * (1 - math.cos(math.pi * min(difficulty - 1, 2) / 2))


def learnability_difficulty(difficulty: float) -> float:
    """Absolute Zero's eq. 4: 1 − s at the pass rate s = 1/D (`pass_rate`), and 0 when s ∈ {0, 1}. Its code gives
    −0.5, not 0, to a valid puzzle that is trivial or unsolved; we follow the equation, so an unsolved puzzle costs
    nothing here (it may be impossible, or only too hard) while an invalid one costs 1.

    >>> [learnability_difficulty(d) for d in (1.0, 4.0, math.inf)]
    [0.0, 0.75, 0.0]
    """
    rate = pass_rate(difficulty)
    return 0.0 if rate in (0.0, 1.0) else 1 - rate


def uncertainty_difficulty(difficulty: float) -> float:
    """R-Zero's 1 − 2|s − ½|, with s the share of attempts the sandbox passed (R-Zero has no verifier and takes the
    majority answer's share): 1 at s = ½, 0 at s = 0 or 1.

    >>> [uncertainty_difficulty(d) for d in (1.0, 2.0, 4.0, math.inf)]
    [0.0, 1.0, 0.5, 0.0]
    """
    return 1 - 2 * abs(pass_rate(difficulty) - 0.5)


# `reward.difficulty`: R_d of a valid puzzle of difficulty D (N_a / passes, or a search's calls to its first
# solution; ∞ when unsolved). `DifficultyReward` lists the same names.
DIFFICULTY_REWARDS: dict[str, Callable[[float], float]] = {
    "codeplay": codeplay_difficulty,
    "learnability": learnability_difficulty,
    "uncertainty": uncertainty_difficulty,
}


def difficulty_reward(d: float, valid: bool, difficulty: DifficultyReward = "codeplay") -> float:
    """R_d of a puzzle of difficulty D = `d`: −1 for an invalid puzzle whatever the `difficulty` reward (`d` is then
    not read), else `DIFFICULTY_REWARDS[difficulty](d)`.

    >>> difficulty_reward(math.inf, valid=False, difficulty="learnability"), difficulty_reward(4.0, valid=True)
    (-1.0, 1.0)
    """
    return DIFFICULTY_REWARDS[difficulty](d) if valid else -1.0


def pass_rate(difficulty: float) -> float:
    """s = 1/D: the share of the Solver's attempts that pass (few-shot: passes / N_a; a search: one solution per
    D calls), 0 when unsolved (D = ∞).

    >>> pass_rate(4.0), pass_rate(math.inf)
    (0.25, 0.0)
    """
    if difficulty == math.inf:
        return 0.0
    if not difficulty >= 1:  # also rejects NaN
        raise ValueError(f"difficulty is N_a / passes, so ≥ 1 or inf; got {difficulty}")
    return 1 / difficulty


def novelty_reward(neighbour_distances: Sequence[float], reference_mean_distance: float) -> float:
    """R_n: the mean of `neighbour_distances` (cosine distances to the up to 5 nearest archived
    puzzles) divided by `reference_mean_distance` (mean pairwise distance of the reference set).

    Early in a run the archive holds k < 5 puzzles: the mean is over those k. With an empty archive
    (the first puzzle of a run) there is nothing to compare to and R_n is 1, the value of a puzzle
    as far from the archive as two unrelated reference puzzles are from each other: it neither
    rewards nor punishes that one puzzle. 0 would punish it for an archive it could not know, and
    the largest possible distance (2) over the reference mean would be an arbitrary spike.

    >>> novelty_reward([0.25, 0.5], reference_mean_distance=0.75)
    0.5
    >>> novelty_reward([], reference_mean_distance=0.6)
    1.0
    """
    if not reference_mean_distance > 0:
        raise ValueError(f"reference_mean_distance must be > 0, got {reference_mean_distance}")
    if len(neighbour_distances) == 0:
        return EMPTY_ARCHIVE_NOVELTY
    return sum(neighbour_distances) / len(neighbour_distances) / reference_mean_distance


def total_reward(r_d: float, r_n: float, w_d: float, w_n: float, combine: Combine) -> float:
    """R: `"sum"` is w_d·R_d + w_n·R_n (paper eq. 1); `"product"` is R_d·R_n, the paper's
    alternative, which has no weights: it takes w_d = w_n = 1 and rejects others.

    An invalid or unsolved puzzle keeps R_d = −1 in both: with the sum it costs w_d, with the
    product it gets −R_n ≤ 0, so no invalid puzzle ever scores above a trivial one (R_d = 0, R = 0
    with the product).

    >>> total_reward(0.5, 0.25, w_d=0.5, w_n=1.5, combine="sum")
    0.625
    >>> total_reward(-1.0, 0.75, w_d=1.0, w_n=1.0, combine="product")
    -0.75
    """
    if combine == "sum":
        return w_d * r_d + w_n * r_n
    if combine == "product":
        if (w_d, w_n) != (1, 1):
            raise ValueError(f"the product reward R_d·R_n has no weights: set w_d = w_n = 1, got {w_d}, {w_n}")
        return r_d * r_n
    raise ValueError(f"combine must be 'sum' or 'product', got {combine!r}")
