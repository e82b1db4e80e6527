"""Regressions caught as the PyTorch HUD's benchmark dashboard catches them (pytorch/test-infra): a series is one
configuration measured over runs; its newest points are compared against a baseline window of the points before
them; a point is past the line where its median TTFT or TPOT is above 1.2x the baseline's, or its throughput below
0.8x; two consecutive points past the line are a regression, one (the newest) is suspicious, none is no regression,
and a series too short to have a baseline window and two new points is insufficient data.

A series' key is what must stay the same for its points to be comparable: ``RunSpec.key()`` (engine.runspec), the
one definition: the target and its weights, the prompts and tokens, sampling, the load point and cache scenario, the
CPU, the setting (speculation, draft, forward path, engine, cores), and for a Phoenix server what it served
before the point (its tuner's cells are learned from it). A name is not part of it, so the same
configuration measured by two sweeps is one series.

A point of 0 (a collapse to no tokens/s, a level whose every request failed) is past the line, never dropped; only
a figure that was not measured (NaN, None) is left out.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from engine import runspec
from engine.runspec import RunSpec

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
    spec: RunSpec | None = None  # the newest point's RunSpec (engine.runspec): the series' fields, for people
    baseline: float | None = None
    ratios: list[float] = field(default_factory=list)  # the newest points over the baseline, oldest first
    points: list[Point] = field(default_factory=list)

    @property
    def run_ids(self) -> list[int]:
        return [p.run_id for p in self.points]


def past_line(value: float, baseline: float, higher_is_better: bool) -> bool:
    """Past the line: throughput under 0.8x the baseline (0 always), a latency over 1.2x (inf always)."""
    if higher_is_better:
        return value <= 0 or value < LINE[True] * baseline
    return math.isinf(value) or value > LINE[False] * baseline


def ratio_of(value: float, baseline: float) -> float:
    """The point over the baseline; NaN where the baseline is no figure to divide by (0 or inf)."""
    return value / baseline if 0 < baseline < math.inf else math.nan


def judge(points: list[Point], figure: str, key: tuple = (), spec=None) -> Verdict:
    """The verdict on one series of one figure, its points in time order."""
    points = sorted([p for p in points if p.value == p.value], key=lambda p: (p.at, p.run_id))
    if len(points) < NEWEST + 1:
        return Verdict(key, figure, INSUFFICIENT, spec, points=points)
    window = points[-(NEWEST + BASELINE_WINDOW) : -NEWEST]
    baseline = statistics.median(p.value for p in window)
    better = HIGHER_IS_BETTER[figure]
    past = [past_line(p.value, baseline, better) for p in points[-NEWEST:]]
    ratios = [ratio_of(p.value, baseline) for p in points[-NEWEST:]]
    verdict = REGRESSION if all(past) else SUSPICIOUS if past[-1] else NO_REGRESSION
    return Verdict(key, figure, verdict, spec, baseline, ratios, points)


def series_verdicts(series: dict[tuple, dict[str, list[Point]]], specs: dict | None = None) -> list[Verdict]:
    """Every series' every figure judged; the worst first (regression, suspicious, no regression, insufficient)."""
    specs = specs or {}
    out = [
        judge(points, figure, key, specs.get(key))
        for key, figures in series.items()
        for figure, points in figures.items()
    ]
    return sorted(out, key=lambda v: (VERDICTS.index(v.verdict), v.key, v.figure))


DISTURBED = "disturbed"  # a run's tag: measured on a machine known to run slower or busier than its series' (its
# note says how it was known); kept, cited and shown, but no point of any series, so a machine's bad day is no
# regression of the code (vLLM's own figures once dropped 1.6x from one day to the next on the same CPU model)


def disturbed(run) -> bool:
    return DISTURBED in (getattr(run, "tags", None) or [])


def series_of(runs, summaries, specs: dict | None = None) -> dict[tuple, dict[str, list[Point]]]:
    """Every run's figures as points of their series, keyed by ``RunSpec.key()``. ``runs``: RunInfo-like objects
    (id, created_at, target, config, bench, status); ``summaries(run_id)``: a lab run's ModeSummary list. A load
    level gives a point per variant of throughput, TTFT p50 and TPOT p50 (its stored figures; a variant that
    answered nothing: 0 tokens/s and latencies of inf); a lab run a point per mode of tokens/s. Runs that did not
    finish are left out, and runs tagged ``disturbed``. ``specs``, where given, is filled with each key's newest
    RunSpec."""
    out: dict[tuple, dict[str, list[Point]]] = {}
    specs = specs if specs is not None else {}

    def add(spec: RunSpec, figure: str, run, value) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            key = spec.key()
            specs[key] = spec
            out.setdefault(key, {}).setdefault(figure, []).append(Point(run.id, run.created_at.isoformat(), value))

    for run in sorted(runs, key=lambda r: r.id):
        if run.status != "done" or disturbed(run):
            continue
        cfg = run.config or {}
        if isinstance(cfg.get("load"), dict) and isinstance(cfg.get("figures"), dict):
            for variant, f in cfg["figures"].items():
                if not isinstance(f, dict):
                    continue
                spec = runspec.of(run, variant)
                failed = f.get("answered") == 0
                add(spec, "throughput_tok_s", run, 0.0 if failed else f.get("output_throughput"))
                for figure, name in (("ttft_p50_s", "ttft_ms_p50"), ("tpot_p50_s", "tpot_ms_p50")):
                    value = f.get(name)
                    add(
                        spec,
                        figure,
                        run,
                        math.inf if failed else value / 1000 if isinstance(value, (int, float)) else None,
                    )
        elif run.bench is not None:
            for m in summaries(run.id):
                add(runspec.of(run, m.mode), "throughput_tok_s", run, m.tokens_per_s)
    return out
