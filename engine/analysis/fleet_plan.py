"""A fleet plan from one replica's measured tables: N replicas behind a router at a request rate, for each
speculation setting the replica ran, simulated as discrete events with SimPy.

Vidur (the field's serving simulator) takes profiled GPU operators and has no speculative step, so the plan uses
the two tables Phoenix measures itself instead:

- **step cost**, fitted by non-negative least squares on the replica's ``serve_steps``: seconds = base + row x
  batch + row-token x (batch x width), width being 1 + the longest draft, so a setting's verify cost is priced by the
  same fit as speculation off. A row costs beyond its tokens (attention reads its own context; a row's drafts share
  it): on SmolLM2 with 650-token prompts the two-term fit priced 8 rows at 53 ms against 66-69 measured, the
  three-term one at 72 (absolute error 9% against 6% a step, run #343); a new request's prefill adds base +
  per-token x its uncached prompt tokens, fitted on the requests' measured prefill time;
- **tokens per row per pass** for each setting (the drafter and k the steps ran with), the empirical distribution of
  ``emitted / batch`` over its steps: acceptance as the replica met it, drawn step by step.

Each replica is a SimPy process that runs Phoenix's loop: admit waiting requests up to ``max_batch`` (each looks its
prompt up in the cache as it is admitted), spend a step's token budget on the running rows' tokens and then on prompt
chunks of at most ``long_prefill`` tokens (a prompt joins the rows with its first token in the step that computes
its last chunk, and only then keeps its blocks), and emit for every running row. The router sends arrivals round
robin. Replicas sharing one machine share its cores: a replica measured with T threads and planned with t is priced
T / t times slower (compute-bound), an assumption the validation against measured fleets prices.

Each replica keeps Phoenix's prefix cache as llm-d's simulator keeps vLLM's (``Blocks``): a finished prefill's whole
blocks as one entry, least recently used first out past the budget; a new request's prefill is priced on its
uncached tokens only. A request's own text is its own (a sitting sends distinct prompts), so what it can share is
its tenant's system prompt, and only where the sitting's cache scenario lets requests share (not under cold).
"""

from __future__ import annotations

import random
import statistics
from collections import OrderedDict
from dataclasses import dataclass, field

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
    row_s: float  # a row's cost beyond its tokens (its own context's attention)
    row_token_s: float
    prefill_base_s: float  # a new request's prefill: base + per token, fitted on the requests' measured prefill_s
    prefill_token_s: float
    per_pass: dict[str, list[float]]  # setting -> emitted / batch of each of its steps
    width: dict[str, float]  # setting -> mean width of its steps
    steps: int
    threads: int  # the replica's torch threads when it was measured

    def step_s(self, batch: int, width: float, prompts: list[int]) -> float:
        """A step of ``batch`` rows ``width`` tokens wide that also prefills these new prompts (their uncached
        tokens)."""
        prefill = sum(self.prefill_base_s + self.prefill_token_s * n for n in prompts)
        return self.base_s + self.row_s * batch + self.row_token_s * batch * width + prefill


@dataclass
class Predicted:
    setting: str
    replicas: int
    rate: float
    output_throughput: float  # output tokens/s over the wall time, as `vllm bench serve` defines it
    ttft_ms_p50: float
    tpot_ms_p50: float
    requests: int
    cached_share: float = 0.0  # prompt tokens the replicas' prefix caches served, of all prompt tokens


def setting_of(drafter: str, k, width: int) -> str:
    """A step's speculation setting: none where nothing drafted (width 1), else the drafter and the tuner's k."""
    if width <= 1 or drafter in ("none", ""):
        return "none"
    return f"{drafter}-k{int(k)}" if k is not None and not pd.isna(k) else drafter


def _costs(columns: list, y) -> list[float]:
    """Least squares y = a + b1·x1 + ..., every coefficient kept at 0 or above (each is a cost)."""
    from scipy.optimize import nnls  # lazy: only a plan fits

    x = np.column_stack([np.ones(len(y)), *columns]).astype(float)
    coef, _ = nnls(x, np.asarray(y, float))
    return [float(c) for c in coef]


