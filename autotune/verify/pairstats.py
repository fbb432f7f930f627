"""Statistics of paired runs: the gain of one configuration over another, with its 95 % CI.

Each pair is one baseline run and one candidate run launched back to back, so
slow drifts of the machine hit both sides alike. A gain is a ratio, and ratios
are averaged on the log scale: the interval is a Student t-interval on the
pairs' log-ratios, turned back into a ratio (a geometric mean and its CI). With
one pair there is no spread to estimate, so there is no interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from autotune._remeasurements import Ratio, Validation

# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)
_Z975 = 1.959964


def t975(df: int) -> float:
    """Student's t quantile for a two-sided 95 % interval (no scipy in the engine's venv)."""
    if df < 1:
        raise ValueError("a t-interval needs at least 2 pairs")
    if df <= len(_T975):
        return _T975[df - 1]
    z, v = _Z975, float(df)  # Cornish-Fisher expansion: within 1e-4 beyond 30 df
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3))


@dataclass(frozen=True)
class Interval:
    """A mean on the log scale with its 95 % bounds (None with fewer than 2 pairs)."""

    mean: float
    low: float | None
    high: float | None
    n: int


def log_interval(logs: Sequence[float]) -> Interval:
    """Mean of paired log-ratios (or scores) with a t-interval."""
    if not logs:
        raise ValueError("no pairs")
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return Interval(mean, None, None, len(logs))
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return Interval(mean, mean - half, mean + half, len(logs))


def log_ratios(candidate: Sequence[float | None], baseline: Sequence[float | None]
               ) -> list[float] | None:
    """ln(candidate / baseline) per pair; None when any pair lacks a positive value."""
    out = []
    for c, b in zip(candidate, baseline, strict=True):
        if c is None or b is None or c <= 0 or b <= 0:
            return None
        out.append(math.log(c / b))
    return out


def _exp(x: float | None) -> float | None:
    return None if x is None else math.exp(x)


def ratio(logs: Sequence[float], better: str) -> Ratio:
    """candidate/baseline as a geometric mean of the pairs, its CI, and which way is better."""
    iv = log_interval(logs)
    return Ratio(ratio=math.exp(iv.mean), ci_low=_exp(iv.low), ci_high=_exp(iv.high),
                 better=better)


def gain(logs: Sequence[float]) -> Validation:
    """A validation's headline: the relative gain (+0.12 = 12 % better) from log-scale
    values where up is better, with its 95 % bounds (None with one pair)."""
    iv = log_interval(logs)
    return Validation(gain=math.expm1(iv.mean),
                      ci_low=None if iv.low is None else math.expm1(iv.low),
                      ci_high=None if iv.high is None else math.expm1(iv.high))
