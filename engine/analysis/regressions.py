"""Regressions caught as the PyTorch HUD's benchmark dashboard catches them (pytorch/test-infra): a series is one
configuration measured over runs; its newest points are compared against a baseline window of the points before
them; a point is past the line where its median TTFT or TPOT is above 1.2x the baseline's, or its throughput below
0.8x; two consecutive points past the line are a regression, one (the newest) is suspicious, none is no regression,
and a series too short to have a baseline window and two new points is insufficient data.

A series' key is what must stay the same for its points to be comparable: the target model, the engine, the mode
(the setting: drafter and k, or a server's variant and level), the prompts, and the CPU (a figure from one machine
is not a figure for another).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

REGRESSION, SUSPICIOUS, NO_REGRESSION, INSUFFICIENT = "regression", "suspicious", "no regression", "insufficient data"
VERDICTS = (REGRESSION, SUSPICIOUS, NO_REGRESSION, INSUFFICIENT)
HIGHER_IS_BETTER = {"throughput_tok_s": True, "ttft_p50_s": False, "tpot_p50_s": False}
LINE = {True: 0.8, False: 1.2}  # throughput below 0.8x is past the line; a latency above 1.2x
BASELINE_WINDOW = 3  # points before the newest two whose median is the baseline (fewer where the series is short)
NEWEST = 2  # the points judged: two past the line in a row make a regression


@dataclass(frozen=True)
class Point:
    run_id: int
    at: str  # when the run was made (ISO), the series' order
    value: float


@dataclass
class Verdict:
    key: tuple
    figure: str
    verdict: str
    baseline: float | None = None
    ratios: list[float] = field(default_factory=list)  # the newest points over the baseline, oldest first
    points: list[Point] = field(default_factory=list)

    @property
    def run_ids(self) -> list[int]:
        return [p.run_id for p in self.points]


def past_line(ratio: float, higher_is_better: bool) -> bool:
    return ratio < LINE[True] if higher_is_better else ratio > LINE[False]


def judge(points: list[Point], figure: str, key: tuple = ()) -> Verdict:
    """The verdict on one series of one figure, its points in time order."""
    points = sorted([p for p in points if p.value == p.value and p.value > 0], key=lambda p: (p.at, p.run_id))
    if len(points) < NEWEST + 1:
        return Verdict(key, figure, INSUFFICIENT, points=points)
    window = points[-(NEWEST + BASELINE_WINDOW) : -NEWEST]
    baseline = statistics.median(p.value for p in window)
    ratios = [p.value / baseline for p in points[-NEWEST:]]
    better = HIGHER_IS_BETTER[figure]
    past = [past_line(r, better) for r in ratios]
    verdict = REGRESSION if all(past) else SUSPICIOUS if past[-1] else NO_REGRESSION
    return Verdict(key, figure, verdict, baseline, ratios, points)


def series_verdicts(series: dict[tuple, dict[str, list[Point]]]) -> list[Verdict]:
    """Every series' every figure judged; the worst first (regression, suspicious, no regression, insufficient)."""
    out = [judge(points, figure, key) for key, figures in series.items() for figure, points in figures.items()]
    return sorted(out, key=lambda v: (VERDICTS.index(v.verdict), v.key, v.figure))


def series_of(runs, summaries) -> dict[tuple, dict[str, list[Point]]]:
    """Every run's figures as points of their series. ``runs``: RunInfo-like objects (id, created_at, target, config,
    bench, status); ``summaries(run_id)``: a lab run's ModeSummary list. A load level gives a point per variant of
    throughput, TTFT p50 and TPOT p50 (its stored figures); a lab run a point per mode of tokens/s. Runs that did not
    finish are left out."""
    out: dict[tuple, dict[str, list[Point]]] = {}

    def add(key: tuple, figure: str, run, value) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.setdefault(key, {}).setdefault(figure, []).append(Point(run.id, run.created_at.isoformat(), value))

    for run in runs:
        if run.status != "done":
            continue
        cfg = run.config or {}
        cpu = (cfg.get("environment") or {}).get("cpu") or "unknown CPU"
        load = cfg.get("load")
        if isinstance(load, dict) and isinstance(cfg.get("figures"), dict):
            level = f"c={cfg.get('level')}" if cfg.get("request_rate") is None else f"rate={cfg.get('request_rate')}"
            # what the load run cannot see of the server (its dtype, its prefix cache) is in the sweep's name: the
            # name without its level is part of the key, so two differently set servers are two series
            sweep = re.sub(r"\s*(c=\d+|rate=\S+)$", "", run.name)
            extra = ", system prompt" if load.get("system_prompt") else ""
            extra += f", T={load['temperature']}" if load.get("temperature") else ""
            prompts = f"{load.get('prompts')} x{load.get('limit')}, {load.get('max_new_tokens')} tokens{extra}; {sweep}"
            for variant, f in cfg["figures"].items():
                if not isinstance(f, dict):
                    continue
                key = (run.target, str(load.get("engine")), f"{variant} {level}", prompts, cpu)
                add(key, "throughput_tok_s", run, f.get("output_throughput"))
                add(key, "ttft_p50_s", run, (f.get("ttft_ms_p50") or 0) / 1000 or None)
                add(key, "tpot_p50_s", run, (f.get("tpot_ms_p50") or 0) / 1000 or None)
        elif run.bench is not None:
            b = run.bench
            prompts = f"{b.prompts} x{b.limit}, {b.max_new_tokens} tokens, {b.dtype}"
            for m in summaries(run.id):
                add((run.target, "phoenix-lab", m.mode, prompts, cpu), "throughput_tok_s", run, m.tokens_per_s)
    return out
