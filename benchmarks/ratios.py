"""The statistics of a comparison: the median of per-round ratios and its spread.

Kept free of heavy imports: the measurement (``interleave.py``), the report and its tests
all use it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.95  # of the interval around a median
TOLERANCE = 0.10  # a spread within ±10% of the median is tight; wider is "noisy"
DECIDED = 2.0  # an interval wholly beyond 2x (or below 1/2x) settles which is faster


@dataclass(frozen=True)
class Ratio:
    """The median of per-round ratios, its 95% interval, quartiles and round count."""

    median: float
    low: float
    high: float
    q1: float
    q3: float
    rounds: int

    @property
    def spread(self) -> float:
        """The interval's larger relative distance from the median: 0.08 is ±8%."""
        if self.median <= 0 or self.low <= 0:
            return math.inf
        return max(self.median / self.low, self.high / self.median) - 1

    @property
    def noisy(self) -> bool:
        return self.spread > TOLERANCE

    @property
    def decided(self) -> bool:
        """Whether, noisy or not, the interval lies wholly beyond ``DECIDED`` either way."""
        return self.low >= DECIDED or self.high <= 1 / DECIDED

    def as_dict(self) -> dict[str, float | int]:
        return {
            "median": self.median,
            "low": self.low,
            "high": self.high,
            "q1": self.q1,
            "q3": self.q3,
            "rounds": self.rounds,
        }


def interval_ranks(n: int, level: float = LEVEL) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the order statistics that bound the median with at least
    `level` confidence, whatever the distribution (the sign test's interval): the
    number of values below the median is Binomial(n, 1/2). Below 6 values no pair reaches
    95%: the extremes then (93.75% at 5 values)."""
    alpha = (1 - level) / 2
    k, tail = 0, 0.5**n  # tail: P(fewer than k + 1 values below the median)
    while k + 1 < n - k - 1 and tail + math.comb(n, k + 1) * 0.5**n <= alpha:
        k += 1
        tail += math.comb(n, k) * 0.5**n
    return (k, n - 1 - k) if tail <= alpha else (0, n - 1)


def summarize(values: Sequence[float]) -> Ratio:
    """The median of `values` (per-round ratios), its interval and quartiles."""
    data = sorted(values)
    n = len(data)
    if n == 0:
        nan = math.nan
        return Ratio(nan, nan, nan, nan, nan, 0)
    lo, hi = interval_ranks(n)
    q1, _, q3 = statistics.quantiles(data, n=4, method="inclusive") if n > 1 else data * 3
    return Ratio(statistics.median(data), data[lo], data[hi], q1, q3, n)


def per_round(numerator: Sequence[float | None], denominator: Sequence[float | None]) -> Ratio:
    """Round-by-round ratios of two candidates' times, summarised over the rounds that
    timed both (None: a round without that candidate)."""
    pairs = zip(numerator, denominator, strict=True)
    return summarize([a / b for a, b in pairs if a is not None and b is not None and b > 0])


def median(values: Sequence[float | None]) -> float:
    """The median of the rounds that timed the candidate; NaN without any."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else math.nan


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan
