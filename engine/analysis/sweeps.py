"""A load sweep as one picture's data: every level of one `engines load` (or side-by-side) invocation, for every
engine and setting, as points of throughput and latency against load, the frontier, the best setting at each load
with its margin and interval, and where each setting stops meeting a latency target.

A sweep is one invocation: runs written since it kept its id in the run's config (``sweep.id``); older runs are
grouped by invocation from what they kept: consecutive runs of one name (its level cut off) and one load config.
Throughput, TTFT and TPOT are the level's stored figures (`vllm bench serve`'s definitions, engine.engines.arrivals).
The best setting's margin over the runner-up has an interval where the level kept its blocks: each block runs every
setting on the same prompts, so the per-block ratio of throughputs is paired, and its spread is the noise.
"""

from __future__ import annotations

import json
import math
import re
import statistics

import pandas as pd

from engine.analysis.stats import median_interval
from engine.catalog import model_name

LEVEL = re.compile(r"\s*(c=\d+|rate=\S+(?:\s+cap=\d+)?)$")
FIGURES = {
    "throughput_tok_s": ("output_throughput", 1.0),
    "ttft_p50_s": ("ttft_ms_p50", 1e-3),
    "ttft_p95_s": ("ttft_ms_p95", 1e-3),
    "tpot_p50_s": ("tpot_ms_p50", 1e-3),
    "goodput_req_s": ("goodput", 1.0),
    "cpu_s_per_1k_tokens": ("cpu_s_per_1k_tokens", 1.0),
}


def sweep_of(run) -> str | None:
    """The sweep a load run belongs to: its stored id, or (older runs) its name without the level and a digest of
    its load config; None for a run that is no load level."""
    cfg = run.config or {}
    if not isinstance(cfg.get("load"), dict) or not isinstance(cfg.get("figures"), dict):
        return None
    if isinstance(cfg.get("sweep"), dict) and cfg["sweep"].get("id"):
        return str(cfg["sweep"]["id"])
    load = {k: v for k, v in cfg["load"].items() if k not in ("concurrency", "request_rate")}
    return f"{LEVEL.sub('', run.name)}|{json.dumps(load, sort_keys=True, default=str)}"


def sweeps(runs) -> dict[str, list]:
    """Load runs grouped into sweeps, each sweep's runs in id order; older runs of one name and config are one sweep
    only while their ids follow one another (a later invocation of the same command is another sweep)."""
    out: dict[str, list] = {}
    last_id: dict[str, int] = {}
    for run in sorted(runs, key=lambda r: r.id):
        key = sweep_of(run)
        if key is None:
            continue
        stored = isinstance((run.config or {}).get("sweep"), dict)
        if not stored and key in last_id and run.id - last_id[key] > 1:
            key = f"{key}#{run.id}"  # the same command run again later: a sweep of its own
            while key in out:
                key += "'"
        last_id[sweep_of(run) or key] = run.id
        out.setdefault(key, []).append(run)
    return out


def label(runs) -> str:
    """A sweep's name for people: its first run's name without the level, its engine and its first run."""
    first = runs[0]
    engine = (first.config.get("load") or {}).get("engine", "?")
    return f"#{first.id}-#{runs[-1].id} {LEVEL.sub('', first.name)} ({engine}, {model_name(first.target)})"


def points(sweep_runs: dict[str, list]) -> pd.DataFrame:
    """One row per (sweep, level, setting): its load, figures, n and run, for the charts and tables."""
    rows = []
    for key, runs in sweep_runs.items():
        name = label(runs)
        for run in runs:
            cfg = run.config
            engine = str(cfg["load"].get("engine", "?"))
            rate = cfg.get("request_rate")
            load_value = float("inf") if rate == "inf" else float(rate) if rate is not None else cfg.get("level")
            for variant, f in cfg["figures"].items():
                if not isinstance(f, dict):
                    continue
                row = {
                    "sweep": key,
                    "sweep_name": name,
                    "run_id": run.id,
                    "model": model_name(run.target),
                    "cpu": (cfg.get("environment") or {}).get("cpu") or "unknown CPU",
                    "engine": engine,
                    "variant": variant,
                    "setting": f"{engine} {variant} (#{runs[0].id})",  # its sweep's first run: two sweeps apart
                    "speculation": "off" if variant.startswith("none") else "on",
                    "load_kind": "request rate (req/s)" if rate is not None else "concurrency",
                    "load": load_value,
                    "n": f.get("answered"),
                }
                for out, (key_in, scale) in FIGURES.items():
                    value = f.get(key_in)
                    row[out] = value * scale if isinstance(value, (int, float)) and value == value else None
                rows.append(row)
    return pd.DataFrame(rows)


def frontier(frame: pd.DataFrame, latency: str = "ttft_p95_s") -> pd.DataFrame:
    """The points no other point beats on both throughput (more) and ``latency`` (less): the latency-throughput
    frontier, by throughput."""
    pts = frame.dropna(subset=["throughput_tok_s", latency]).sort_values(["throughput_tok_s", latency])
    keep, best = [], math.inf
    for i, row in pts[::-1].iterrows():  # from the highest throughput down: keep a point with lower latency
        if row[latency] < best:
            keep.append(i)
            best = row[latency]
    return pts.loc[keep].sort_values("throughput_tok_s")


