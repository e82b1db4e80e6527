"""The fleet plan (engine.analysis.fleet_plan): the step-cost fit recovers known costs, the simulation gives the
figures queueing theory gives where it has an answer, and `fleet plan` names the cheapest fleet within an SLO."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from engine.analysis import fleet_plan as fp
from engine.errors import PhoenixError

pytestmark = pytest.mark.fast


def steps_frame(base=0.010, row=0.002, n=400, seed=0) -> pd.DataFrame:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        batch, k = rng.randint(1, 8), rng.choice([0, 3])
        width = 1 + k
        emitted = batch * (1 if k == 0 else rng.choice([1, 2, 3, 4]))
        verify = base + row * batch * width
        drafter = "none" if k == 0 else "model"
        row_ = dict(step=i, batch=batch, width=width, drafter=drafter, k=k or None, draft_s=0.0, verify_s=verify)
        rows.append(row_ | dict(emitted=emitted, prefill_tokens=0))
    return pd.DataFrame(rows)


def test_the_fit_recovers_the_step_cost_and_each_settings_tokens_per_pass():
    p = fp.fit_profile(steps_frame(), [(10, 0.005 + 0.001 * 10), (100, 0.005 + 0.001 * 100)], threads=2)
    assert p.base_s == pytest.approx(0.010, abs=1e-6) and p.row_token_s == pytest.approx(0.002, abs=1e-7)
    assert p.prefill_base_s == pytest.approx(0.005) and p.prefill_token_s == pytest.approx(0.001)
    assert set(p.per_pass) == {"none", "model-k3"} and p.width["model-k3"] == 4
    assert sum(p.per_pass["model-k3"]) / len(p.per_pass["model-k3"]) == pytest.approx(2.5, abs=0.2)


def test_one_request_at_a_time_takes_its_prefill_then_one_step_a_token():
    p = fp.fit_profile(steps_frame(), [(10, 0.015), (100, 0.105)], threads=2)
    work = fp.Workload([10], [33])
    pred = fp.simulate(p, "none", 1, 0.01, work, n=5)  # arrivals 100 s apart: never two at once
    first = p.step_s(1, 1, [10])
    assert pred.ttft_ms_p50 == pytest.approx(1000 * first, rel=1e-6)
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
