"""Welch's t-test, the significance every comparison in Phoenix reports."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Welch:
    mean_a: float
    mean_b: float
    diff: float
    p_value: float
    ci_low: float
    ci_high: float
    n_a: int
    n_b: int
    verdict: str


def welch(a: list[float], b: list[float], alpha: float = 0.05) -> Welch | None:
    """Welch's t-test of mean(b) - mean(a), with its (1 - alpha) confidence interval."""
    from scipy import stats

    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(xa) < 2 or len(xb) < 2:
        return None
    res = stats.ttest_ind(xb, xa, equal_var=False)
    ci = res.confidence_interval(confidence_level=1 - alpha)
    p = float(res.pvalue)
    verdict = "significant" if p < alpha else "NOT_SIGNIFICANT"
    return Welch(float(xa.mean()), float(xb.mean()), float(xb.mean() - xa.mean()), p, float(ci.low), float(ci.high),
                 len(xa), len(xb), verdict)
