"""The published metrics: allocation at an arrived level, and mean/sd over seeds."""

from __future__ import annotations

import math
import statistics
from typing import Sequence


def level_of(arrived: int, capacity: int) -> int:
    """round(100 x arrived / capacity), halves away from zero (the Go simulator's math.Round)."""
    return math.floor(100 * arrived / capacity + 0.5)


def level_means(arrived: Sequence[int], values: Sequence[float], capacity: int) -> dict[int, float]:
    """Level X -> mean of 100 x value / capacity over the events at arrived level X."""
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for a, v in zip(arrived, values):
        x = level_of(a, capacity)
        sums[x] = sums.get(x, 0.0) + 100 * v / capacity
        counts[x] = counts.get(x, 0) + 1
    return {x: sums[x] / counts[x] for x in sums}


def unallocated(arrived: Sequence[int], allocated: Sequence[int], capacity: int) -> dict[int, float]:
    """Level X -> Unallocated GPU % (100 - allocated % of capacity) at X % arrived.

    A level no event lands on (a small trace jumps over it) takes the last event below it, so the
    curve is a step function up to the last arrived level."""
    means = level_means(arrived, allocated, capacity)
    last = 0.0
    for x in range(0, max(means, default=-1) + 1):
        last = means.setdefault(x, last)
    return {x: 100 - v for x, v in means.items()}


def mean_sd(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (0 for one value); NaN-free."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return {"mean": float("nan"), "sd": float("nan"), "n": 0}
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "sd": sd, "n": len(values)}
