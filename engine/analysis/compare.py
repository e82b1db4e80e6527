"""The one builder of comparison rows: a ratio of means, its interval and Welch's test.

Phoenix has one definition of tokens/s, used by every figure that compares modes (``TOKENS_PER_S``):
a request's tokens/s is its output tokens over its wall time, prefill included (the bandit's reward), and a
mode's tokens/s is the mean over its requests. Two figures are built from it:

- ``compare``: mean against mean, as Compare, the baseline table and the Policies page show it beside the
  speedup. The ratio's interval is computed on the log scale (the delta method on log(mean) - log(mean_base),
  with Welch-Satterthwaite degrees of freedom), so it is never below 0 for a ratio of positive numbers; the
  verdict is Welch's test of the difference.
- The speedup (the paired per-prompt median against a run's reference mode) is ``engine.analysis.speedup``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.analysis.stats import welch

TOKENS_PER_S = (
    "tokens/s: a request's output tokens over its wall time (prefill included); a mode's tokens/s is "
    "the mean over its requests"
)
TOO_FEW = "n < 2: no test"  # short as "not significant": a longer verdict was cut at 1280 px


@dataclass
class Comparison:
    n_base: int
    n: int
    mean_base: float | None
    mean: float | None
    ratio: float | None  # mean / mean_base
    ratio_low: float | None  # the ratio's (1 - alpha) interval, on the log scale (never below 0)
    ratio_high: float | None
    difference: float | None
    p_value: float | None
    verdict: str  # 'significant', 'not significant' or TOO_FEW


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def compare(base: list[float], values: list[float], alpha: float = 0.05) -> Comparison:
    """``values`` against ``base``: the ratio of means with its interval, and Welch's test of the difference."""
    base = [float(v) for v in base if v == v]
    values = [float(v) for v in values if v == v]
    mb, m = _mean(base), _mean(values)
    ratio = m / mb if (m is not None and mb) else None
    w = welch(base, values, alpha)
    if w is None:
        return Comparison(len(base), len(values), mb, m, ratio, None, None, None, None, TOO_FEW)
    low, high = log_ratio_interval(base, values, alpha) or (None, None)
    return Comparison(len(base), len(values), mb, m, ratio, low, high, w.diff, w.p_value, w.verdict)


def log_ratio_interval(base: list[float], values: list[float], alpha: float = 0.05) -> tuple[float, float] | None:
    """The (1 - alpha) interval of mean(values) / mean(base) on the log scale: var(log mean) ~ s^2 / (n mean^2)
    (the delta method), t quantile at Welch-Satterthwaite's df. None where either mean is not positive."""
    from scipy import stats

    xa, xb = np.asarray(base, dtype=float), np.asarray(values, dtype=float)
    if len(xa) < 2 or len(xb) < 2 or xa.mean() <= 0 or xb.mean() <= 0:
        return None
    va = xa.var(ddof=1) / (len(xa) * xa.mean() ** 2)
    vb = xb.var(ddof=1) / (len(xb) * xb.mean() ** 2)
    ratio = float(xb.mean() / xa.mean())
    if va + vb == 0:
        return ratio, ratio
    df = (va + vb) ** 2 / ((va**2 / (len(xa) - 1)) + (vb**2 / (len(xb) - 1)))
    half = float(stats.t.ppf(1 - alpha / 2, df)) * math.sqrt(va + vb)
    return ratio * math.exp(-half), ratio * math.exp(half)
