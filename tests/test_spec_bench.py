"""Spec-Bench as a prompt set: a seeded half held out per column, and per-column speedups from the prompt ids."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from helpers import migrated, request_record

from db.store import Store
from engine.bench.report import by_column, column_markdown
from engine.decode.prompts import SPEC_BENCH_ORDER, load, spec_bench_column_of


def test_the_halves_are_disjoint_cover_all_480_questions_and_hold_out_half_of_each_column():
    train, test = load("spec-bench-train"), load("spec-bench-test")
    assert not {p.id for p in train} & {p.id for p in test}
    assert len(train) + len(test) == len(load("spec-bench")) == 480
    assert Counter(spec_bench_column_of(p.id) for p in test) == {c: 40 for c in SPEC_BENCH_ORDER}


def test_a_limit_takes_every_column_in_turn():
    first = load("spec-bench-test", limit=12)
    assert Counter(spec_bench_column_of(p.id) for p in first) == {c: 2 for c in SPEC_BENCH_ORDER}


def test_the_split_is_the_same_on_every_call():
    assert [p.id for p in load("spec-bench-test")] == [p.id for p in load("spec-bench-test")]


@pytest.mark.parametrize("prompt_id,column", [("rag-487", "rag"), ("multiturn-81", "multiturn"),
                                              ("HumanEval/3", None), ("rag-x", None), ("other-12", None)])
def test_a_prompt_id_names_its_column_only_when_it_is_a_spec_bench_id(prompt_id, column):
    assert spec_bench_column_of(prompt_id) == column


def test_per_column_speedups_pair_each_prompt_with_its_own_target_request(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    migrated(url)
    store = Store(url)
    run = store.create_run("sb", {"bench": {"modes": ["target", "fixed_4"]}}, "t", "d", 8, status="done")
    recs, seq = [], 0
    for column, speed in (("qa", 2.0), ("rag", 1.5)):
        for i in range(2):
            pid = f"{column}-{i}"
            recs.append(replace(request_record(run.id, seq, mode="target", k=0, latency=1.0), prompt_id=pid))
            recs.append(replace(request_record(run.id, seq + 1, mode="fixed_4", latency=1.0 / speed), prompt_id=pid))
            seq += 2
    store.add_requests(recs)
    table = by_column(store, run.id)
    assert list(table) == ["qa", "rag"]
    assert table["qa"]["fixed_4"].median == pytest.approx(2.0) and table["rag"]["fixed_4"].n == 2
    assert "| fixed_4 | 2.00x (n=2) | 1.50x (n=2) |" in column_markdown(table)


def test_a_run_on_other_prompts_has_no_column_table(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    migrated(url)
    store = Store(url)
    run = store.create_run("he", {"bench": {"modes": ["target", "fixed_4"]}}, "t", "d", 2, status="done")
    store.add_requests([request_record(run.id, 0, mode="target", k=0), request_record(run.id, 1)])
    assert by_column(store, run.id) == {}
