"""Load tables generated from their runs: one server's settings level by level (``levels``), each server's
highest-throughput setting beside its peers' (``best-setting``), one server's sweeps over time (``history``) and its
settings at fixed arrival rates (``rates``). Each reads the figures a load run stored (engine.analysis.sweeps.points,
`vllm bench serve`'s definitions) through ``load_frame``, which keeps concurrency levels and request rates apart: at a
fixed rate the arrivals set throughput, so only ``rates`` (latency and goodput) takes them. None names a winner
between engines, which only the ``sitting`` block does, with its interval."""

from __future__ import annotations

import pandas as pd

from engine.analysis import sweeps as S
from engine.errors import PhoenixError
from engine.export.run_ids import run_ids


def load_frame(fig, runs: str, rates: bool = False) -> pd.DataFrame:
    """The load levels of ``runs``: concurrency levels, or (``rates``) request rates; the other kind is refused."""
    infos = [i for i in (fig.store.get_run(r) for r in run_ids(runs)) if i is not None]
    found = S.points(S.sweeps(infos))
    if found.empty:
        raise PhoenixError(f"runs {runs} hold no load level")
    if rates and (found["load_kind"] == "concurrency").any():
        raise PhoenixError(f"runs {runs} hold concurrency levels: the rates block reads request rates only")
    if not rates and (found["load_kind"] != "concurrency").any():  # at a fixed rate the arrivals set throughput
        raise PhoenixError(
            f"runs {runs} hold request rates: their verdict is latency and goodput (the rates and rates-sitting blocks)"
        )
    return found


def _level(row) -> str:
    return f"c={row['load']:g}" if row["load_kind"] == "concurrency" else f"rate={row['load_label']}"


def _ms(value) -> str:
    return "n/a" if value is None or value != value else f"{value * 1000:.0f}"


def _latency(row) -> str:
    return f"{_ms(row['ttft_p50_s'])}/{_ms(row['ttft_p95_s'])}"


def _goodput(row) -> str:
    value = row["goodput_req_s"]
    return "n/a" if value is None or value != value else f"{value:.2f}"


def levels(fig, args: str) -> str:
    """ARGS: ``RUNS [tuned=VARIANT]``. One engine's settings, level by level: each setting's output tok/s with its
    ratio to speculation off on the same server at the same level, off's TTFT p50/p95, TPOT p50 and goodput, the best
    speculative setting's ratio to off and, where a tuner ran (Phoenix's ``auto``, or the variant ``tuned`` names:
    vLLM's learned per-batch-size table), its ratio to the best of every other setting (off included). A setting that
    answered nothing is "failed", never 0 tok/s."""
    runs, *more = args.split()
    named = next((m.removeprefix("tuned=") for m in more if m.startswith("tuned=")), None)
    frame = load_frame(fig, runs)
    if frame["engine"].nunique() != 1:
        raise PhoenixError(f"runs {runs} hold several engines: the levels block is one server's settings")
    variants = list(dict.fromkeys(frame["variant"]))
    off = next((v for v in variants if v.startswith("none")), None)
    if off is None:
        raise PhoenixError(f"runs {runs} hold no speculation-off setting to compare against")
    spec = [v for v in variants if v != off]
    auto = named or next((v for v in spec if v == "auto" or v.endswith("-auto")), None)
    if auto is not None and auto not in spec:
        raise PhoenixError(f"runs {runs} hold no setting {auto}")
    tuned = f" | {auto} / best other setting" if auto else ""  # issue 66's goal: the tuner against the best of the rest
    lines = [
        f"| level | {off} tok/s | " + " | ".join(f"{v} tok/s" for v in spec) + f" | TTFT p50/p95 {off} (ms) | "
        f"TPOT p50 {off} (ms) | goodput {off} (req/s) | best speculative / {off}{tuned} |",
        "|---|" + "---:|" * (len(spec) + 5 + bool(auto)),
    ]
    for _, g in frame.groupby(["load_kind", "load"], sort=True):
        got = {r["variant"]: r for _, r in g.iterrows()}
        base = got.get(off)
        if base is None or base["failed"]:
            raise PhoenixError(f"runs {runs}: speculation off answered nothing at {_level(g.iloc[0])}")
        tok = base["throughput_tok_s"]
        cells, ratios = [], []
        for v in spec:
            r = got.get(v)
            if r is None:
                cells.append("")
            elif r["failed"]:
                cells.append("failed")
            else:
                ratios.append(r["throughput_tok_s"] / tok)
                cells.append(f"{r['throughput_tok_s']:.1f} ({ratios[-1]:.2f})")
        ids = sorted({int(x) for x in g["run_id"]})
        cited = ", ".join(f"#{i}" for i in ids)
        lines.append(
            f"| {_level(base)} (run {cited}) | {tok:.1f} | " + " | ".join(cells) + f" | {_latency(base)} | "
            f"{_ms(base['tpot_p50_s'])} | {_goodput(base)} | {max(ratios) if ratios else float('nan'):.2f} |"
            + (f" {_tuner(got, auto)} |" if auto else "")
        )
    return "\n\n" + "\n".join(lines) + "\n\n"


