"""A server comparison of one sitting, level by level (the ``sitting`` block): each engine's settings, and each
engine's best against the other's with the interval of their ratio and its verdict (engine.analysis.sweeps: best
only where the interval excludes 1). A sitting whose engines each ran two passes in turn (Phoenix, vLLM, Phoenix,
vLLM: benchmarks/cold_sitting.sh's phases A, vllm, B, vllm2) pools each engine's passes: a setting's figures are the
mean of its passes, and the ratio's interval is a bootstrap over every block of both passes, so a level with one
block a pass still gets an interval and neither engine is measured only early or only late in the sitting."""

from __future__ import annotations

import statistics

import pandas as pd

from engine.analysis import sweeps as S
from engine.export.published_cells import anchor
from engine.export.published_levels import load_frame


def _settings(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per setting: the mean of its passes' throughput, TPOT p50 and cached share, and the runs it ran in."""
    return (
        frame.groupby("variant", sort=False)
        .agg(
            tok=("throughput_tok_s", "mean"),
            tpot=("tpot_p50_s", "mean"),
            cached=("cached_share", "mean"),
            runs=("run_id", lambda r: sorted({int(x) for x in r})),
        )
        .sort_values("tok", ascending=False)
    )


def _cell(variant: str, row) -> str:
    cached = "n/a" if row.cached != row.cached or row.cached is None else f"{row.cached:.0%}"
    passes = f", {len(row.runs)} passes" if len(row.runs) > 1 else ""
    return f"{variant} {row.tok:.1f} ({row.tpot * 1000:.0f}, {cached}{passes})"


def _ratio(by_id: dict, a: tuple[str, list[int]], b: tuple[str, list[int]]):
    """Setting a's throughput over b's: paired across runs where each side ran once, else a bootstrap over the
    blocks of all their passes; None where a side kept fewer than two blocks."""
    if len(a[1]) == 1 and len(b[1]) == 1:
        return S.between_runs(by_id, (a[1][0], a[0]), (b[1][0], b[0]))[0]
    rates_a = [r for run in a[1] for r in S.block_rates(by_id, run, a[0])]
    rates_b = [r for run in b[1] for r in S.block_rates(by_id, run, b[0])]
    return S.unpaired_ratio(rates_a, rates_b)


def sitting(fig, runs: str) -> str:
    frame = load_frame(fig, runs)  # concurrency levels only: a rate's verdict is latency (the rates-sitting block)
    by_id = {i: fig.run(i) for i in {int(r) for r in frame["run_id"]}}
    engines = sorted(frame["engine"].unique())
    head = "| load | " + " | ".join(f"{e}: tok/s (TPOT p50 ms, cached) per setting" for e in engines)
    lines = [head + " | best of each: ratio (95% CI) | verdict | runs |", "|---|" + "---|" * (len(engines) + 3)]
    for load, g in frame.groupby("load", sort=True):
        cells, bests = [], {}
        for e in engines:
            mine = _settings(g[(g["engine"] == e) & ~g["failed"]])
            cells.append("; ".join(_cell(str(v), row) for v, row in mine.iterrows()) or "failed")
            if not mine.empty:
                bests[e] = (str(mine.index[0]), mine.iloc[0])
        verdict, ratio = "", ""
        if len(bests) == 2:
            (ea, (va, ra)), (eb, (vb, rb)) = sorted(bests.items(), key=lambda kv: -kv[1][1]["tok"])
            found = _ratio(by_id, (va, ra["runs"]), (vb, rb["runs"]))
            if found:
                ratio, verdict = _lead(found, ea, eb)
            else:
                ratio, verdict = f"{ea} {ra['tok'] / rb['tok']:.2f}x by totals (one block each)", S.NO_INTERVAL
        ids = sorted({int(r) for r in g["run_id"]})
        cited = " ".join(f"[#{r}]({fig.results}#{anchor(by_id[r].name)})" for r in ids)
        lines.append(f"| c={load:g} | " + " | ".join(cells) + f" | {ratio} | {verdict} | {cited} |")
    return "\n" + "\n".join(lines) + "\n"


def _lead(found: tuple[float, float, float], first: str, second: str) -> tuple[str, str]:
    """The ratio of two engines' best settings in words, led by whichever its centre favours, and the verdict:
    best only where its interval excludes 1."""
    found, swapped = S.oriented(found)
    lead = second if swapped else first
    verdict = f"{lead} best" if S.verdict(found) == "best" else S.TIE
    return f"{lead} {found[0]:.2f}x ({found[1]:.2f}-{found[2]:.2f})", verdict


def rates_sitting(fig, runs: str) -> str:
    """A server comparison at fixed arrival rates (Poisson): there every setting that keeps up delivers the offered
    load, so throughput is no verdict. Each engine's settings by median end-to-end latency (E2EL p50 over the requests
    of all its passes), with TPOT p50, goodput and cached share (means over passes); each engine's fastest against
    the other's by the ratio of their E2EL p50 (the slower's over the faster's), its 95% interval a bootstrap over
    their requests: best only where it excludes 1."""
    frame = load_frame(fig, runs, rates=True)
    engines = sorted(frame["engine"].unique())
    head = "| rate (req/s) | " + " | ".join(f"{e}: E2EL p50 s (TPOT p50 ms, goodput req/s, cached)" for e in engines)
    head += " | fastest of each: ratio (95% CI) | verdict | SLO | runs |"
    lines = [head, "|---|" + "---|" * (len(engines) + 4)]
    for _, g in frame.groupby("load", sort=True):
        cells, bests = [], {}
        for e in engines:
            mine = _pooled(fig, g[(g["engine"] == e) & ~g["failed"]])
            cells.append("; ".join(_rate_cell(setting) for setting in mine) or "failed")
            if mine:
                bests[e] = mine[0]
        ratio, verdict = "", ""
        if len(bests) == 2:
            (ea, a), (eb, b) = sorted(bests.items(), key=lambda kv: kv[1][0])
            found = S.unpaired_ratio(a[3], b[3], lower_is_better=True)
            if found:
                ratio, verdict = _lead(found, ea, eb)
            else:
                ratio, verdict = "too few requests for an interval", S.NO_INTERVAL
        cited = " ".join(f"#{r}" for r in sorted({int(r) for r in g["run_id"]}))
        slo = g.iloc[0]["goodput_slo"] or "none named"
        rate = g.iloc[0]["load_label"]
        lines.append(f"| {rate} | " + " | ".join(cells) + f" | {ratio} | {verdict} | {slo} | {cited} |")
    return "\n" + "\n".join(lines) + "\n"


def _pooled(fig, rows: pd.DataFrame) -> list[tuple[float, str, pd.DataFrame, list[float]]]:
    """One engine's settings at one rate, fastest first: (E2EL p50 over every pass's requests, the variant, its
    passes' rows, those latencies)."""
    out = []
    for variant, passes in rows.groupby("variant", sort=False):
        latencies = [x for r in passes["run_id"] for x in S.variant_latencies(fig.store, int(r), str(variant))]
        if latencies:
            out.append((statistics.median(latencies), str(variant), passes, latencies))
    return sorted(out, key=lambda setting: setting[0])


def _rate_cell(setting: tuple[float, str, pd.DataFrame, list[float]]) -> str:
    e2el, variant, passes, _ = setting
    cached = passes["cached_share"].dropna()
    good = passes["goodput_req_s"].dropna()
    more = f", {len(passes)} passes" if len(passes) > 1 else ""
    return (
        f"{variant} {e2el:.2f} ({passes['tpot_p50_s'].mean() * 1000:.0f}, "
        + ("n/a" if good.empty else f"{good.mean():.2f}")
        + ", "
        + ("n/a" if cached.empty else f"{cached.mean():.0%}")
        + f"{more})"
    )