def loop_overhead(steps: pd.DataFrame) -> float:
    """The loop's own seconds a step beyond the forward passes it times (scheduling, sampling, streaming, recording):
    the median gap from a decode step's end to the next step's start where nothing else (a prefill, an idle wait)
    came between; 0 where the steps carry no clock."""
    if "at_s" not in steps or len(steps) < 2:
        return 0.0
    ordered = steps.sort_values("at_s")
    gap = ordered["at_s"].diff().shift(-1) - ordered["draft_s"] - ordered["verify_s"]
    kept = gap[(ordered["prefill_tokens"] == 0) & (gap >= 0) & (gap < 0.02)]
    return float(kept.median()) if len(kept) else 0.0


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
    batch, width = decode_only["batch"], decode_only["width"]
    base, row, row_token = _costs([batch, batch * width], decode_only["draft_s"] + decode_only["verify_s"])
    base += loop_overhead(steps)
    pre_base, pre_token = _costs([[n for n, _ in prefills]], [t for _, t in prefills])
    keys = [setting_of(d, k, w) for d, k, w in zip(steps["drafter"], steps["k"], steps["width"])]
    frame = steps.assign(setting=keys, per_row=steps["emitted"] / steps["batch"].clip(lower=1))
    decode = frame[frame["emitted"] > 0]
    # a setting the tuner tried a handful of times has no distribution to draw from: it is not priced
    kept = {s: g for s, g in decode.groupby("setting") if len(g) >= MIN_STEPS}
    per_pass = {s: g["per_row"].tolist() for s, g in kept.items()}
    widths = {s: float(g["width"].mean()) for s, g in kept.items()}
    return Profile(base, row, row_token, pre_base, pre_token, per_pass, widths, len(steps), threads)


@dataclass
class Workload:
    prompt_tokens: list[int]
    output_tokens: list[int]
    shared_tokens: list[int] = field(default_factory=list)  # each request's prefix it may share (0 or none: none)
    tenant: list[int] = field(default_factory=list)  # whose shared prefix it is (none: all one tenant's)
    arrive: list[float] = field(default_factory=list)  # when each was sent (a measured pass replayed); none: drawn


