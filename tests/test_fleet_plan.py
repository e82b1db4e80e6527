"""The fleet plan (engine.analysis.fleet_plan): the step-cost fit recovers known costs, the simulation gives the
figures queueing theory gives where it has an answer, and `fleet plan` names the cheapest fleet within an SLO."""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest

from engine.analysis import fleet_plan as fp
from engine.decode.prefix import BLOCK
from engine.errors import PhoenixError

pytestmark = pytest.mark.fast


def steps_frame(base=0.010, row=0.002, n=400, seed=0, per_row=0.003) -> pd.DataFrame:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        batch, k = rng.randint(1, 8), rng.choice([0, 3])
        width = 1 + k
        emitted = batch * (1 if k == 0 else rng.choice([1, 2, 3, 4]))
        verify = base + per_row * batch + row * batch * width
        drafter = "none" if k == 0 else "model"
        row_ = dict(step=i, batch=batch, width=width, drafter=drafter, k=k or None, draft_s=0.0, verify_s=verify)
        rows.append(row_ | dict(emitted=emitted, prefill_tokens=0))
    return pd.DataFrame(rows)


def test_the_fit_recovers_the_step_cost_and_each_settings_tokens_per_pass():
    p = fp.fit_profile(steps_frame(), [(10, 0.005 + 0.001 * 10), (100, 0.005 + 0.001 * 100)], threads=2)
    assert p.base_s == pytest.approx(0.010, abs=1e-6) and p.row_token_s == pytest.approx(0.002, abs=1e-7)
    assert p.row_s == pytest.approx(0.003, abs=1e-7)  # a row's own cost apart from its tokens
    assert p.prefill_base_s == pytest.approx(0.005) and p.prefill_token_s == pytest.approx(0.001)
    assert set(p.per_pass) == {"none", "model-k3"} and p.width["model-k3"] == 4
    assert sum(p.per_pass["model-k3"]) / len(p.per_pass["model-k3"]) == pytest.approx(2.5, abs=0.2)


def prefill_s(p: fp.Profile, tokens: int) -> float:
    return p.prefill_base_s + p.prefill_token_s * tokens


def test_one_request_at_a_time_takes_its_prefill_then_one_step_a_token():
    p = fp.fit_profile(steps_frame(), [(10, 0.015), (100, 0.105)], threads=2)
    work = fp.Workload([10], [33])
    pred = fp.simulate(p, "none", 1, 0.01, work, n=5)  # arrivals 100 s apart: never two at once
    assert pred.ttft_ms_p50 == pytest.approx(1000 * prefill_s(p, 10), rel=1e-6)  # the prefill gives the first token
    assert pred.tpot_ms_p50 == pytest.approx(1000 * p.step_s(1, 1, []), rel=1e-6)


def test_a_second_replica_on_the_same_cores_is_priced_at_half_the_threads_and_the_router_splits_the_load():
    p = fp.fit_profile(steps_frame(), [(10, 0.015), (100, 0.105)], threads=2)
    work = fp.Workload([10] * 4, [64] * 4)
    alone = fp.simulate(p, "none", 1, float("inf"), work, n=16, threads_each=2)
    shared = fp.simulate(p, "none", 2, float("inf"), work, n=16, threads_each=1)
    apart = fp.simulate(p, "none", 2, float("inf"), work, n=16, threads_each=2)
    assert shared.tpot_ms_p50 > alone.tpot_ms_p50  # each replica's step costs twice as much on one core
    assert apart.output_throughput > alone.output_throughput  # two machines: more throughput at the same rate
    assert apart.ttft_ms_p50 < alone.ttft_ms_p50


def test_speculation_that_accepts_lowers_tpot_and_the_cheapest_fleet_meets_the_slo():
    p = fp.fit_profile(steps_frame(), [(10, 0.015), (100, 0.105)], threads=2)
    work = fp.Workload([10] * 4, [64] * 4)
    off, on = (fp.predict(p, s, 1, 0.5, work, 16, seeds=5) for s in ("none", "model-k3"))
    assert on.tpot_ms_p50 < off.tpot_ms_p50
    best = fp.cheapest([off, on], {"tpot": (off.tpot_ms_p50 + on.tpot_ms_p50) / 2})
    assert best is on
    assert fp.cheapest([off, on], {"tpot": 0.001}) is None


def test_a_plan_without_measured_steps_or_a_setting_never_run_is_one_line():
    with pytest.raises(PhoenixError, match="measured steps"):
        fp.fit_profile(steps_frame(n=3), [(1, 0.1), (2, 0.2)], threads=2)
    p = fp.fit_profile(steps_frame(), [(10, 0.015), (100, 0.105)], threads=2)
    with pytest.raises(PhoenixError, match="never ran 'eagle3-k2'"):
        fp.simulate(p, "eagle3-k2", 1, 1.0, fp.Workload([1], [2]), n=2)


