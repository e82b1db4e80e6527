"""The speedup, defined and computed in one place: every page, report and export shows this number.

A mode's speedup is the median of per-prompt ratios: each of its requests' tokens/s over the reference mode's
mean tokens/s on the same prompt in the same run, with the median's 95% interval (bootstrap), its IQR and n.
Pairing by prompt cancels prompt difficulty; the median resists the one request a busy machine slowed. The
reference is the run's target-only mode, or, for a served run, the server started without speculation
(``engine.modes.reference_mode``).

A *ratio of means* (mean tokens/s over mean tokens/s) is another figure: Welch's test compares means, and the
break-even model predicts one. Where a page shows one it says so (``RATIO_OF_MEANS``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pandas as pd

from engine.analysis.stats import FEW, median_interval
from engine.modes import reference_mode

SPEEDUP = (
    "Speedup (x reference): the median of per-prompt ratios, each request's tokens/s over the reference mode's "
    "on the same prompt in the same run, with its 95% interval and n"
)
RATIO_OF_MEANS = "ratio of means: one mode's mean tokens/s over another's (not the paired speedup)"


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
        return f"{self.median:.2f}x ({self.ci_text()})"

    def ci_text(self) -> str:
        """The 95% interval and n without the median, for a table whose next column holds it."""
        if self.median is None:
            return "n/a"
        ci = f"95% CI {self.low:.2f}-{self.high:.2f}" if self.low is not None else "no interval from one request"
        few = f"; fewer than {FEW} requests: a hint, not a finding" if self.n < FEW else ""
        return f"{ci}, n={self.n}{few}"


def spread(values: list[float], interval: bool = True) -> Spread:
    """Median and interquartile range (the figures a noisy machine can support), and the median's interval
    (skipped with ``interval=False``, where only the median is wanted: ranking thousands of runs)."""
    values = [float(v) for v in values if v == v]
    if not values:
        return Spread(None, None, None, 0)
    qs = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    ci = median_interval(values) if interval else None
    return Spread(statistics.median(values), qs[0], qs[2], len(values), *(ci or (None, None)))


def identity(n: int) -> Spread:
    """The reference against itself."""
    return Spread(1.0, 1.0, 1.0, n, 1.0, 1.0)


def references(frame: pd.DataFrame, by: list[str]) -> pd.Series:
    """Each row's reference mode: the run's (``engine.modes.reference_mode``) within each ``by`` group."""
    if not by:
        ref = reference_mode(frame["mode"].unique())
        return pd.Series(ref, index=frame.index, dtype=object)
    refs = frame.groupby(by)["mode"].agg(lambda ms: reference_mode(ms.unique()))
    return pd.Series(
        pd.MultiIndex.from_frame(frame[by]).map(refs) if len(by) > 1 else frame[by[0]].map(refs),
        index=frame.index,
        dtype=object,
    )


def paired_ratios(frame: pd.DataFrame, base_mode: str | None = None, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per request of every other mode: its tokens/s over the reference mode's mean tokens/s on the same prompt
    (within each ``by`` group, a run). ``frame`` has prompt_id, mode and tokens_per_s (warm-up excluded); other
    columns are kept (k, to group a bandit's requests by arm). Prompts without a reference request drop out."""
    keys = list(by)
    if frame.empty:
        return frame.drop(columns=["tokens_per_s"]).assign(ratio=pd.Series(dtype=float))
    ref = pd.Series(base_mode, index=frame.index, dtype=object) if base_mode else references(frame, keys)
    is_ref = frame["mode"] == ref
    base = frame[is_ref].groupby(keys + ["prompt_id"])["tokens_per_s"].mean().rename("_base")
    other = frame[~is_ref & ref.notna()].join(base, on=keys + ["prompt_id"], how="inner")
    other["ratio"] = other["tokens_per_s"].astype(float) / other["_base"].astype(float)
    return other.drop(columns=["tokens_per_s", "_base"])


def speedups(frame: pd.DataFrame, base_mode: str | None = None, interval: bool = True) -> dict[str, Spread]:
    """Every mode's speedup against ``base_mode`` (the run's reference mode when None), the reference included
    (1.0); empty when the run has no reference."""
    return speedups_by(frame, "mode", base_mode, interval)


def speedups_by(frame: pd.DataFrame, key: str, base_mode: str | None = None, interval: bool = True) -> dict:
    """The same figure grouped by a column: ``mode``, or ``k`` (every request that drafted k tokens, across
    modes). The reference's requests count at 1.0 under their own key."""
    base = base_mode or (reference_mode(frame["mode"].unique()) if not frame.empty else None)
    if base is None:
        return {}
    ratios = paired_ratios(frame, base)
    out = {value: spread(g["ratio"].tolist(), interval) for value, g in ratios.groupby(key, sort=key != "mode")}
    ref = frame[frame["mode"] == base]
    ref_rows = {value: identity(len(g)) for value, g in ref.groupby(key)}
    return {**ref_rows, **out} if key == "mode" else {**out, **{k: v for k, v in ref_rows.items() if k not in out}}


def best(spreads: dict[str, Spread], reference: str | None) -> tuple[str, Spread] | None:
    """The mode with the highest speedup other than the reference (ties: the first), or None."""
    rows = [(m, s) for m, s in spreads.items() if m != reference and s.median is not None]
    return max(rows, key=lambda r: r[1].median or 0.0) if rows else None


def best_per_run(frame: pd.DataFrame) -> pd.DataFrame:
    """Each run's best speedup, for the Runs list: ``frame`` has run_id besides the paired columns. Columns run_id,
    best_mode and best_speedup (the median, computed as ``spread`` computes it; no interval, so thousands of runs
    rank in one pass)."""
    cols = ["run_id", "best_mode", "best_speedup"]
    ratios = paired_ratios(frame[["run_id", "prompt_id", "mode", "tokens_per_s"]], by=("run_id",))
    if ratios.empty:
        return pd.DataFrame(columns=cols)
    medians = ratios.groupby(["run_id", "mode"])["ratio"].median().rename("best_speedup").reset_index()
    top = medians.sort_values(["run_id", "best_speedup"], ascending=[True, False]).groupby("run_id").head(1)
    return top.rename(columns={"mode": "best_mode"})[cols].reset_index(drop=True)
