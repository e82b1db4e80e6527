"""A fleet plan from one replica's measured tables: N replicas behind a router at a request rate, for each
speculation setting the replica ran, simulated as discrete events with SimPy.

Vidur (the field's serving simulator) takes profiled GPU operators and has no speculative step, so the plan uses
the two tables Phoenix measures itself instead:

- **step cost**, fitted by least squares on the replica's ``serve_steps``: seconds = base + row-token x (batch x
  width), width being 1 + the longest draft, so a setting's verify cost is priced by the same fit as speculation
  off; a new request's prefill adds base + per-token x its prompt, fitted on the requests' measured prefill time;
- **tokens per row per pass** for each setting (the drafter and k the steps ran with), the empirical distribution of
  ``emitted / batch`` over its steps: acceptance as the replica met it, drawn step by step.

Each replica is a SimPy process that runs Phoenix's loop: admit waiting requests up to ``max_batch``, prefill the
new ones in the step that gives their first token, and emit for every running row. The router sends arrivals round
robin. Replicas sharing one machine share its cores: a replica measured with T threads and planned with t is priced
T / t times slower (compute-bound), an assumption the validation against measured fleets prices.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

import numpy as np
import pandas as pd
import simpy

from engine.errors import PhoenixError
from engine.modes import DEFAULT_MAX_BATCH

MIN_STEPS = 20  # steps a setting needs before the plan prices it


@dataclass
class Profile:
    """One replica's measured tables: the step-cost fit and tokens per row per pass for each setting."""

    base_s: float
    row_token_s: float
    prefill_base_s: float  # a new request's prefill: base + per token, fitted on the requests' measured prefill_s
    prefill_token_s: float
    per_pass: dict[str, list[float]]  # setting -> emitted / batch of each of its steps
    width: dict[str, float]  # setting -> mean width of its steps
    steps: int
    threads: int  # the replica's torch threads when it was measured

    def step_s(self, batch: int, width: float, prompts: list[int]) -> float:
        """A step of ``batch`` rows ``width`` tokens wide that also prefills these new prompts."""
        prefill = sum(self.prefill_base_s + self.prefill_token_s * n for n in prompts)
        return max(0.0, self.base_s + self.row_token_s * batch * width) + prefill


@dataclass
class Predicted:
    setting: str
    replicas: int
    rate: float
    output_throughput: float  # output tokens/s over the wall time, as `vllm bench serve` defines it
    ttft_ms_p50: float
    tpot_ms_p50: float
    requests: int


def setting_of(drafter: str, k, width: int) -> str:
    """A step's speculation setting: none where nothing drafted (width 1), else the drafter and the tuner's k."""
    if width <= 1 or drafter in ("none", ""):
        return "none"
    return f"{drafter}-k{int(k)}" if k is not None and not pd.isna(k) else drafter


def _line(x, y) -> tuple[float, float]:
    """Least squares y = a + b·x, both kept at 0 or above (a cost)."""
    (a, b), *_ = np.linalg.lstsq(np.column_stack([np.ones(len(x)), x]).astype(float), np.asarray(y, float), rcond=None)
    return max(0.0, float(a)), max(0.0, float(b))


def fit_profile(steps: pd.DataFrame, prefills: list[tuple[int, float]], threads: int) -> Profile:
    """The step-cost fit and per-setting tokens per pass from a replica's serve_steps (one run or several); the
    prefill fit from its requests' (prompt tokens, prefill seconds)."""
    if len(steps) < 8 or len(prefills) < 2:
        raise PhoenixError(
            f"a fleet plan needs a replica's measured steps and prefills: {len(steps)} steps (at least 8) and "
            f"{len(prefills)} timed prefills (at least 2) found"
        )
    # a step that also prefilled a chunk is priced by the requests' prefill fit, not by this one
    decode_only = steps[steps["prefill_tokens"] == 0]
    base, row = _line(decode_only["batch"] * decode_only["width"], decode_only["draft_s"] + decode_only["verify_s"])
    pre_base, pre_token = _line([n for n, _ in prefills], [t for _, t in prefills])
    keys = [setting_of(d, k, w) for d, k, w in zip(steps["drafter"], steps["k"], steps["width"])]
    frame = steps.assign(setting=keys, per_row=steps["emitted"] / steps["batch"].clip(lower=1))
    decode = frame[frame["emitted"] > 0]
    # a setting the tuner tried a handful of times has no distribution to draw from: it is not priced
    kept = {s: g for s, g in decode.groupby("setting") if len(g) >= MIN_STEPS}
    per_pass = {s: g["per_row"].tolist() for s, g in kept.items()}
    width = {s: float(g["width"].mean()) for s, g in kept.items()}
    return Profile(base, row, pre_base, pre_token, per_pass, width, len(steps), threads)


