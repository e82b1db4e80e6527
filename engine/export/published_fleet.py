"""The fleet plan's published check (the ``fleet-plan RUNS`` block of engine.export.published): what `fleet plan
--validate` kept in each load run, set beside the measurement, and the goal judged on the levels where the fleet
saturates, out of sample only. A level saturates where requests arrived at least as fast as that fleet served them
at its best level in the runs cited (a 32-request pass at 1 request/s ends below rate x tokens without a queue)."""

from __future__ import annotations

from statistics import median

from engine.errors import PhoenixError
from engine.export.run_ids import run_ids

GOAL = 0.15  # issue 65: the plan within 15% of the measured TTFT p50 and throughput


def _pct(x: float) -> str:
    return f"{x:.0%}" if x == x and x != float("inf") else "n/a"


def fleet_plan(fig, args: str) -> str:
    """One row per validated (run, variant): measured, the plan and the naive guess for throughput and TTFT p50,
    with the cached shares; then the goal over the saturated, out-of-sample levels. ARGS: ``RUNS [SOURCES]``, the
    sources (``343,427``) naming which plan where the runs keep plans from several."""
    runs, _, source = args.partition(" ")
    head = (
        "| fleet | rate | variant | tok/s measured | plan (error) | naive (error) | TTFT p50 ms measured "
        "| plan (error) | naive (error) | cached share measured / plan | saturated | run |\n"
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|"
    )
    lines, judged = [head], []
    kept = {}
    for run_id in run_ids(runs):
        rows = (fig.run(run_id).config or {}).get("fleet_plan") or []
        sources = {str(r.get("source")) for r in rows}
        if len(sources) > 1 and not source.strip():
            raise PhoenixError(f"run #{run_id} keeps plans from sources {', '.join(sorted(sources))}: name one")
        kept[run_id] = [r for r in rows if not source.strip() or str(r.get("source")) == source.strip()]
        if not kept[run_id]:
            raise PhoenixError(f"run #{run_id} keeps no fleet plan: run `fleet plan --validate {run_id}:N` first")
    best: dict[int, float] = {}  # fleet size -> the most requests/s it served at any level cited
    for r in (r for rows in kept.values() for r in rows):
        best[r["replicas"]] = max(best.get(r["replicas"], 0.0), float(r.get("req/s measured") or 0.0))
    for run_id, rows in kept.items():
        for r in rows:
            nan = float("nan")
            guess = r.get("tok/s naive")
            saturated = bool(best[r["replicas"]]) and r["rate"] >= best[r["replicas"]]
            share = r.get("cached share measured")
            naive_tokens = "" if guess is None else f"{guess:.1f} ({_pct(r.get('tok/s naive error', nan))})"
            lines.append(
                f"| {r['replicas']} | {r['rate']:g} | {r['variant']} | {r['tok/s measured']:.1f} | "
                f"{r['tok/s predicted']:.1f} ({_pct(r['tok/s error'])}) | {naive_tokens} | "
                f"{r['TTFT p50 measured (ms)']:.0f} | {r['TTFT p50 predicted (ms)']:.0f} ({_pct(r['TTFT error'])}) | "
                f"{r.get('TTFT naive (ms)', nan):.0f} ({_pct(r.get('TTFT naive error', nan))}) | "
                f"{'n/a' if share is None else _pct(share)} / {_pct(r.get('cached share predicted', 0.0))} | "
                f"{'yes' if saturated else 'no'} | #{run_id}{'' if r.get('out of sample', False) else ' (in sample)'} |"
            )
            if saturated and r.get("out of sample", False):
                judged.append(r)
    return "\n\n" + "\n".join(lines) + "\n\n" + verdict(judged, runs) + "\n\n"


def verdict(judged: list[dict], runs: str) -> str:
    if not judged:
        return f"*The goal (within {GOAL:.0%}, out of sample, saturated)*: no level of runs {runs} qualifies."
    worst_tokens = max(r["tok/s error"] for r in judged)
    worst_ttft = max(r["TTFT error"] for r in judged)
    met = worst_tokens <= GOAL and worst_ttft <= GOAL
    tokens_beat = sum(r["tok/s error"] < r.get("tok/s naive error", float("inf")) for r in judged)
    ttft_beat = sum(r["TTFT error"] < r.get("TTFT naive error", float("inf")) for r in judged)
    return (
        f"*The goal (within {GOAL:.0%} of TTFT p50 and throughput, out of sample, at saturated levels; "
        f"{len(judged)} rows of level and variant)*: {'**met**' if met else '**not met**'} (worst throughput error "
        f"{worst_tokens:.0%}, worst TTFT error {worst_ttft:.0%}). Against the naive guess the plan's error is smaller "
        f"at {tokens_beat} of {len(judged)} for throughput and {ttft_beat} of {len(judged)} for TTFT."
    )


