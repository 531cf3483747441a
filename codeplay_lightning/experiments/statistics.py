"""The one standard error the experiment reports share."""

from __future__ import annotations

import math


def mean_and_se(values: list[float]) -> tuple[float, float]:
    """The mean and its standard error (sample standard deviation / √n; 0 for a single value)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    variance = sum((value - mean) ** 2 for value in values) / (len(values) - 1)
    return mean, math.sqrt(variance / len(values))
