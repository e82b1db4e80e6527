"""The one builder of comparison rows: a ratio, its interval and Welch's test, and the paired speedup.

Phoenix has one definition of tokens/s, used by every figure that compares modes (``TOKENS_PER_S``):
a request's tokens/s is its output tokens over its wall time, prefill included (the bandit's reward), and a
mode's tokens/s is the mean over its requests. Two figures are built from it:

- ``compare``: mean against mean, as Compare, the baseline table and the Policies page show it. The ratio's
  interval divides Welch's interval of the difference by the baseline's mean (the baseline's own noise is in
  Welch's interval), and the verdict is Welch's.
- ``speedups``: the median and IQR of per-prompt ratios against target-only in the same run, where prompt
  difficulty cancels; the Run page's KPI row and the docs' tables show it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pandas as pd

from engine.analysis.stats import FEW, median_interval, welch

TOKENS_PER_S = (
    "tokens/s: a request's output tokens over its wall time (prefill included); a mode's tokens/s is "
    "the mean over its requests"
)
TOO_FEW = "too few requests (need 2+ each)"


@dataclass
class Comparison:
    n_base: int
    n: int
    mean_base: float | None
    mean: float | None
    ratio: float | None  # mean / mean_base
    ratio_low: float | None  # the ratio's (1 - alpha) interval, from Welch's interval of the difference
    ratio_high: float | None
    difference: float | None
    p_value: float | None
    verdict: str  # 'significant', 'NOT_SIGNIFICANT' or TOO_FEW


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
    low = 1 + w.ci_low / mb if mb else None
    high = 1 + w.ci_high / mb if mb else None
    return Comparison(len(base), len(values), mb, m, ratio, low, high, w.diff, w.p_value, w.verdict)


@dataclass
class Spread:
    median: float | None
    p25: float | None
    p75: float | None
    n: int
    low: float | None = None  # the median's 95% interval (percentile bootstrap); None below two values
    high: float | None = None

    def text(self) -> str:
        if self.median is None:
            return "n/a"
        return f"{self.median:.2f}x ({self.p25:.2f}-{self.p75:.2f}, n={self.n})"

    def interval_text(self) -> str:
        """The median with its 95% interval and n, as every decision on the dashboard shows it."""
        if self.median is None:
            return "n/a"
        ci = f"95% CI {self.low:.2f}-{self.high:.2f}" if self.low is not None else "no interval from one request"
        few = f"; fewer than {FEW} requests: a hint, not a finding" if self.n < FEW else ""
        return f"{self.median:.2f}x ({ci}, n={self.n}{few})"


def spread(values: list[float]) -> Spread:
    """Median and interquartile range (the figures a noisy machine can support), and the median's interval."""
    if not values:
        return Spread(None, None, None, 0)
    qs = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    ci = median_interval(values)
    return Spread(statistics.median(values), qs[0], qs[2], len(values), *(ci or (None, None)))


def paired_ratios(frame: pd.DataFrame, base_mode: str = "target") -> pd.DataFrame:
    """Per request of every other mode: its tokens/s over the base mode's mean tokens/s on the same prompt.
    ``frame`` has prompt_id, mode and tokens_per_s (warm-up excluded); prompts without a base request drop out."""
    cols = ["mode", "prompt_id", "ratio"]
    if frame.empty:
        return pd.DataFrame(columns=cols)
    base = frame[frame["mode"] == base_mode].groupby("prompt_id")["tokens_per_s"].mean()
    other = frame[frame["mode"] != base_mode]
    other = other[other["prompt_id"].isin(base.index)]
    ratio = other["tokens_per_s"].astype(float) / other["prompt_id"].map(base).astype(float)
    return pd.DataFrame({"mode": other["mode"], "prompt_id": other["prompt_id"], "ratio": ratio})[cols]


def speedups(frame: pd.DataFrame, base_mode: str = "target") -> dict[str, Spread]:
    """Each mode's median per-prompt ratio against ``base_mode`` in the same run, with its IQR and n."""
    ratios = paired_ratios(frame, base_mode)
    return {str(mode): spread(g["ratio"].dropna().tolist()) for mode, g in ratios.groupby("mode", sort=False)}