def fleet_repeat(fig, args: str) -> str:
    """ARGS: ``RUNS=RUNS``: the same fleets at the same rates measured twice (a calibration pass on other prompts,
    then the measured one), run by run in order: each variant's throughput and TTFT p50 in both and how far apart,
    the spread any plan's error is read against."""
    first_text, _, second_text = args.partition("=")
    first, second = run_ids(first_text), run_ids(second_text)
    if len(first) != len(second):
        raise PhoenixError(f"fleet-repeat {args}: both sides must cite as many runs, in the same order")
    lines = [
        "| fleet | rate | variant | tok/s first / second (apart) | TTFT p50 ms first / second (apart) | runs |",
        "|---:|---:|---|---:|---:|---|",
    ]
    for a_id, b_id in zip(first, second):
        a, b = ((fig.run(i).config or {}) for i in (a_id, b_id))
        if a.get("request_rate") != b.get("request_rate") or not a.get("figures") or not b.get("figures"):
            raise PhoenixError(f"fleet-repeat: runs #{a_id} and #{b_id} are not one rate measured twice")
        replicas = next((r["replicas"] for r in b.get("fleet_plan") or []), "")
        for variant, fa in a["figures"].items():
            fb = b["figures"].get(variant)
            if fb is None:
                continue
            tok, ttft = (fa["output_throughput"], fb["output_throughput"]), (fa["ttft_ms_p50"], fb["ttft_ms_p50"])
            lines.append(
                f"| {replicas} | {a['request_rate']:g} | {variant} | {tok[0]:.1f} / {tok[1]:.1f} "
                f"({_pct(abs(tok[1] - tok[0]) / tok[1])}) | {ttft[0]:.0f} / {ttft[1]:.0f} "
                f"({_pct(abs(ttft[1] - ttft[0]) / ttft[1])}) | #{a_id}, #{b_id} |"
            )
    return "\n\n" + "\n".join(lines) + "\n\n"


def fleet_passes(fig, args: str) -> str:
    """ARGS: ``RUNS SOURCES``: where one fleet ran the same rate in several passes (`--request-rate 4,4,4`), the plan
    against the median of the passes, with their range, and the goal judged on those medians: a pass is one draw of a
    queue, and the plan predicts the queue, not one draw of it."""
    runs, _, source = args.partition(" ")
    groups: dict[tuple, list[dict]] = {}
    for run_id in run_ids(runs):
        for r in (fig.run(run_id).config or {}).get("fleet_plan") or []:
            if str(r.get("source")) == source.strip():
                groups.setdefault((r["replicas"], r["rate"], r["variant"]), []).append(r | {"run": run_id})
    groups = {k: v for k, v in groups.items() if len(v) >= 2}
    if not groups:
        raise PhoenixError(f"runs {runs} hold no rate measured in two passes or more with plans from {source}")
    lines = [
        "| fleet | rate | variant | passes | tok/s measured: median (range) | plan (error) | "
        "TTFT p50 ms measured: median (range) | plan (error) | runs |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    judged = []
    for (replicas, rate, variant), rows in sorted(groups.items()):
        tok = sorted(float(r["tok/s measured"]) for r in rows)
        ttft = sorted(float(r["TTFT p50 measured (ms)"]) for r in rows)
        plan_tok = median([float(r["tok/s predicted"]) for r in rows])
        plan_ttft = median([float(r["TTFT p50 predicted (ms)"]) for r in rows])
        err_tok, err_ttft = abs(plan_tok - median(tok)) / median(tok), abs(plan_ttft - median(ttft)) / median(ttft)
        judged.append((err_tok, err_ttft, all(r.get("out of sample", False) for r in rows)))
        lines.append(
            f"| {replicas} | {rate:g} | {variant} | {len(rows)} | {median(tok):.1f} ({tok[0]:.1f}-{tok[-1]:.1f}) | "
            f"{plan_tok:.1f} ({_pct(err_tok)}) | {median(ttft):.0f} ({ttft[0]:.0f}-{ttft[-1]:.0f}) | "
            f"{plan_ttft:.0f} ({_pct(err_ttft)}) | " + ", ".join(f"#{r['run']}" for r in rows) + " |"
        )
    outside = [j for j in judged if j[2]]
    met = sum(t <= GOAL and f <= GOAL for t, f, _ in outside)
    said = (
        f"*The goal on the passes' medians (within {GOAL:.0%} of both, out of sample)*: met at {met} of {len(outside)}"
        f" rows of fleet, rate and variant (worst throughput error {max(t for t, _, _ in outside):.0%}, worst TTFT "
        f"error {max(f for _, f, _ in outside):.0%})."
        if outside
        else "*The goal on the passes' medians*: no row is out of sample."
    )
    return "\n\n" + "\n".join(lines) + "\n\n" + said + "\n\n"