def block_ratio(runs_by_id: dict, run_id: int, best: str, other: str) -> tuple[float, float, float] | None:
    """The best setting's throughput over the other's at one level, per paired block: (median, interval low,
    interval high), or None where the level kept no blocks (runs before blocks were stored) or too few."""
    blocks = (runs_by_id[run_id].config.get("blocks") or {}) if run_id in runs_by_id else {}
    a, b = blocks.get(best), blocks.get(other)
    if not a or not b or len(a) != len(b) or len(a) < 2:
        return None
    pairs = [(x[0], x[1], y[0], y[1]) for x, y in zip(a, b)]  # each block: [wall s, output tokens, cpu s]
    ratios = [(ta / wa) / (tb / wb) for wa, ta, wb, tb in pairs if wa > 0 and wb > 0 and tb > 0 and ta > 0]
    interval = median_interval(ratios) if len(ratios) >= 2 else None
    if interval is None:
        return None
    return statistics.median(ratios), interval[0], interval[1]


def best_at_each_load(frame: pd.DataFrame, runs_by_id: dict) -> pd.DataFrame:
    """Per model, CPU and load: the setting with the most throughput, the runner-up and by how much (the ratio of
    their throughputs, and its interval from the paired blocks where the level kept them)."""
    rows = []
    for (model, cpu, kind, load), g in frame.dropna(subset=["throughput_tok_s"]).groupby(
        ["model", "cpu", "load_kind", "load"], sort=True
    ):
        ranked = g.sort_values("throughput_tok_s", ascending=False)
        top = ranked.iloc[0]
        second = ranked.iloc[1] if len(ranked) > 1 else None
        row = {
            "model": model,
            "cpu": cpu,
            "load": f"{kind} {load:g}",
            "best": top["setting"],
            "tok/s": top["throughput_tok_s"],
            "runner-up": None if second is None else second["setting"],
            "x runner-up": None if second is None else top["throughput_tok_s"] / second["throughput_tok_s"],
            "interval (paired blocks)": "",
            "run": int(top["run_id"]),
        }
        if second is not None and top["run_id"] == second["run_id"]:
            paired = block_ratio(runs_by_id, int(top["run_id"]), top["variant"], second["variant"])
            row["interval (paired blocks)"] = (
                f"{paired[1]:.2f}-{paired[2]:.2f}x" if paired else "blocks not kept by this run"
            )
        elif second is not None:
            row["interval (paired blocks)"] = "different runs: not paired"
        rows.append(row)
    return pd.DataFrame(rows)


SLO_FIGURES = {"ttft_p50": "ttft_p50_s", "ttft_p95": "ttft_p95_s", "tpot_p50": "tpot_p50_s"}


def slo_table(frame: pd.DataFrame, slos_ms: dict[str, float]) -> pd.DataFrame:
    """Per setting: the highest load at which it meets every SLO (milliseconds, keys of SLO_FIGURES) and the first
    load at which it stops, with its throughput there."""
    rows = []
    ok = meets(frame, slos_ms)
    for (model, setting), g in frame.groupby(["model", "setting"], sort=True):
        g = g.sort_values("load")
        met, missed = g[ok.loc[g.index]], g[~ok.loc[g.index]]
        rows.append(
            {
                "model": model,
                "setting": setting,
                "meets up to": None if met.empty else f"{met['load'].max():g}",
                "tok/s there": None if met.empty else float(met.loc[met["load"].idxmax(), "throughput_tok_s"]),
                "stops meeting at": None if missed.empty else f"{missed['load'].min():g}",
            }
        )
    return pd.DataFrame(rows)


def meets(frame: pd.DataFrame, slos_ms: dict[str, float]) -> pd.Series:
    """Which points meet every SLO (milliseconds, keys of SLO_FIGURES); a figure a point lacks is not met."""
    ok = pd.Series(True, index=frame.index)
    for key, limit in slos_ms.items():
        ok &= frame[SLO_FIGURES[key]].fillna(math.inf) * 1000 <= limit
    return ok


def best_within(frame: pd.DataFrame, slos_ms: dict[str, float]) -> pd.DataFrame:
    """Per model, CPU and load: the setting with the most throughput among those meeting every SLO (none where no
    setting meets them)."""
    rows = []
    ok = meets(frame, slos_ms)
    for (model, cpu, kind, load), g in frame.groupby(["model", "cpu", "load_kind", "load"], sort=True):
        good = g[ok.loc[g.index]].sort_values("throughput_tok_s", ascending=False)
        top = good.iloc[0] if len(good) else None
        rows.append(
            {
                "model": model,
                "cpu": cpu,
                "load": f"{kind} {load:g}",
                "best within the SLO": None if top is None else top["setting"],
                "tok/s": None if top is None else top["throughput_tok_s"],
                "TTFT p95 (ms)": None if top is None or top["ttft_p95_s"] is None else top["ttft_p95_s"] * 1000,
                "TPOT p50 (ms)": None if top is None or top["tpot_p50_s"] is None else top["tpot_p50_s"] * 1000,
                "settings meeting it": f"{len(good)} of {len(g)}",
                "run": None if top is None else int(top["run_id"]),
            }
        )
    return pd.DataFrame(rows)
