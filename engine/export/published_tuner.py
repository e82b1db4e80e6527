"""Phoenix's tuner judged on one server in paired blocks (each block the same prompts, every setting in turn): against
its own speculation off (the ``tuner`` block) and against the best of off and every fixed drafter and k the run
measured beside it (``tuner-best``), and at fixed arrival rates against the best of the rest by latency
(``tuner-rates``). Issue 66's goal: at least TUNER_GOAL of either at every level and rate."""

from __future__ import annotations

import statistics

from engine.analysis import sweeps as S
from engine.analysis.stats import clustered_ratio
from engine.errors import PhoenixError
from engine.export.published_cells import anchor
from engine.export.run_ids import run_ids

TUNER_GOAL = 0.97  # issue 66: the tuner makes at least this share of off's (and the best fixed k's) throughput


def tuner(fig, runs: str) -> str:
    """Phoenix's tuner against its own speculation off, level by level, on one server in paired blocks (each block
    the same prompts, the two settings in turn): the ratio of totals, the interval of the per-block ratios, and
    whether it meets the goal (its interval above TUNER_GOAL), misses it (below) or cannot tell."""
    lines = ["| level | off tok/s | tuner tok/s | tuner / off (95% CI over blocks) | goal: tuner ≥ 0.97 of off | run |",
             "|---|---:|---:|---|---|---|"]  # fmt: skip
    for run_id in run_ids(runs):
        run = fig.store.get_run(run_id)
        cfg = (run.config or {}) if run is not None else {}
        f = cfg.get("figures") or {}
        auto = _auto(cfg)
        if run is None or auto is None or "none" not in f or auto not in f:
            continue
        if cfg.get("request_rate") is not None:  # the arrivals set a rate's throughput: its verdict is latency
            raise PhoenixError(f"run #{run_id} is a request rate: the tuner block judges throughput at concurrency")
        off, tuned = f["none"]["output_throughput"], f[auto]["output_throughput"]
        interval, verdict = _judge(S.block_ratio({run_id: run}, run_id, auto, "none"))
        level = f"c={cfg.get('level')}"
        lines.append(f"| {level} | {off:.1f} | {tuned:.1f} ({auto}) | {tuned / off:.2f}x ({interval}) | {verdict} | "
                     f"[#{run_id}]({fig.results}#{anchor(run.name)}) |")  # fmt: skip
    if len(lines) == 2:
        raise PhoenixError(f"runs {runs} hold no level with the tuner and speculation off")
    return "\n" + "\n".join(lines) + "\n"


def _judge(found) -> tuple[str, str]:
    """A ratio's interval in words and the goal's verdict: met where the interval lies at or above TUNER_GOAL,
    missed where it lies wholly below, else inside its noise."""
    if found is None:
        return "one block: no interval", "cannot tell"
    verdict = "met" if found[1] >= TUNER_GOAL else "missed" if found[2] < TUNER_GOAL else "inside its noise"
    return f"{found[1]:.2f}-{found[2]:.2f}", verdict


def _auto(cfg: dict) -> str | None:
    return next((v for v in cfg.get("variants") or [] if v == "auto" or str(v).endswith("-auto")), None)


