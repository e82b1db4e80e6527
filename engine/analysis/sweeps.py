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

from engine import runspec
from engine.analysis.regressions import disturbed
from engine.analysis.stats import median_interval, unpaired_ratio
from engine.catalog import model_name

LEVEL = re.compile(r"\s*(c=\d+|rate=\S+(?:\s+cap=\d+)?)$")
FIGURES = {
    "throughput_tok_s": ("output_throughput", 1.0),
    "ttft_p50_s": ("ttft_ms_p50", 1e-3),
    "ttft_p95_s": ("ttft_ms_p95", 1e-3),
    "tpot_p50_s": ("tpot_ms_p50", 1e-3),
    "goodput_req_s": ("goodput", 1.0),
    "e2el_p50_s": ("e2el_ms_p50", 1e-3),
    "cpu_s_per_1k_tokens": ("cpu_s_per_1k_tokens", 1.0),
    "cached_share": ("cached_share", 1.0),
}
TIE = "tied"  # the interval of the ratio to the runner-up holds 1 (or there is none): no setting is named best


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
                spec = runspec.of(run, variant)
                quant = f" {spec.target.quantization}" if spec.target.quantization else ""
                row = {
                    "sweep": key,
                    "sweep_name": name,
                    "run_id": run.id,
                    "model": spec.target.name,
                    "weights": spec.target.quantization or "not recorded",
                    "cpu": spec.cpu,
                    "hardware": str(cfg.get("hardware") or spec.cpu),
                    "cache": spec.cache,
                    # the rest of the work (engine.runspec.RunSpec.WORK): settings rank only against the same work
                    "work": f"{spec.prompts}, {spec.max_new_tokens} tokens, T={spec.temperature:g}",
                    "cores": spec.cores,
                    "engine": engine,
                    "variant": variant,
                    # its sweep's first run: two sweeps apart; the weights in the name (a Q4_K_M GGUF is not bf16)
                    "setting": f"{engine}{quant} {variant} (#{runs[0].id})",
                    "speculation": "off" if variant.startswith("none") else "on",
                    "load_kind": "request rate (req/s)" if rate is not None else "concurrency",
                    "load": load_value,
                    "load_label": "unbounded (all at once)" if rate == "inf" else f"{load_value:g}",
                    "n": f.get("answered"),
                    "failed": f.get("answered") == 0,  # a setting that answered nothing: failed, never 0 tok/s
                    "goodput_slo": slo_words(f.get("slos_ms")),
                }
                for out, (key_in, scale) in FIGURES.items():
                    value = f.get(key_in)
                    ok = isinstance(value, (int, float)) and value == value and not row["failed"]
                    row[out] = float(value) * scale if ok and value is not None else None
                rows.append(row)
    return pd.DataFrame(rows)


def slo_words(slos) -> str:
    """The SLO a level counted its goodput against, in words (TTFT <= 2000 ms, TPOT <= 200 ms); "" for none."""
    if not isinstance(slos, dict) or not slos:
        return ""
    return ", ".join(f"{str(k).upper()} ≤ {v:g} ms" for k, v in slos.items() if isinstance(v, (int, float)))


def sitting(found: dict[str, list], hours: float = 6.0) -> list[str]:
    """The sweeps a page opens on: the newest sweep of several levels, and beside it every other engine's newest
    sweep of the same model and CPU begun within ``hours`` of it (one sitting: peers measured together). Sweeps
    measured on a machine known to run slower (tagged ``disturbed``) are opened only when there is nothing else."""
    multi = {k: runs for k, runs in found.items() if len(runs) > 1}
    multi = {k: runs for k, runs in multi.items() if not any(disturbed(r) for r in runs)} or multi
    if not multi:
        return list(found)[-1:]
    newest = max(multi, key=lambda k: multi[k][-1].id)
    head = multi[newest][0]

    def where(runs) -> tuple:
        r = runs[0]
        return (model_name(r.target), ((r.config or {}).get("environment") or {}).get("cpu"))

    engines = {((head.config or {}).get("load") or {}).get("engine")}
    out = [newest]
    for key, runs in sorted(multi.items(), key=lambda kv: -kv[1][-1].id):
        engine = ((runs[0].config or {}).get("load") or {}).get("engine")
        close = abs((runs[0].created_at - head.created_at).total_seconds()) <= hours * 3600
        if key != newest and engine not in engines and where(runs) == where(multi[newest]) and close:
            engines.add(engine)
            out.append(key)
    return out


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


def paired_across(runs_by_id: dict, a: tuple[int, str], b: tuple[int, str]) -> tuple[float, float, float] | None:
    """Two settings of two runs that sent the same prompts in the same blocks (one prompt set, one limit, one block
    size: block i holds the same prompts in both), paired block by block: the median ratio of their block
    throughputs and its interval; None where the blocks do not match."""
    ra, rb = runs_by_id.get(a[0]), runs_by_id.get(b[0])
    if ra is None or rb is None:
        return None
    la, lb = ra.config.get("load") or {}, rb.config.get("load") or {}
    same = all(la.get(k) == lb.get(k) for k in ("prompts", "limit", "max_new_tokens", "chat", "system_prompt"))
    if not same or ra.config.get("block") != rb.config.get("block"):
        return None
    x, y = block_rates(runs_by_id, *a), block_rates(runs_by_id, *b)
    if len(x) != len(y) or len(x) < 2 or not all(v > 0 for v in y):
        return None
    ratios = [p / q for p, q in zip(x, y)]
    interval = median_interval(ratios)
    return None if interval is None else (statistics.median(ratios), interval[0], interval[1])


