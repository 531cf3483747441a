"""The standard errors the experiment reports share: of a mean, of a mean whose units come in clusters, and of a
training run's effect, whose unit is the run (a seed), not the puzzle."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def mean_and_se(values: list[float]) -> tuple[float, float]:
    """The mean and its standard error (sample standard deviation / √n; 0 for a single value)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    variance = sum((value - mean) ** 2 for value in values) / (len(values) - 1)
    return mean, math.sqrt(variance / len(values))


def clustered_mean_and_se(values: list[float], clusters: list[str]) -> tuple[float, float]:
    """The mean of `values` and its cluster-robust standard error, `clusters[i]` the cluster of value i (a P3 class,
    a corpus family): units of one cluster are alike, so the error counts clusters, not units. The sandwich
    estimator with the small-sample factor C/(C - 1): sqrt(C/(C-1) · Σ_c (Σ_{i∈c} (x_i - mean))²) / n; 0 with one
    cluster."""
    n, mean = len(values), sum(values) / len(values)
    residuals: dict[str, float] = {}
    for value, cluster in zip(values, clusters, strict=True):
        residuals[cluster] = residuals.get(cluster, 0.0) + value - mean
    count = len(residuals)
    if count < 2:
        return mean, 0.0
    return mean, math.sqrt(count / (count - 1) * sum(total**2 for total in residuals.values())) / n


@dataclass(frozen=True)
class RunEffect:
    """A reward's effect over runs (seeds): its mean, the between-run standard error, Student's t with `runs` - 1
    degrees of freedom and its two-sided p-value (None with one run: no between-run uncertainty)."""

    effects: list[float]
    mean: float
    se: float | None
    t: float | None
    p: float | None

    @property
    def runs(self) -> int:
        return len(self.effects)

    @property
    def half_interval(self) -> float | None:
        """Half the width of the mean's 95% interval, Student's t with `runs` - 1 degrees of freedom (None: one run)."""
        if self.se is None:
            return None
        from scipy.stats import t as student

        return float(student.ppf(0.975, self.runs - 1) * self.se)

    @property
    def prediction_half_interval(self) -> float | None:
        """Half the width of the 95% interval for the effect of one more run like these, around their mean: Student's
        t with `runs` - 1 degrees of freedom times sd·√(1 + 1/runs), which is se·√(runs + 1) (None: one run). What a
        single run made elsewhere (another kind of host) is set against."""
        if self.se is None:
            return None
        return self.half_interval * math.sqrt(self.runs + 1)


def between_runs(effects: list[float]) -> RunEffect:
    """`effects`, one per run (each run's effect against its own baseline, same seed), summarised over the runs."""
    mean, se = mean_and_se(effects)
    if len(effects) < 2:
        return RunEffect(list(effects), mean, None, None, None)
    if se == 0:
        return RunEffect(list(effects), mean, 0.0, None, None)
    from scipy.stats import t as student

    statistic = mean / se
    return RunEffect(list(effects), mean, se, statistic, float(2 * student.sf(abs(statistic), len(effects) - 1)))


def trailing_mean(values: list[float], window: int) -> np.ndarray:
    """out[i] = mean(values[max(0, i - window + 1) : i + 1]): the first points average what exists so far."""
    sums = np.cumsum(np.asarray(values, dtype=float))
    counts = np.minimum(np.arange(1, len(sums) + 1), window)
    before = np.concatenate([[0.0], sums])[np.arange(len(sums)) + 1 - counts]
    return (sums - before) / counts


def fraction_difference(a: list[bool], b: list[bool]) -> tuple[float, float, float]:
    """The fractions of True in `a` and `b` and the difference's binomial standard error (0 when both are 0 or 1)."""
    p, q = sum(a) / len(a), sum(b) / len(b)
    return p, q, math.sqrt(p * (1 - p) / len(a) + q * (1 - q) / len(b))


def mean_difference(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """The means of `a` and `b` and the standard error of their difference, each mean's from its sample variance
    (puzzles counted as independent)."""
    return float(np.mean(a)), float(np.mean(b)), math.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b))


def slope_and_se(x: list[float], y: list[float]) -> tuple[float, float] | None:
    """The least-squares slope of y on x and its standard error (None with fewer than 3 points)."""
    if len(x) < 3:
        return None
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    dx = xs - xs.mean()
    slope = float(dx @ (ys - ys.mean()) / (dx @ dx))
    residuals = ys - ys.mean() - slope * dx
    return slope, math.sqrt(float(residuals @ residuals) / (len(xs) - 2) / float(dx @ dx))


def paired_mean_and_se(differences: list[float]) -> tuple[float, float] | None:
    """The mean of paired differences and its standard error (None with fewer than 2)."""
    return mean_and_se(differences) if len(differences) > 1 else None


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm's step-down correction of one family's p-values, in their order: the i-th smallest of m times
    (m − i + 1), made non-decreasing in that order, at most 1. A test that could not be made (None) still counts
    in m, as p = 1, and stays None."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: 1.0 if p_values[i] is None else p_values[i])
    corrected: list[float | None] = [None] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * (1.0 if p_values[i] is None else p_values[i])))
        corrected[i] = None if p_values[i] is None else running
    return corrected