@dataclass
class Blocks:
    """One replica's prefix cache as engine.decode.prefix keeps it, with tokens for bytes: an entry per finished
    prefill holding its whole blocks, each block pointing at the newest entry that holds it; a lookup takes the
    deepest held block, leaving one token to compute; entries leave least recently used first past ``budget``."""

    budget: int  # tokens (the replica's prefix-cache bytes over its KV bytes a token)
    block: int  # tokens a block holds (engine.decode.prefix.BLOCK: the planner passes it in)
    entries: OrderedDict[int, tuple[int, int, int]] = field(default_factory=OrderedDict)  # id -> tenant, shared, length
    index: dict[tuple[int, int], int] = field(default_factory=dict)  # (tenant, shared block) -> entry id
    used: int = 0

    def lookup(self, tenant: int, shared: int, prompt: int) -> int:
        """The prompt tokens a new request takes from the cache."""
        best, length = None, 0
        for b in range(shared // self.block):
            held = self.index.get((tenant, b))
            if (b + 1) * self.block >= prompt or held is None:
                break
            best, length = held, (b + 1) * self.block
        if best is not None:
            self.entries.move_to_end(best)
        return length

    def store(self, entry: int, tenant: int, shared: int, prompt: int) -> None:
        """Keep a finished prefill's whole blocks."""
        length = prompt - prompt % self.block
        if not length or length > self.budget:
            return
        blocks = min(shared, length) // self.block
        self.entries[entry] = (tenant, blocks, length)
        for b in range(blocks):
            self.index[(tenant, b)] = entry
        self.used += length
        while self.used > self.budget:
            gone, (t, n, held) = self.entries.popitem(last=False)
            self.used -= held
            for b in range(n):
                if self.index.get((t, b)) == gone:
                    del self.index[(t, b)]


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
    cache_tokens: int = 0,
    block: int = 0,
    budget: int | None = None,
    long_prefill: int | None = None,
) -> Predicted:
    """One fleet at one Poisson rate (inf: every request at once), ``n`` requests drawn from ``work``; each replica
    with a prefix cache of ``cache_tokens`` in blocks of ``block`` tokens (0: none). A workload with arrival times
    is a measured pass replayed: its requests in order at the times they were sent (a 32-request pass's wall time is
    set by its own arrivals). ``budget`` and ``long_prefill``: the replica's step budget and prompt chunk (its
    `serve` settings; None: a prompt prefilled whole in the step it starts)."""
    if setting not in p.per_pass:
        raise PhoenixError(f"the replica never ran {setting!r}; measured: {', '.join(sorted(p.per_pass))}")
    rng = random.Random(seed)
    scale = p.threads / max(1, threads_each or p.threads)
    env = simpy.Environment()
    queues = [simpy.Store(env) for _ in range(replicas)]
    finished: list[dict] = []

    replay = bool(work.arrive)
    n = len(work.arrive) if replay else n

    def arrivals():
        for i in range(n):
            if replay:
                yield env.timeout(max(0.0, work.arrive[i] - env.now))
            elif rate != float("inf"):
                yield env.timeout(rng.expovariate(rate))
            j = i if replay else rng.randrange(len(work.output_tokens))
            req = {"id": i, "arrive": env.now, "prompt": work.prompt_tokens[j], "out": max(1, work.output_tokens[j])}
            shared = work.shared_tokens[j] if work.shared_tokens else 0
            tenant = work.tenant[j] if work.tenant else 0
            queues[i % replicas].put(req | {"made": 0, "shared": shared, "tenant": tenant})

    def replica(q: simpy.Store):
        running: list[dict] = []  # decoding rows
        prefilling: list[dict] = []  # admitted, their uncached prompt tokens going in chunk by chunk
        cache = Blocks(cache_tokens, block) if cache_tokens > 0 and block > 0 else None
        while True:
            if not running and not prefilling:
                prefilling.append(admit((yield q.get()), cache))
            while len(running) + len(prefilling) < max_batch and q.items:
                prefilling.append(admit((yield q.get()), cache))
            width = p.width.get(setting, 1.0)
            seconds = p.step_s(len(running), width, []) if running else 0.0
            # the rows' tokens first, then prompt chunks with what is left of the step's budget (Phoenix's step)
            left = (budget or 1 << 30) - int(len(running) * width)
            done: list[dict] = []
            for r in prefilling:
                if left <= 0 and (done or r is not prefilling[0]):
                    break
                size = min(r["left"], long_prefill or r["left"], max(1, left))
                seconds += p.prefill_token_s * size + (p.prefill_base_s if r["left"] == r["todo"] else 0.0)
                r["left"] -= size
                left -= size
                if not r["left"]:
                    done.append(r)
            yield env.timeout(seconds * scale)
            for r in running:
                r["made"] = min(r["out"], r["made"] + max(1.0, rng.choice(p.per_pass[setting])))
            for r in done:  # a prompt whose last chunk is in joins with its first token; its blocks are kept
                prefilling.remove(r)
                if cache:
                    cache.store(r["id"], r["tenant"], r["shared"], r["prompt"])
                r["made"], r["first"] = 1, env.now
                running.append(r)
            for r in running:
                if r["made"] >= r["out"]:
                    r["end"] = env.now
                    finished.append(r)
            running = [r for r in running if "end" not in r]

    def admit(r: dict, cache: Blocks | None) -> dict:
        """A request takes a slot: its cache lookup now (a prompt still prefilling elsewhere has stored nothing)."""
        r["cached"] = cache.lookup(r["tenant"], r["shared"], r["prompt"]) if cache else 0
        r["todo"] = r["left"] = max(1, r["prompt"] - r["cached"])
        return r

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
        sum(r["cached"] for r in finished) / max(1, sum(r["prompt"] for r in finished)),
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
        statistics.median(r.cached_share for r in runs),
    )


def meets(pred: Predicted, slo_ms: dict[str, float]) -> bool:
    """Within every SLO at the median (the figures the plan is validated on): ttft and tpot, in ms."""
    return pred.ttft_ms_p50 <= slo_ms.get("ttft", float("inf")) and pred.tpot_ms_p50 <= slo_ms.get("tpot", float("inf"))


def cheapest(preds: list[Predicted], slo_ms: dict[str, float]) -> Predicted | None:
    """The fewest replicas that meet the SLO, and among those the highest throughput."""
    ok = [p for p in preds if meets(p, slo_ms)]
    return min(ok, key=lambda p: (p.replicas, -p.output_throughput)) if ok else None


def naive(p: Profile, rate: float, work: Workload) -> tuple[float, float]:
    """The guess a plan must beat: every request's tokens at the arrival rate (rate x mean output tokens; none at an
    unbounded rate) and a TTFT of one unqueued, uncached prefill of the median prompt."""
    tokens = rate * statistics.mean(work.output_tokens) if rate != float("inf") else float("nan")
    return tokens, 1000 * p.step_s(1, 1.0, [int(statistics.median(work.prompt_tokens))])


def error(pred: float, measured: float) -> float:
    """The relative error of a prediction, |pred - measured| / measured."""
    return abs(pred - measured) / measured if measured else float("inf")