def block_rates(runs_by_id: dict, run_id: int, variant: str) -> list[float]:
    blocks = (runs_by_id[run_id].config.get("blocks") or {}).get(variant) if run_id in runs_by_id else None
    return [b[1] / b[0] for b in blocks or [] if b[0] > 0]


NO_INTERVAL = "no verdict (no interval)"  # one block each, or no blocks kept: a ratio without its noise


def verdict(interval: tuple[float, float, float] | None) -> str:
    """best where the interval of the ratio to the runner-up lies wholly above 1; tied where it holds 1; no verdict
    where there is no interval."""
    if interval is None:
        return NO_INTERVAL
    return "best" if interval[1] > 1.0 else TIE


def oriented(found: tuple[float, float, float]) -> tuple[tuple[float, float, float], bool]:
    """A ratio with its interval as the leader's over the runner-up: inverted (and True) where its centre says the
    other one leads (the medians of their blocks can rank two settings unlike their totals)."""
    if found[0] >= 1.0:
        return found, False
    return (1 / found[0], 1 / found[2], 1 / found[1]), True


def best_at_each_load(frame: pd.DataFrame, runs_by_id: dict, latencies=None) -> pd.DataFrame:
    """Per model, CPU, cache scenario and load: the leading setting, the runner-up and by how much, with the
    interval of their ratio; the leader is named ``best`` only where that interval excludes 1 (else ``tied``, with
    the interval shown). At a concurrency (or an unbounded rate) settings are ranked by throughput, the interval from
    the level's paired blocks (the same prompts) or, between runs, by a bootstrap over their blocks. At a fixed
    arrival rate throughput is set by the arrivals, so the ranking is by median end-to-end latency, the interval by
    a bootstrap over each setting's requests (``latencies(run_id, variant)``). Settings that answered nothing are
    listed as failed, never ranked."""
    rows = []
    for head, g, by_latency, figure in _loads(frame):
        ranked = g[~g["failed"]].dropna(subset=[figure]).sort_values(figure, ascending=by_latency)
        failed = ", ".join(g[g["failed"]]["setting"])
        if ranked.empty:
            rows.append({**head, "verdict": "every setting failed", "leader": None, "failed settings": failed})
            continue
        top = ranked.iloc[0]
        second = ranked.iloc[1] if len(ranked) > 1 else None
        interval, how = _interval(top, second, runs_by_id, latencies, by_latency)
        if interval is not None:
            interval, swapped = oriented(interval)
            top, second = (second, top) if swapped else (top, second)
        rows.append(
            {
                **head,
                "verdict": "only setting" if second is None else verdict(interval),
                "leader": top["setting"],
                "x runner-up": None if interval is None else interval[0],
                "interval (95%)": "" if interval is None else f"{interval[1]:.2f}-{interval[2]:.2f}x",
                "ranked by": ("median end-to-end latency" if by_latency else "throughput")
                + (f"; {how}" if how else ""),
                "runner-up": None if second is None else second["setting"],
                "tok/s": top["throughput_tok_s"],
                "unequal terms": "" if second is None else unequal(top, second),
                "failed settings": failed,
                "run": int(top["run_id"]),
            }
        )
    return pd.DataFrame(rows)


def _loads(frame: pd.DataFrame):
    """Each (model, CPU, cache scenario, the rest of the work, load) of a sweep's points: the row's head, its points,
    and how it ranks (at a fixed arrival rate the arrivals set throughput: by median end-to-end latency, lower
    first; else by throughput). The one grouping both tables read."""
    keys = ["model", "cpu", "cache", "work", "load_kind", "load"]
    for (model, cpu, cache, work, kind, load), g in frame.groupby(keys, sort=True):
        by_latency = kind.startswith("request rate") and math.isfinite(load)
        head = {"model": model, "cpu": cpu, "cache": cache, "work": work, "load": f"{kind} {g['load_label'].iloc[0]}"}
        yield head, g, by_latency, "e2el_p50_s" if by_latency else "throughput_tok_s"


def _interval(top, second, runs_by_id: dict, latencies, by_latency: bool):
    """The leader's ratio to the runner-up with its interval, and how it was had."""
    if second is None:
        return None, ""
    if by_latency:
        if latencies is None:
            return None, "no requests read: no interval"
        a, b = latencies(int(top["run_id"]), top["variant"]), latencies(int(second["run_id"]), second["variant"])
        found = unpaired_ratio(a, b, lower_is_better=True)
        return found, "bootstrap over requests" if found else "too few requests for an interval"
    if top["run_id"] == second["run_id"]:
        paired = block_ratio(runs_by_id, int(top["run_id"]), top["variant"], second["variant"])
        if paired:
            return paired, "paired blocks"
    return between_runs(runs_by_id, (int(top["run_id"]), top["variant"]), (int(second["run_id"]), second["variant"]))


