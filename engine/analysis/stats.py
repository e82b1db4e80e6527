"""Welch's t-test, the significance every comparison in Phoenix reports."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

import numpy as np
import pandas as pd


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
    verdict = "significant" if p < alpha else "not significant"
    return Welch(
        float(xa.mean()),
        float(xb.mean()),
        float(xb.mean() - xa.mean()),
        p,
        float(ci.low),
        float(ci.high),
        len(xa),
        len(xb),
        verdict,
    )


def against_goal(point: float, low: float | None, goal: float) -> str:
    """A goal judged by its interval: met only where the interval's low end reaches it; a point estimate inside its
    noise says so. The one rule for every published "met"."""
    if low is not None and low >= goal:
        return "met"
    return "met by the point estimate only" if point >= goal else "missed"


FEW = 5  # below this many observations a point or a ratio is drawn hollow and read as a hint, not a finding


def wilson(successes: int, trials: int, alpha: float = 0.05) -> tuple[float, float] | None:
    """Wilson's (1 - alpha) interval for a rate: honest at small n and near 0 or 1, where the normal one is not."""
    from scipy import stats

    if trials <= 0 or not 0 <= successes <= trials:  # counts that do not make a rate have no interval
        return None
    ci = stats.binomtest(int(successes), int(trials)).proportion_ci(confidence_level=1 - alpha, method="wilson")
    return float(ci.low), float(ci.high)


def median_interval(values: list[float], alpha: float = 0.05) -> tuple[float, float] | None:
    """A percentile-bootstrap (1 - alpha) interval for the median (seeded, so a page shows the same figures on every
    rerun). Ratios of tokens/s are skewed, so no t interval; with one value there is no interval."""
    from scipy import stats

    xs = np.asarray([v for v in values if v == v], dtype=float)
    if len(xs) < 2:
        return None
    if np.all(xs == xs[0]):
        return float(xs[0]), float(xs[0])
    res = stats.bootstrap(
        (xs,),
        np.median,
        confidence_level=1 - alpha,
        n_resamples=2000,
        method="percentile",
        random_state=np.random.default_rng(0),
        vectorized=True,
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


@dataclass
class Drift:
    early_n: int
    early_ms: float  # median ms per output token over the first requests
    later_p50_ms: float
    later_p95_ms: float

    @property
    def busy(self) -> bool:
        # A quiet machine keeps target-only's per-token time within ~1.3x across prompts here; a 1.5x shift of the
        # median, or a tail at 3x the start, is load from outside the run, not the prompts.
        return self.later_p50_ms >= 1.5 * self.early_ms or self.later_p95_ms >= 3 * self.early_ms


def load_drift(tokens_per_s: list[float]) -> Drift | None:
    """Target-only requests in run order against the run's own first ones, as ms per output token (prefill
    included): the machine's load drifting inside a run, which absolute tokens/s cannot survive. None below 8."""
    ms = [1000.0 / v for v in tokens_per_s if v == v and v > 0]
    if len(ms) < 8:
        return None
    n = max(3, len(ms) // 4)
    early, later = ms[:n], np.asarray(ms[n:])
    return Drift(n, float(np.median(early)), float(np.percentile(later, 50)), float(np.percentile(later, 95)))


CROSS_RUN_FACTOR = 1.5  # one target on the same prompts, two runs: paired, a quiet machine stays well within this


@dataclass
class CrossDrift:
    ratio: float  # median per-prompt ratio of this run's target-only tokens/s over the other run's
    n: int  # prompts both runs answered with target-only

    @property
    def disturbed(self) -> bool:
        return not (1 / CROSS_RUN_FACTOR <= self.ratio <= CROSS_RUN_FACTOR)


def cross_run_drift(this: pd.DataFrame, other: pd.DataFrame) -> CrossDrift | None:
    """The same target on the same prompts in two runs (frames of prompt_id and tokens_per_s, target-only): how
    far apart the machine ran them. Within a run every speedup pairs its own prompts, so a disturbed run can look
    fine alone; against another run of the same work it cannot. None below two shared prompts."""
    a = this.groupby("prompt_id")["tokens_per_s"].median()
    b = other.groupby("prompt_id")["tokens_per_s"].median()
    shared = a.index.intersection(b.index)
    ratios = (a[shared] / b[shared]).replace([np.inf, -np.inf], np.nan).dropna()
    if len(ratios) < 2:
        return None
    return CrossDrift(float(ratios.median()), len(ratios))


def unpaired_ratio(a: list[float], b: list[float], lower_is_better: bool = False) -> tuple[float, float, float] | None:
    """The ratio of two settings' medians (a over b; b over a where lower is better, so above 1 favours a) with a
    95% bootstrap interval (seeded: the same data gives the same verdict), or None with fewer than 2 samples each."""
    return clustered_ratio([a], [b], lower_is_better)


def clustered_ratio(
    a: list[list[float]], b: list[list[float]], lower_is_better: bool = False
) -> tuple[float, float, float] | None:
    """``unpaired_ratio`` over passes: a[i] and b[i] are one pass's samples of each setting, and a draw resamples
    the passes (together: a pass's drift falls on both), then the samples within each. Requests of one pass at a
    fixed rate share its queue and are not independent: two passes of SmolLM2 at 2 req/s put one setting's median
    at 3.19 and 2.20 s, each outside the other's interval over requests (runs #1044, #1048)."""
    if len(a) != len(b):
        raise ValueError(f"clustered_ratio pairs passes: {len(a)} against {len(b)}")
    pooled_a, pooled_b = [x for p in a for x in p], [x for p in b for x in p]
    if len(pooled_a) < 2 or len(pooled_b) < 2:
        return None
    rng = random.Random(0)

    def ratio(x: list[float], y: list[float]) -> float:
        mx, my = statistics.median(x), statistics.median(y)
        if lower_is_better:
            return my / mx if mx > 0 else math.inf
        return mx / my if my > 0 else math.inf

    def draw(passes: list[list[float]], picked: list[int]) -> list[float]:
        return [x for i in picked if passes[i] for x in rng.choices(passes[i], k=len(passes[i]))]

    draws = []
    for _ in range(2000):  # with one pass no pass is drawn: the same draws as a bootstrap over samples alone
        picked = [rng.randrange(len(a)) for _ in a] if len(a) > 1 else [0]
        x, y = draw(a, picked), draw(b, picked)
        draws.append(ratio(x, y) if x and y else math.nan)
    draws = sorted(d for d in draws if not math.isnan(d))  # a draw of passes where one setting had no sample
    if not draws:
        return None
    return ratio(pooled_a, pooled_b), draws[len(draws) * 49 // 2000], draws[len(draws) * 1949 // 2000]