def _weights(fig, runs: str, frame: pd.DataFrame) -> str:
    """The weights a server computed with: its load runs' record, else its own server run's dtype (a client run
    against Phoenix's server did not record them; the server's run did)."""
    said = set(frame["weights"]) - {"not recorded"}
    for run_id in run_ids(runs):
        info = fig.store.get_run(run_id)
        serve = (info.config or {}).get("phoenix_serve") if info is not None else None
        if isinstance(serve, dict) and serve.get("dtype"):
            said.add(str(serve["dtype"]))
    return ", ".join(sorted(said)) or "weights not recorded"


def _tuner(got: dict, auto: str) -> str:
    mine = got.get(auto)
    rest = [r["throughput_tok_s"] for v, r in got.items() if v != auto and not r["failed"]]
    if mine is None or mine["failed"] or not rest:
        return "n/a"
    return f"{mine['throughput_tok_s'] / max(rest):.2f}"


def best_setting(fig, args: str) -> str:
    """ARGS: ``NAME=RUNS ...`` (the first is the one the ratios are of): per level, each server's highest-throughput
    setting, the first's ratio to each other, and each best's TTFT p50/p95, TPOT p50 and goodput. Ratios of totals,
    one block each: a comparison of servers measured apart, never a verdict."""
    named = [part.split("=", 1) for part in args.split()]
    if len(named) < 2 or any(len(p) != 2 for p in named):
        raise PhoenixError("best-setting takes NAME=RUNS for two servers or more")
    bests: list[dict] = []
    heads = []
    for name, runs in named:
        frame = load_frame(fig, runs)
        ok = frame[~frame["failed"]].sort_values("throughput_tok_s", ascending=False)
        bests.append({load: g.iloc[0] for load, g in ok.groupby("load", sort=True)})
        heads.append(f"{name.replace('_', ' ')} ({_weights(fig, runs, frame)}): best (tok/s)")  # Q4_K_M is not bf16
    names = [name.replace("_", " ") for name, _ in named]
    first, rest = names[0], names[1:]
    lines = [
        "| concurrency | " + " | ".join(heads) + " | "
        + " | ".join(f"{first} / {n}" for n in rest)
        + " | TTFT p50/p95 of each best (ms) | TPOT p50 of each best (ms) | goodput of each best (req/s) |",
        "|---:|" + "---|" * len(names) + "---:|" * len(rest) + "---|---|---|",
    ]  # fmt: skip
    for load in sorted(set().union(*bests)):
        rows = [b.get(load) for b in bests]
        cells = ["failed" if r is None else f"{r['variant']} {r['throughput_tok_s']:.1f}" for r in rows]
        ratios = [
            "" if rows[0] is None or r is None else f"{rows[0]['throughput_tok_s'] / r['throughput_tok_s']:.2f}"
            for r in rows[1:]
        ]
        said = [r for r in rows if r is not None]
        lines.append(
            f"| {load:g} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " | "
            + ", ".join(_latency(r) for r in said) + " | " + ", ".join(_ms(r["tpot_p50_s"]) for r in said) + " | "
            + ", ".join(_goodput(r) for r in said) + " |"
        )  # fmt: skip
    return "\n\n" + "\n".join(lines) + "\n\n"


def history(fig, args: str) -> str:
    """ARGS: ``VARIANT LABEL=RUNS ...``: one server's sweeps over time, level by level: each sweep's speculation-off
    and VARIANT output tok/s and off's TTFT p95 (underscores in a label are spaces)."""
    variant, *named = args.split()
    sweeps = []
    for part in named:
        label, runs = part.split("=", 1)
        frame = load_frame(fig, runs)
        ids = sorted({int(r) for r in frame["run_id"]})
        sweeps.append((f"{label.replace('_', ' ')} (#{ids[0]}-#{ids[-1]})", frame))
    lines = [
        "| level | " + " | ".join(label for label, _ in sweeps) + " |",
        "|---:|" + "---|" * len(sweeps),
    ]
    loads = sorted(set().union(*(set(f["load"]) for _, f in sweeps)))
    for load in loads:
        cells = []
        for _, frame in sweeps:
            got = {r["variant"]: r for _, r in frame[frame["load"] == load].iterrows()}
            off, on = got.get("none"), got.get(variant)
            if off is None or on is None or off["failed"] or on["failed"]:
                cells.append("")
                continue
            cells.append(f"{off['throughput_tok_s']:.1f} / {on['throughput_tok_s']:.1f}; {_ms(off['ttft_p95_s'])} ms")
        lines.append(f"| {load:g} | " + " | ".join(cells) + " |")
    return "\n\n" + "\n".join(lines) + "\n\n"