def variant_latencies(store, run_id: int, variant: str) -> list[float]:
    """A load level's answered requests' end-to-end latencies for one variant (its rows' mode is
    <engine>-<variant>_c<level>): what a fixed rate's settings are ranked by, on the Sweeps page and in findings."""
    frame = store.served_requests(run_id)
    if frame.empty:
        return []
    mode = re.compile(rf"^(?:vllm|sglang|llamacpp|phoenix)-{re.escape(variant)}_c\d+$")
    mine = frame[frame["mode"].map(lambda m: bool(mode.match(str(m)))) & frame["error"].isna()]
    return [float(x) for x in mine["latency_s"].dropna()]


def between_runs(runs_by_id: dict, a: tuple[int, str], b: tuple[int, str]):
    """Setting a's throughput over setting b's, two runs' (run id, variant): paired block by block where they sent
    the same prompts in the same blocks, else a bootstrap over their blocks; with how it was had."""
    across = paired_across(runs_by_id, a, b)
    if across:
        return across, "paired blocks across runs (the same prompts in the same blocks)"
    found = unpaired_ratio(block_rates(runs_by_id, *a), block_rates(runs_by_id, *b))
    return found, ("bootstrap over blocks (not paired)" if found else "fewer than 2 blocks each: no interval")


def unequal(a, b) -> str:
    """What differs between two settings' terms beyond the setting itself: their weights and cores."""
    out = []
    if a.get("weights") != b.get("weights"):
        out.append(f"weights {a.get('weights')} / {b.get('weights')}")
    if a.get("cores") != b.get("cores"):
        out.append(f"cores {a.get('cores')} / {b.get('cores')}")
    return "; ".join(out)


SLO_FIGURES = {"ttft_p50": "ttft_p50_s", "ttft_p95": "ttft_p95_s", "tpot_p50": "tpot_p50_s"}


def slo_table(frame: pd.DataFrame, slos_ms: dict[str, float]) -> pd.DataFrame:
    """Per setting: the highest load at which it meets every SLO (milliseconds, keys of SLO_FIGURES), the first
    load at which it stops, with its throughput there, and the loads at which it answered nothing (failed: not a
    miss of the SLO, and never a point at 0)."""
    rows = []
    ok = meets(frame, slos_ms)
    for (model, setting), g in frame.groupby(["model", "setting"], sort=True):
        g = g.sort_values("load")
        answered = g[~g["failed"]]
        met, missed = answered[ok.loc[answered.index]], answered[~ok.loc[answered.index]]
        rows.append(
            {
                "model": model,
                "setting": setting,
                "meets up to": None if met.empty else met.loc[met["load"].idxmax(), "load_label"],
                "tok/s there": None if met.empty else float(met.loc[met["load"].idxmax(), "throughput_tok_s"]),
                "stops meeting at": None if missed.empty else missed.loc[missed["load"].idxmin(), "load_label"],
                "failed at": ", ".join(g[g["failed"]]["load_label"]) or None,
            }
        )
    return pd.DataFrame(rows)


def meets(frame: pd.DataFrame, slos_ms: dict[str, float]) -> pd.Series:
    """Which points meet every SLO (milliseconds, keys of SLO_FIGURES); a figure a point lacks is not met."""
    ok = pd.Series(True, index=frame.index)
    for key, limit in slos_ms.items():
        ok &= frame[SLO_FIGURES[key]].fillna(math.inf) * 1000 <= limit
    return ok & ~frame["failed"]


def best_within(frame: pd.DataFrame, slos_ms: dict[str, float]) -> pd.DataFrame:
    """Per model, CPU, cache scenario and load: among the settings meeting every SLO, the one with the most
    throughput (at a fixed arrival rate, where the arrivals set throughput, the lowest median end-to-end latency);
    none where no setting meets them. A leader, not a verdict: the interval is the best table's."""
    rows = []
    ok = meets(frame, slos_ms)
    for head, g, by_latency, figure in _loads(frame):
        good = g[ok.loc[g.index]].sort_values(figure, ascending=by_latency, na_position="last")
        top = good.iloc[0] if len(good) else None
        rows.append(
            {
                **head,
                "leading within the SLO": None if top is None else top["setting"],
                "ranked by": "median end-to-end latency" if by_latency else "throughput",
                "tok/s": None if top is None else top["throughput_tok_s"],
                "TTFT p95 (ms)": None if top is None or top["ttft_p95_s"] is None else top["ttft_p95_s"] * 1000,
                "TPOT p50 (ms)": None if top is None or top["tpot_p50_s"] is None else top["tpot_p50_s"] * 1000,
                "settings meeting it": f"{len(good)} of {len(g)}",
                "run": None if top is None else int(top["run_id"]),
            }
        )
    return pd.DataFrame(rows)
