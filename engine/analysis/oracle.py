"""The per-prompt oracle: on each prompt, the fixed mode that was fastest there, chosen in hindsight.

No policy can beat it on average (up to noise), so it bounds what choosing the drafter per request could gain, and
each mode's and policy's share of it says how much of that a choice left on the table. The oracle chooses among the
run's fixed modes (target-only, <drafter>_<k>, hybrid_<k>, the -conf modes), on the prompts every one of them
answered. Its speedup is the run's one figure (``engine.analysis.speedup``) with the oracle's tokens/s as a mode's;
a share is the median of per-prompt ratios, a mode's tokens/s over the oracle's on the same prompt, with its IQR.
"""

from __future__ import annotations

import pandas as pd

from engine.analysis.speedup import paired_ratios, speedups, spread
from engine.modes import Mode

ORACLE = "oracle"  # the row's name; no mode can take it (the mode grammar has no such word)
ORACLE_NOTE = (
    "oracle: on each prompt, the fixed mode with the highest mean tokens/s there, chosen in hindsight among the "
    "run's fixed modes on the prompts all of them answered. share of oracle: the median (IQR) of per-prompt ratios, "
    "the mode's tokens/s over the oracle's on the same prompt. oracle picks: the prompts on which the mode was "
    "the fastest"
)
COLUMNS = ["mode", "n", "x reference", "share of oracle", "share p25", "share p75", "oracle picks"]


def is_fixed(mode: str) -> bool:
    return Mode.of(mode).is_fixed_arm


def per_prompt(frame: pd.DataFrame) -> pd.DataFrame:
    """prompt_id, the mode the oracle picks there and its mean tokens/s; empty with fewer than two fixed modes.
    ``frame``: prompt_id, mode, tokens_per_s of a run's answered, non-warm-up requests."""
    fixed = frame[frame["mode"].map(is_fixed)]
    n_modes = fixed["mode"].nunique()
    if n_modes < 2:
        return pd.DataFrame(columns=["prompt_id", "mode", "tokens_per_s"])
    means = fixed.groupby(["prompt_id", "mode"], as_index=False)["tokens_per_s"].mean()
    complete = means.groupby("prompt_id")["mode"].transform("nunique") == n_modes
    ranked = means[complete].sort_values(["prompt_id", "tokens_per_s", "mode"], ascending=[True, False, True])
    return ranked.drop_duplicates("prompt_id").reset_index(drop=True)


def oracle_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row for the oracle, then one per mode: n, the speedup against the run's reference (median), the share
    of the oracle (median, IQR) and the prompts the oracle picked the mode on. Empty where there is no oracle."""
    best = per_prompt(frame)
    if best.empty:
        return pd.DataFrame(columns=COLUMNS)
    answered = frame[frame["prompt_id"].isin(best["prompt_id"])][["prompt_id", "mode", "tokens_per_s"]]
    both = pd.concat([answered, best.assign(mode=ORACLE)], ignore_index=True)
    vs_reference = speedups(both, interval=False)
    shares = {mode: spread(g["ratio"].tolist(), False) for mode, g in paired_ratios(both, ORACLE).groupby("mode")}
    picks = best["mode"].value_counts().to_dict()
    modes = [ORACLE] + sorted(answered["mode"].unique(), key=lambda m: (not is_fixed(m), m))
    rows = []
    for mode in modes:
        share = shares.get(mode)
        ref = vs_reference.get(mode)
        rows.append(
            {
                "mode": mode,
                "n": int((both["mode"] == mode).sum()),
                "x reference": ref.median if ref else None,
                "share of oracle": 1.0 if mode == ORACLE else (share.median if share else None),
                "share p25": None if mode == ORACLE or not share else share.p25,
                "share p75": None if mode == ORACLE or not share else share.p75,
                "oracle picks": int(picks.get(mode, 0)) if is_fixed(mode) or mode == ORACLE else None,
            }
        )
    rows[0]["oracle picks"] = len(best)
    return pd.DataFrame(rows, columns=COLUMNS).astype({"n": int, "oracle picks": "Int64"})


def oracle_lines(table: pd.DataFrame, reference: str | None) -> list[str]:
    """The table in words, for the terminal report: the oracle's speedup and each mode's share."""
    if table.empty:
        return []
    oracle = table.iloc[0]
    ref = f"{oracle['x reference']:.2f}x {reference}" if oracle["x reference"] == oracle["x reference"] else "n/a"
    lines = [f"oracle (best fixed mode per prompt, in hindsight, {int(oracle['oracle picks'])} prompts): {ref}"]
    for _, r in table.iloc[1:].iterrows():
        if r["share of oracle"] is None or r["share of oracle"] != r["share of oracle"]:
            continue
        picks = r["oracle picks"]
        best_on = "" if pd.isna(picks) else f", best on {int(picks)}"
        spread = f"{r['share p25']:.3f}-{r['share p75']:.3f}"
        lines.append(f"  {r['mode']:<22} {r['share of oracle']:.3f} of the oracle ({spread}){best_on}")
    return lines