def rates(fig, runs: str) -> str:
    """One server's settings at fixed arrival rates: below saturation every setting delivers the offered load, so
    each is read by its median request latency (E2EL p50) and TPOT p50, with its goodput (never throughput)."""
    frame = load_frame(fig, runs, rates=True)
    variants = list(dict.fromkeys(frame["variant"]))
    lines = [
        "| rate (req/s) | " + " | ".join(f"{v} E2EL p50 (s) / TPOT p50 (ms)" for v in variants) + " | goodput ("
        + ", ".join(variants) + "; req/s) | SLO |",
        "|---|" + "---:|" * len(variants) + "---|---|",
    ]  # fmt: skip
    for _, g in frame.groupby("load", sort=True):
        got = {r["variant"]: r for _, r in g.iterrows()}
        first = g.iloc[0]
        cells = []
        for v in variants:
            r = got.get(v)
            if r is None or r["failed"] or r["e2el_p50_s"] is None:
                cells.append("failed" if r is not None and r["failed"] else "")
                continue
            cells.append(f"{r['e2el_p50_s']:.2f} / {_ms(r['tpot_p50_s'])}")
        said = ", ".join(_goodput(got[v]) if v in got else "" for v in variants)
        ids = sorted({int(x) for x in g["run_id"]})
        lines.append(
            f"| {first['load_label']} (#{', #'.join(map(str, ids))}) | " + " | ".join(cells)
            + f" | {said} | {first['goodput_slo'] or 'none named'} |"
        )  # fmt: skip
    return "\n\n" + "\n".join(lines) + "\n\n"


def _served(fig, pair: str) -> tuple[dict, int]:
    """``SERVER:RUN``: the server run's settings (dtype, prefix cache) and the load run sent to it."""
    server_text, _, run_text = pair.partition(":")
    info = fig.run(int(server_text))
    serve = (info.config or {}).get("phoenix_serve")
    if not isinstance(serve, dict):
        raise PhoenixError(f"run #{server_text} is not a Phoenix server's run")
    return serve, int(run_text)


def prefix_cache(fig, args: str) -> str:
    """ARGS: ``SERVER:RUN=SERVER:RUN`` several times: the same load sent to a server with its prefix cache and to
    one without (each load run beside the server run it was sent to, whose record says the cache's size and the
    dtype): each setting's p50 TTFT with and without, their ratio, and the outputs identical between the two."""
    lines = [
        "| dtype, variant | p50 TTFT with the cache | without | ratio | outputs identical with and without | runs |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for pair in args.split():
        (with_serve, with_run), (without_serve, without_run) = (_served(fig, p) for p in pair.split("="))
        if not float(with_serve.get("prefix_cache_gb") or 0) > 0 or float(without_serve.get("prefix_cache_gb") or 0):
            raise PhoenixError(f"prefix-cache {pair}: the first server must cache prefixes and the second must not")
        frames = [load_frame(fig, str(r)).set_index("variant") for r in (with_run, without_run)]
        answers = [
            {(r.mode, r.prompt_id): r.output_sha256 for r in fig.store.requests(i) if not r.error and not r.warmup}
            for i in (with_run, without_run)
        ]
        for variant, row in frames[0].iterrows():
            other = frames[1].loc[variant]
            level = int(row["load"])
            label = f"{with_serve.get('dtype')}, {variant}" + (f", {level} in flight" if level > 1 else "")
            mine = {k: v for k, v in answers[0].items() if k[0].endswith(f"-{variant}_c{level}")}
            same = sum(answers[1].get(k) == v for k, v in mine.items())
            lines.append(
                f"| {label} | {_ms(row['ttft_p50_s'])} ms | {_ms(other['ttft_p50_s'])} ms | "
                f"{row['ttft_p50_s'] / other['ttft_p50_s']:.2f} | {same}/{len(mine)} | #{with_run}, #{without_run} |"
            )
    return "\n\n" + "\n".join(lines) + "\n\n"