def tuner_best(fig, runs: str) -> str:
    """The tuner against the best of every other setting its run measured in the same blocks (speculation off and
    each fixed drafter and k): each setting's tok/s, the best fixed one, the tuner over it with the interval of the
    per-block ratios, and the goal (the tuner at least TUNER_GOAL of the best)."""
    lines = ["| level | every other setting, tok/s | best of them | tuner tok/s | tuner / best (95% CI over blocks) "
             "| goal: tuner ≥ 0.97 of the best | run |", "|---|---|---|---:|---|---|---|"]  # fmt: skip
    for run_id in run_ids(runs):
        run = fig.store.get_run(run_id)
        cfg = (run.config or {}) if run is not None else {}
        f, auto = cfg.get("figures") or {}, _auto(cfg)
        others = {v: f[v]["output_throughput"] for v in cfg.get("variants") or [] if v != auto and v in f}
        if run is None or auto is None or auto not in f or len(others) < 2:
            continue
        if cfg.get("request_rate") is not None:  # the arrivals set a rate's throughput: its verdict is latency
            raise PhoenixError(f"run #{run_id} is a request rate: the tuner-best block judges throughput")
        best = max(others, key=lambda v: others[v])
        tuned = f[auto]["output_throughput"]
        interval, verdict = _judge(S.block_ratio({run_id: run}, run_id, auto, best))
        every = ", ".join(f"{v} {x:.1f}" for v, x in others.items())
        lines.append(f"| c={cfg.get('level')} | {every} | {best} | {tuned:.1f} ({auto}) | "
                     f"{tuned / others[best]:.2f}x ({interval}) | {verdict} | "
                     f"[#{run_id}]({fig.results}#{anchor(run.name)}) |")  # fmt: skip
    if len(lines) == 2:
        raise PhoenixError(f"runs {runs} hold no level with the tuner beside off and a fixed setting")
    return "\n" + "\n".join(lines) + "\n"


def tuner_rates(fig, runs: str) -> str:
    """The tuner at fixed arrival rates, where throughput is set by the arrivals and latency is the verdict: against
    the best of every other setting its runs sent at the same rate (speculation off, each fixed drafter and k), by
    median end-to-end latency over every pass's requests (runs at one rate pool: passes in other orders cancel a
    drift within a pass): the best's E2EL p50 over the tuner's (above 1: the tuner answers sooner), its 95% interval
    a bootstrap over passes and the requests within each (one pass's requests share its queue), and the goal (the
    tuner at least TUNER_GOAL of the best: its interval at or above)."""
    lines = ["| rate (req/s) | every other setting, E2EL p50 s | best of them | tuner E2EL p50 s | best / tuner "
             "(95% CI over passes and requests) | goal: tuner ≥ 0.97 of the best | runs |",
             "|---|---|---|---:|---|---|---|"]  # fmt: skip
    for rate, passes in _by_rate(fig, runs).items():
        auto = _auto(passes[0][1].config or {})
        by_pass: dict[str, list[list[float]]] = {}  # each setting's latencies, one list per pass
        for i, (run_id, run) in enumerate(passes):
            for v in (run.config or {}).get("variants") or []:
                by_pass.setdefault(str(v), [[] for _ in passes])[i] = S.variant_latencies(fig.store, run_id, str(v))
        latencies = {v: [x for p in ps for x in p] for v, ps in by_pass.items()}
        medians = {v: statistics.median(x) for v, x in latencies.items() if x}
        others = {v: m for v, m in medians.items() if v != auto}
        if auto not in medians or not others:
            continue
        best = min(others, key=lambda v: others[v])
        interval, verdict = _judge(clustered_ratio(by_pass[best], by_pass[auto]))
        every = ", ".join(f"{v} {m:.2f}" for v, m in others.items())
        cited = " ".join(f"[#{r}]({fig.results}#{anchor(run.name)})" for r, run in passes)
        lines.append(f"| {rate:g} | {every} | {best} | {medians[auto]:.2f} ({auto}) | "
                     f"{others[best] / medians[auto]:.2f}x ({interval}) | {verdict} | {cited} |")  # fmt: skip
    if len(lines) == 2:
        raise PhoenixError(f"runs {runs} hold no request rate with the tuner beside another setting")
    return "\n" + "\n".join(lines) + "\n"


def _by_rate(fig, runs: str) -> dict[float, list]:
    """The runs that hold the tuner at a request rate, by rate, in the order given: (run id, run) each."""
    out: dict[float, list] = {}
    for run_id in run_ids(runs):
        run = fig.store.get_run(run_id)
        cfg = (run.config or {}) if run is not None else {}
        if run is not None and _auto(cfg) is not None and cfg.get("request_rate") not in (None, "inf"):
            out.setdefault(float(cfg["request_rate"]), []).append((run_id, run))
    return out
