"""Figures of a served run, each defined once: per mode, throughput, time to first token, time per output token,
latency percentiles, acceptance and batch; and, from the server's own steps, throughput, batch and k over time and
k against batch size.

Percentiles are numpy's linear interpolation, as every latency percentile in Phoenix (the store's). Throughput is
a ratio of totals (output tokens over the wall time the mode's requests took together, which concurrency shares
out); its ratio to the reference is labelled as such, apart from the speedup (engine.analysis.speedup), which is
per prompt.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from engine.modes import Mode

TPOT = "time per output token: (latency - TTFT) / (output tokens - 1) per request, the median over requests"
THROUGHPUT = "throughput: output tokens of the mode's requests over the wall time they took together"


def pct(values: pd.Series, q: float) -> float | None:
    """The q-th percentile (0-100) of the values that are there, numpy's linear interpolation; None when none are."""
    v = values.dropna()
    return float(np.percentile(v, q)) if len(v) else None


_pct = pct


def tpot(frame: pd.DataFrame) -> pd.Series:
    """Each request's time per output token after its first (None where it made one token or has no TTFT)."""
    later = frame["output_tokens"] - 1
    return ((frame["latency_s"] - frame["ttft_s"]) / later).where((later > 0) & frame["ttft_s"].notna())


def level_table(requests: pd.DataFrame, wall_s: dict[str, float] | None = None, reference: str | None = None):
    """One row per mode of a served run: n, failed, throughput (where the run kept each variant's wall time), its
    ratio to the reference's, TTFT p50/p95, TPOT p50, latency p50/p95, acceptance, mean batch, identical."""
    rows = []
    for mode, g in requests.groupby("mode", sort=False):
        ok = g[g["error"].isna()]
        variant = Mode.of(str(mode)).variant or str(mode)
        wall = (wall_s or {}).get(variant)
        proposed = ok["proposed"].sum()
        checked = ok["identical"].dropna()
        rows.append(
            {
                "mode": mode,
                "n": len(ok),
                "failed": len(g) - len(ok),
                "throughput_tok_s": ok["output_tokens"].sum() / wall if wall else None,
                "ttft_p50_s": _pct(ok["ttft_s"], 50),
                "ttft_p95_s": _pct(ok["ttft_s"], 95),
                "tpot_p50_s": _pct(tpot(ok), 50),
                "latency_p50_s": _pct(ok["latency_s"], 50),
                "latency_p95_s": _pct(ok["latency_s"], 95),
                "acceptance": ok["accepted"].sum() / proposed if proposed else None,
                "batch_mean": ok["batch_size"].mean() if ok["batch_size"].notna().any() else None,
                "identical": f"{int(checked.sum())}/{len(checked)}" if len(checked) else "",
            }
        )
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    base = table.loc[table["mode"] == reference, "throughput_tok_s"] if reference else pd.Series(dtype=float)
    base_value = base.iloc[0] if len(base) and base.iloc[0] else None
    table["throughput_x_reference"] = table["throughput_tok_s"] / base_value if base_value else None
    return table


def over_time(steps: pd.DataFrame, window_s: float = 5.0) -> pd.DataFrame:
    """The server's steps in windows of ``window_s``: decode throughput (tokens its steps emitted per second of the
    window), mean batch, mean k (the tuner's, over the steps it chose for) and the share of those with speculation
    off."""
    if steps.empty:
        return pd.DataFrame(columns=["t_s", "tokens_per_s", "batch", "k", "off_share", "steps"])
    win = (steps["at_s"] // window_s).astype(int)
    off = (steps["k"] == 0).astype(float).where(steps["k"].notna())  # steps where every row fixed its own k: unknown
    g = steps.assign(win=win, off=off).groupby("win")
    out = pd.DataFrame(
        {
            "t_s": g["at_s"].min(),
            "tokens_per_s": g["emitted"].sum() / window_s,
            "batch": g["batch"].mean(),
            "k": g["k"].mean(),
            "off_share": g["off"].mean(),
            "steps": g.size(),
        }
    ).reset_index(drop=True)
    return out


def k_by_batch(steps: pd.DataFrame) -> pd.DataFrame:
    """What the tuner chose at each batch size: steps (n), mean k, the share with speculation off, the mean
    expected gain of its choice over k = 0 (its own estimate), and the share of rows it would have drafted for that
    their own acceptance held at k = 0 (``rows_off``; 0 for runs before the rule)."""
    chosen = steps[steps["k"].notna()]
    if chosen.empty:
        return pd.DataFrame(columns=["batch", "n", "k_mean", "off_share", "estimate_x_off", "rows_held_off"])
    held = chosen["rows_off"] if "rows_off" in chosen else pd.Series(0, index=chosen.index)
    g = chosen.assign(
        off=(chosen["k"] == 0).astype(float), gain=chosen["estimate"] / chosen["estimate_off"], held=held
    ).groupby("batch")
    return pd.DataFrame(
        {
            "n": g.size(),
            "k_mean": g["k"].mean(),
            "off_share": g["off"].mean(),
            "estimate_x_off": g["gain"].mean(),
            "rows_held_off": g["held"].sum() / g["batch"].sum(),
        }
    ).reset_index()


PATH = re.compile(r"""[^\s"',={}]*/([^\s"',/={}]+)""")  # a path inside a word: a JSON value, a --flag=value, alone


def short_command(command: str) -> str:
    """A server's command line without this machine's paths: each path by its last part, wherever it sits in a word
    (inside vLLM's --speculative-config JSON too, which a cut at a word's last '/' once left as 'smollm2-eagle3"}',
    so k1 and k4 read the same)."""
    return PATH.sub(r"\1", command)


def level_method(config: dict) -> str:
    """How a load level ran, in one sentence: its blocks and order, and the warm-up it had."""
    order = ", ".join(config.get("order") or [])
    how = (
        f"blocks of {config['block']} prompt{'s' if config['block'] != 1 else ''}, each through every variant in "
        "turn, the order rotating from block "
        f"to block (first: {order})"
        if "block" in config
        else f"variants one after another, in the order {order}"
    )
    warm = config.get("warmup_s")
    if warm:
        how += (
            "; one warm-up request per variant before the first level ("
            + ", ".join(f"{v} {s:.2f} s" for v, s in warm.items())
            + "), in no figure"
        )
    return how
