"""Policies against the best fixed arm in hindsight, from one run's requests.

The best fixed arm is the single (drafter, k) mode (target-only, model_<k>,
ngram_<k>, suffix_<k> or eagle3_<k>) with the highest speedup (``engine.analysis.speedup``, the figure every
page shows), or, without a reference mode, the highest mean tokens/sec. Regret of a policy's request is the best
fixed arm's tokens/sec on the same prompt minus the policy's, so prompt
difficulty cancels; cumulative regret sums it in decision order.
"""

from __future__ import annotations

import pandas as pd

from engine.analysis.compare import compare
from engine.analysis.speedup import Spread
from engine.modes import Mode


def is_fixed(mode: str) -> bool:
    return Mode.of(mode).is_fixed_arm


def is_bandit(mode: str) -> bool:
    return Mode.of(mode).is_bandit


def best_fixed(frame: pd.DataFrame, paired: dict[str, Spread] | None = None) -> str | None:
    fixed = frame[frame["mode"].map(is_fixed)]
    if fixed.empty:
        return None
    ranked = {m: s.median for m, s in (paired or {}).items() if is_fixed(m) and s.median is not None}
    if ranked:
        return max(ranked, key=lambda m: ranked[m] or 0.0)
    return str(fixed.groupby("mode")["tokens_per_s"].mean().idxmax())


def regret_curves(frame: pd.DataFrame, best: str) -> pd.DataFrame:
    """decision, mode, chosen k, regret and cumulative regret for every bandit request."""
    ref = frame[frame["mode"] == best].groupby("prompt_id")["tokens_per_s"].mean()
    out = []
    for _mode, g in frame[frame["mode"].map(is_bandit)].groupby("mode", sort=True):
        g = g.sort_values("seq").copy()
        g = g[g["prompt_id"].isin(ref.index)]
        g["decision"] = range(len(g))
        g["regret"] = g["prompt_id"].map(ref) - g["tokens_per_s"]
        g["cumulative regret"] = g["regret"].cumsum()
        g["arm"] = arm_labels(g)
        out.append(g)
    cols = [
        "mode",
        "decision",
        "seq",
        "k",
        "arm",
        "prompt_id",
        "tokens_per_s",
        "regret",
        "cumulative regret",
        "explored",
        "fallback",
    ]
    return pd.concat(out)[cols] if out else pd.DataFrame(columns=cols)


def arm_labels(frame: pd.DataFrame) -> pd.Series:
    """What each request's policy chose: the drafter arm it recorded, else its k."""
    k = frame["k"].map(lambda v: f"k={int(v)}")
    return frame["arm"].where(frame["arm"].notna(), k) if "arm" in frame else k


def arm_shares(g: pd.DataFrame) -> str:
    shares = arm_labels(g).value_counts(normalize=True)
    return ", ".join(f"{arm} {share:.0%}" for arm, share in shares.items())


def policy_table(
    frame: pd.DataFrame, best: str, alpha: float = 0.05, paired: dict[str, Spread] | None = None
) -> pd.DataFrame:
    """One row per bandit mode and fixed mode: tokens/sec, the speedup (``paired``: engine.analysis.speedup over
    the run's requests), the share of the best fixed arm (a ratio of means), Welch's test against it."""
    paired = paired or {}
    ref = frame[frame["mode"] == best]["tokens_per_s"].tolist()
    rows = []
    for mode, g in frame.groupby("mode", sort=True):
        if not (is_bandit(mode) or is_fixed(mode)):
            continue
        c = compare(ref, g["tokens_per_s"].tolist(), alpha)
        row = {
            "mode": mode,
            "n": len(g),
            "tokens/s": c.mean,
            "x reference": paired[mode].median if mode in paired else None,
            "x reference, 95% CI": paired[mode].interval_text() if mode in paired else "",
            "share of best fixed": c.ratio,
            "share CI low": c.ratio_low if mode != best else None,
            "share CI high": c.ratio_high if mode != best else None,
            "mean k": g["k"].mean(),
            "explored": g["explored"].mean() if is_bandit(mode) else None,
            "fallback": g["fallback"].mean() if is_bandit(mode) else None,
            "arms chosen": arm_shares(g) if is_bandit(mode) else "",
            "difference": c.difference if mode != best else None,
            "p-value": c.p_value if mode != best else None,
            "verdict": "best fixed arm" if mode == best else c.verdict,
        }
        rows.append(row)
    table = pd.DataFrame(rows)
    return table.sort_values("tokens/s", ascending=False).reset_index(drop=True) if not table.empty else table