def test_the_plans_rates_are_read_as_engines_load_reads_them():
    from engine.engines.planning import _rates

    assert _rates("0.5,1,inf") == [0.5, 1.0, float("inf")]
    for bad in ("nan", "0", "-1", ",", "x"):
        with pytest.raises(PhoenixError, match="--rate"):
            _rates(bad)


def test_the_replicas_prefix_cache_serves_a_tenants_shared_blocks_and_never_a_requests_own():
    cache = fp.Blocks(budget=10_000, block=BLOCK)
    assert cache.lookup(0, 100, 140) == 0  # nothing held yet
    cache.store(1, 0, 100, 140)
    assert cache.lookup(0, 100, 150) == 96  # the shared prompt's whole blocks (6 of 16), never its last partial one
    assert cache.lookup(1, 100, 150) == 0  # another tenant's system prompt differs from its first block
    assert cache.lookup(0, 0, 150) == 0  # cold: a request shares nothing
    assert cache.lookup(0, 100, 96) == 80  # at least one token is left to compute (its logits give the first token)


def test_entries_leave_least_recently_used_first_past_the_budget():
    cache = fp.Blocks(budget=300, block=BLOCK)
    cache.store(1, 0, 64, 128)
    cache.store(2, 1, 64, 128)
    assert cache.lookup(0, 64, 100) == 64  # tenant 0 used again: tenant 1's entry is now the oldest
    cache.store(3, 2, 64, 128)  # 384 tokens held past 300: the least recently used entry leaves
    assert cache.lookup(1, 64, 100) == 0 and cache.lookup(0, 64, 100) == 64 and cache.used == 256
    cache.store(4, 0, 64, 1000)  # larger than the whole budget: never kept (as PrefixCache.store)
    assert 4 not in cache.entries


def test_a_shared_system_prompt_lowers_ttft_once_it_is_cached_and_cold_prompts_are_priced_whole():
    p = fp.fit_profile(steps_frame(), [(10, 0.015), (500, 0.505)], threads=2)
    shared = fp.Workload([520], [8], shared_tokens=[500], tenant=[0])
    cold = fp.Workload([520], [8])
    warm_pred = fp.simulate(p, "none", 1, 0.01, shared, n=6, cache_tokens=100_000, block=BLOCK)
    cold_pred = fp.simulate(p, "none", 1, 0.01, cold, n=6, cache_tokens=100_000, block=BLOCK)
    # 520 tokens in chunks of 256 over three steps: the same seconds as one forward, the first token after the last
    assert cold_pred.cached_share == 0 and cold_pred.ttft_ms_p50 == pytest.approx(1000 * prefill_s(p, 520))
    assert warm_pred.cached_share == pytest.approx(5 * 496 / (6 * 520))  # the first request of six misses
    assert warm_pred.ttft_ms_p50 == pytest.approx(1000 * prefill_s(p, 520 - 496))
    no_cache = fp.simulate(p, "none", 1, 0.01, shared, n=6, cache_tokens=0)
    assert no_cache.cached_share == 0 and no_cache.ttft_ms_p50 == pytest.approx(cold_pred.ttft_ms_p50)


def test_the_naive_guess_is_the_arrival_rate_times_the_tokens_and_one_unqueued_prefill():
    p = fp.fit_profile(steps_frame(), [(10, 0.015), (100, 0.105)], threads=2)
    tokens, ttft = fp.naive(p, 2.0, fp.Workload([10, 30, 50], [60, 64, 68]))
    assert tokens == pytest.approx(128.0) and ttft == pytest.approx(1000 * p.step_s(1, 1, [30]))
    assert math.isnan(fp.naive(p, float("inf"), fp.Workload([10], [64]))[0])  # no guess at an unbounded rate


def test_a_source_replica_that_served_the_measured_fleet_is_in_sample():
    from datetime import datetime, timedelta
    from types import SimpleNamespace

    from engine.engines.planning import in_sample

    t0 = datetime(2026, 12, 5, 20)
    load = SimpleNamespace(created_at=t0 + timedelta(minutes=5), config={"load": {"url": "http://127.0.0.1:8030/v1"}})
    replica = {"phoenix_serve": {"router": "round_robin@http://127.0.0.1:8030"}}
    served = SimpleNamespace(created_at=t0, finished_at=t0 + timedelta(minutes=9), config=replica)
    before = SimpleNamespace(created_at=t0 - timedelta(hours=1), finished_at=t0, config=replica)
    alone = SimpleNamespace(created_at=t0, finished_at=None, config={"phoenix_serve": {"router": ""}})
    assert in_sample(served, load) and not in_sample(before, load) and not in_sample(alone, load)


def test_a_replica_is_priced_from_the_source_measured_at_its_own_thread_count():
    from engine.engines import planning

    two = fp.fit_profile(steps_frame(), [(10, 0.015), (100, 0.105)], threads=2)
    one = fp.fit_profile(steps_frame(), [(10, 0.02), (100, 0.15)], threads=1)
    profiles = {1: one, 2: two}
    assert planning.profile_for(profiles, 1) is one  # two replicas on two cores: the 1-thread measurement
    assert planning.profile_for(profiles, 2) is two
    assert planning.profile_for({2: two}, 1) is two  # none at 1 thread: scaled from the 2-thread one


