"""The Fleet page's figures (engine.analysis.fleet): replicas grouped by the fleet they name, the router's address
matched to the load runs sent to it, each replica's load and hit rate over time, and the plan's prediction kept
beside the measurement."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace

import pandas as pd
import pytest

from engine.analysis import fleet as F

pytestmark = pytest.mark.fast


def at(minute: int) -> datetime:
    return datetime(2026, 12, 4, 3, minute)


def served(run_id: int, name: str, fleet: str, router: str, start: int = 0, end: int | None = 10) -> SimpleNamespace:
    cfg = {"phoenix_serve": {"fleet": fleet, "router": router}}
    finished = None if end is None else at(end)
    return SimpleNamespace(id=run_id, name=name, config=cfg, target="smollm2", status="done", created_at=at(start),
                           finished_at=finished)  # fmt: skip


def load(run_id: int, name: str, url: str, minute: int) -> SimpleNamespace:
    return SimpleNamespace(id=run_id, name=name, config={"load": {"url": url}}, created_at=at(minute))


def test_replicas_group_by_the_fleet_they_name_and_load_runs_by_the_router_address():
    runs = [
        served(3, "a replica 1", "a", "cache_aware@http://127.0.0.1:8100"),
        served(2, "a replica 0", "a", "cache_aware@http://127.0.0.1:8100"),
        served(4, "b replica 0", "b", "round_robin@http://127.0.0.1:8200", start=20, end=None),
        load(5, "through a", "http://127.0.0.1:8100/v1", 5),
        load(6, "elsewhere", "http://127.0.0.1:8000", 5),
        load(8, "a later fleet on a's port", "http://127.0.0.1:8100", 30),
        load(9, "through b, still running", "http://127.0.0.1:8200", 40),
        SimpleNamespace(id=7, name="plain serve", config={"phoenix_serve": {"fleet": ""}}, created_at=at(1)),
    ]
    found = F.fleets(runs)
    assert [(f.name, f.policy, [r.id for r in f.replicas]) for f in found] == [
        ("b", "round_robin", [4]),  # newest first
        ("a", "cache_aware", [2, 3]),  # replica 0 first
    ]
    assert [r.id for r in F.through_router(runs, found[1])] == [5]
    assert [r.id for r in F.through_router(runs, found[0])] == [9]


def test_load_and_hit_rate_over_time_are_per_replica():
    steps = {"r0": pd.DataFrame({"at_s": [0.5, 1.0, 6.0, 7.0], "batch": [1, 3, 2, 2]}), "r1": pd.DataFrame()}
    load = F.load_over_time(steps)
    assert load[["seconds", "running"]].values.tolist() == [[0.0, 2.0], [5.0, 2.0]]
    requests = {
        "r0": pd.DataFrame({"seq": [2, 1, 3], "error": [None, None, "boom"], "cached_tokens": [16, 0, 16]}),
    }
    hits = F.hit_rate_over_time(requests)
    assert hits["hit rate so far"].tolist() == [0.0, 0.5]  # a failed request counts in no rate


def test_a_replica_row_counts_failures_apart_and_the_plan_rows_come_back_with_their_run():
    requests = pd.DataFrame({"error": [None, None, "replica died"], "ttft_s": [0.1, 0.3, None]})
    row = F.replica_row(served(1, "r0", "a", ""), requests, [(16, 32, 0.1), (0, 32, 0.3)])
    assert (row["answered"], row["failed"], row["prefix hit rate"], row["TTFT p50 (ms)"]) == (2, 1, 0.5, 200.0)
    measured = [SimpleNamespace(id=9, config={"fleet_plan": [{"replicas": 2, "tok/s error": 0.05}]})]
    assert F.plan_against_measured(measured).to_dict("records") == [{"replicas": 2, "tok/s error": 0.05, "run": 9}]


def test_a_replica_that_answered_nothing_draws_no_line_and_no_error():
    assert F.hit_rate_over_time({"r0": pd.DataFrame()}).empty
