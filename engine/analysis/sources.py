"""A hybrid drafter's passes split by the source that drafted them (the suffix trees or the EAGLE-3 head).

Counts keep engine.measure's meaning per source: a pass proposed position i if it drafted a token there, accepted
it if its first i+1 drafts were all accepted, reached it if it proposed it with every earlier one accepted.
"""

from __future__ import annotations

import pandas as pd

POSITION_COLUMNS = ["mode", "k", "arm", "position", "proposed", "accepted", "reached"]
PASS_COLUMNS = ["mode", "source", "passes", "share of passes", "drafted", "accepted", "acceptance", "accepted per pass"]


def source_positions(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (mode, source) and position, summed over requests; ``arm`` names the curve ("hybrid_8 · suffix").
    ``frame``: mode, k, per_source (the store's ``source_counts``)."""
    rows = []
    for mode, k, per_source in frame[["mode", "k", "per_source"]].itertuples(index=False):
        for source, t in (per_source or {}).items():
            for i, proposed in enumerate(t.get("proposed", [])):
                rows.append(
                    {
                        "mode": mode,
                        "k": int(k),
                        "arm": f"{mode} · {source}",
                        "position": i,
                        "proposed": proposed,
                        "accepted": t["accepted"][i],
                        "reached": t.get("reached", [None] * (i + 1))[i],
                    }
                )
    if not rows:
        return pd.DataFrame(columns=POSITION_COLUMNS)
    out = pd.DataFrame(rows).groupby(["mode", "k", "arm", "position"], as_index=False, dropna=False).sum(min_count=1)
    return out[POSITION_COLUMNS]


def source_passes(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (mode, source): passes and their share of the mode's drafting passes, drafted and accepted tokens,
    the acceptance (accepted / drafted) and accepted tokens per pass."""
    rows = []
    for mode, _, per_source in frame[["mode", "k", "per_source"]].itertuples(index=False):
        for source, t in (per_source or {}).items():
            rows.append(
                {
                    "mode": mode,
                    "source": source,
                    "passes": t["passes"],
                    "drafted": sum(t["proposed"]),
                    "accepted": sum(t["accepted"]),
                }
            )
    if not rows:
        return pd.DataFrame(columns=PASS_COLUMNS)
    out = pd.DataFrame(rows).groupby(["mode", "source"], as_index=False).sum()
    out["share of passes"] = out["passes"] / out.groupby("mode")["passes"].transform("sum")
    out["acceptance"] = out["accepted"] / out["drafted"].where(out["drafted"] > 0)
    out["accepted per pass"] = out["accepted"] / out["passes"]
    return out[PASS_COLUMNS]