def test_a_validation_keeps_the_plans_of_other_sources_beside_its_own(store):
    import pandas as pd

    from engine.engines import planning
    from engine.export.published import Figures, render

    (run_id,) = store.add_runs([("through the router", {}, "smollm2", None, [])])

    def check(error: float) -> pd.DataFrame:
        row = {"run": run_id, "replicas": 2, "rate": 4.0, "variant": "none", "out of sample": True}
        row |= {"req/s measured": 1.5, "tok/s measured": 96.0, "tok/s predicted": 96.0 * (1 + error)}
        row |= {"tok/s error": error, "TTFT p50 measured (ms)": 2000.0, "TTFT p50 predicted (ms)": 2000.0}
        return pd.DataFrame([row | {"TTFT error": 0.0}])

    planning.record_validation(store, check(0.15), "343")
    planning.record_validation(store, check(0.39), "343,427")
    planning.record_validation(store, check(0.14), "343")  # the same sources again: replaced, not added
    kept = store.get_run(run_id).config["fleet_plan"]
    assert sorted((r["source"], r["tok/s error"]) for r in kept) == [("343", 0.14), ("343,427", 0.39)]
    with pytest.raises(Exception, match="keeps plans from sources 343, 343,427: name one"):
        render(f"<!-- generated: fleet-plan {run_id} --><!-- /generated -->", Figures(store))
    text = render(f"<!-- generated: fleet-plan {run_id} 343,427 --><!-- /generated -->", Figures(store))
    assert "worst throughput error 39%" in text


def test_a_prefill_is_fitted_on_the_tokens_its_prefix_cache_did_not_serve():
    from types import SimpleNamespace

    from engine.engines import planning

    def req(prompt, cached, prefill, error=None):
        return SimpleNamespace(prompt_tokens=prompt, cached_tokens=cached, prefill_s=prefill, error=error)

    rows = [req(700, 512, 0.19), req(650, 512, 0.14), req(600, None, 0.60), req(600, 0, None), req(9, 0, 1, "x")]
    assert planning.prefill_points(rows) == [(188, 0.19), (138, 0.14), (600, 0.60)]
    profile = fp.fit_profile(steps_frame(), planning.prefill_points(rows), threads=2)
    assert profile.prefill_token_s == pytest.approx(0.001, rel=0.05)  # 1 ms a computed token, as the rows say


def test_a_request_admitted_while_the_first_still_prefills_its_system_prompt_finds_nothing_cached():
    """Phoenix looks a prompt up as it is admitted and keeps a prompt's blocks once its last chunk is in: requests
    that arrive together all prefill their shared prefix whole; ones that arrive after the first has finished hit."""
    p = fp.fit_profile(steps_frame(), [(10, 0.015), (500, 0.505)], threads=2)
    work = fp.Workload([800] * 4, [8] * 4, shared_tokens=[768] * 4, tenant=[0] * 4, arrive=[0.0, 0.01, 0.02, 60.0])
    pred = fp.simulate(p, "none", 1, 1.0, work, n=4, cache_tokens=100_000, block=BLOCK, long_prefill=256)
    assert pred.cached_share == pytest.approx(768 / (4 * 800))  # three arrived during the first's chunks: only the last


def test_repeated_passes_at_one_rate_are_judged_on_their_median_with_their_range(store):
    import pandas as pd

    from engine.engines import planning
    from engine.export.published import Figures, render

    ids = store.add_runs([(f"through the router, pass {i}", {}, "smollm2", None, []) for i in range(3)])

    def row(run_id: int, tokens: float, ttft: float, out: bool = True) -> pd.DataFrame:
        said = {"run": run_id, "replicas": 1, "rate": 4.0, "variant": "none", "out of sample": out}
        said |= {"req/s measured": 1.6, "tok/s measured": tokens, "tok/s predicted": 100.0, "tok/s error": 0.0}
        said |= {"TTFT p50 measured (ms)": ttft, "TTFT p50 predicted (ms)": 4000.0, "TTFT error": 0.0}
        return pd.DataFrame([said])

    for run_id, tokens, ttft in zip(ids, (90.0, 104.0, 110.0), (6000.0, 4400.0, 3000.0)):
        planning.record_validation(store, row(run_id, tokens, ttft), "553")
    text = render(f"<!-- generated: fleet-passes {ids[0]}-{ids[-1]} 553 --><!-- /generated -->", Figures(store))
    assert "| 1 | 4 | none | 3 | 104.0 (90.0-110.0) | 100.0 (4%) | 4400 (3000-6000) | 4000 (9%) |" in text
    assert "met at 1 of 1 rows" in text  # each pass alone misses by up to 33%; the median is what a plan predicts
    with pytest.raises(Exception, match="no rate measured in two passes"):
        render(f"<!-- generated: fleet-passes {ids[0]} 553 --><!-- /generated -->", Figures(store))