@dataclass
class Workload:
    prompt_tokens: list[int]
    output_tokens: list[int]


def simulate(
    p: Profile,
    setting: str,
    replicas: int,
    rate: float,
    work: Workload,
    n: int,
    max_batch: int = DEFAULT_MAX_BATCH,
    threads_each: int | None = None,
    seed: int = 0,
) -> Predicted:
    """One fleet at one Poisson rate (inf: every request at once), ``n`` requests drawn from ``work``."""
    if setting not in p.per_pass:
        raise PhoenixError(f"the replica never ran {setting!r}; measured: {', '.join(sorted(p.per_pass))}")
    rng = random.Random(seed)
    scale = p.threads / max(1, threads_each or p.threads)
    env = simpy.Environment()
    queues = [simpy.Store(env) for _ in range(replicas)]
    finished: list[dict] = []

    def arrivals():
        for i in range(n):
            if rate != float("inf"):
                yield env.timeout(rng.expovariate(rate))
            j = rng.randrange(len(work.output_tokens))
            req = {"arrive": env.now, "prompt": work.prompt_tokens[j], "out": max(1, work.output_tokens[j]), "made": 0}
            queues[i % replicas].put(req)

    def replica(q: simpy.Store):
        running: list[dict] = []
        while True:
            new = [] if running else [(yield q.get())]
            while len(running) + len(new) < max_batch and q.items:
                new.append((yield q.get()))
            batch = running + new
            width = p.width.get(setting, 1.0) if running else 1.0
            yield env.timeout(p.step_s(len(batch), width, [r["prompt"] for r in new]) * scale)
            for r in batch:
                got = 1 if r in new else max(1.0, rng.choice(p.per_pass[setting]))
                r["made"] = min(r["out"], r["made"] + got)
                r.setdefault("first", env.now)
                if r["made"] >= r["out"]:
                    r["end"] = env.now
                    finished.append(r)
            running = [r for r in batch if "end" not in r]

    env.process(arrivals())
    for q in queues:
        env.process(replica(q))
    while len(finished) < n:
        env.step()
    start = min(r["arrive"] for r in finished)
    wall = max(r["end"] for r in finished) - start
    tpots = [(r["end"] - r["first"]) / (r["out"] - 1) for r in finished if r["out"] > 1]
    return Predicted(
        setting,
        replicas,
        rate,
        sum(r["out"] for r in finished) / wall if wall > 0 else 0.0,
        1000 * statistics.median(r["first"] - r["arrive"] for r in finished),
        1000 * statistics.median(tpots) if tpots else 0.0,
        n,
    )


def predict(p: Profile, setting: str, replicas: int, rate: float, work: Workload, n: int, seeds: int = 20, **kw):
    """The median over ``seeds`` simulated sittings: one sitting of n requests is as noisy as a measured one."""
    runs = [simulate(p, setting, replicas, rate, work, n, seed=s, **kw) for s in range(seeds)]
    return Predicted(
        setting,
        replicas,
        rate,
        statistics.median(r.output_throughput for r in runs),
        statistics.median(r.ttft_ms_p50 for r in runs),
        statistics.median(r.tpot_ms_p50 for r in runs),
        n,
    )


def meets(pred: Predicted, slo_ms: dict[str, float]) -> bool:
    """Within every SLO at the median (the figures the plan is validated on): ttft and tpot, in ms."""
    return pred.ttft_ms_p50 <= slo_ms.get("ttft", float("inf")) and pred.tpot_ms_p50 <= slo_ms.get("tpot", float("inf"))


def cheapest(preds: list[Predicted], slo_ms: dict[str, float]) -> Predicted | None:
    """The fewest replicas that meet the SLO, and among those the highest throughput."""
    ok = [p for p in preds if meets(p, slo_ms)]
    return min(ok, key=lambda p: (p.replicas, -p.output_throughput)) if ok else None


def error(pred: float, measured: float) -> float:
    """The relative error of a prediction, |pred - measured| / measured."""
    return abs(pred - measured) / measured if measured else float("inf")
