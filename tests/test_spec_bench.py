"""Spec-Bench as a workload: a seeded half held out per column, second turns with the target's own first answer in
context, and the leaderboard's per-column table with n and Welch's p in every cell."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

import pandas as pd
import pytest
from helpers import bench_cfg, migrated, request_record

from db.store import Store
from engine.bench.leaderboard import leaderboard, markdown
from engine.bench.report import spec_bench
from engine.bench.run import execute
from engine.bench.setup import create_run
from engine.errors import PhoenixError
from engine.prompts.sets import SPEC_BENCH_ORDER, load, spec_bench_column_of


def test_the_halves_are_disjoint_cover_all_480_questions_and_hold_out_half_of_each_column():
    train, test = load("spec-bench-train"), load("spec-bench-test")
    assert not {p.id for p in train} & {p.id for p in test}
    firsts = [p for p in load("spec-bench") if p.turn in (None, 1)]
    assert len(firsts) == 480 and len(load("spec-bench")) == 560  # MT-bench's 80 questions have a second turn
    assert Counter(spec_bench_column_of(p.id) for p in test if p.turn != 2) == {c: 40 for c in SPEC_BENCH_ORDER}


def test_every_second_turn_follows_its_first_and_names_it():
    prompts = load("spec-bench-test")
    seconds = [(before, p) for before, p in zip(prompts, prompts[1:]) if p.turn == 2]
    # MT-bench's 80 questions have a second turn; the test half holds half of them, each after its first turn
    assert len(seconds) == 40 and sum(p.turn == 2 for p in prompts) == 40
    assert prompts[0].turn != 2
    for before, p in seconds:
        assert p.parent == before.id and p.id == f"{before.id}-t2" and p.earlier == (before.text,)
        assert p.category == before.category and before.turn == 1


def test_a_limit_per_column_takes_the_first_questions_of_every_column_with_their_second_turns():
    first = load("spec-bench-test", per_column=2)
    assert Counter(spec_bench_column_of(p.id) for p in first if p.turn != 2) == {c: 2 for c in SPEC_BENCH_ORDER}
    assert sum(p.turn == 2 for p in first) == 2


def test_a_limit_takes_every_column_in_turn():
    first = load("spec-bench-test", limit=6)
    assert {spec_bench_column_of(p.id) for p in first} == {"math", "multiturn", "qa", "rag", "summarization"}


@pytest.mark.parametrize(
    "name,n,category",
    [
        ("spec-bench-writing", 20, "writing"),
        ("spec-bench-translation", 80, "translation"),
        ("spec-bench-math_reasoning", 80, "math_reasoning"),
    ],
)
def test_a_category_set_holds_only_that_category(name, n, category):
    prompts = load(name)
    assert len(prompts) == n and {p.category for p in prompts} == {category}


def test_a_per_category_limit_on_another_set_is_one_clear_error():
    with pytest.raises(PhoenixError, match="--limit-per-column works on Spec-Bench sets"):
        load("humaneval-test", per_column=2)


def test_the_split_is_the_same_on_every_call():
    assert [p.id for p in load("spec-bench-test")] == [p.id for p in load("spec-bench-test")]


@pytest.mark.parametrize(
    "prompt_id,column",
    [
        ("rag-487", "rag"),
        ("multiturn-81", "multiturn"),
        ("multiturn-81-t2", "multiturn"),
        ("HumanEval/3", None),
        ("rag-x", None),
        ("other-12", None),
    ],
)
def test_a_prompt_id_names_its_column_only_when_it_is_a_spec_bench_id(prompt_id, column):
    assert spec_bench_column_of(prompt_id) == column


def _frame(rows):
    return pd.DataFrame(rows, columns=["prompt_id", "mode", "tokens_per_s", "passes", "accepted"])


def test_the_leaderboard_pairs_each_prompt_with_its_own_target_and_tests_every_cell():
    rows = []
    for column, speed in (("qa", 2.0), ("rag", 1.5)):
        for i, base in enumerate((10.0, 11.0, 12.0)):
            rows.append((f"{column}-{i}", "target", base, 20, 0))
            rows.append((f"{column}-{i}", "ngram_4", base * speed, 10, 10))
    table = leaderboard(_frame(rows)).set_index(["mode", "column"])
    assert table.loc[("ngram_4", "qa"), "speedup"] == pytest.approx(2.0)
    assert table.loc[("ngram_4", "rag"), "n"] == 3
    assert table.loc[("ngram_4", "overall"), "mean_accepted"] == pytest.approx(2.0)  # 1 + 30 accepted / 30 passes
    assert table.loc[("target", "overall"), "mean_accepted"] == pytest.approx(1.0)
    assert table.loc[("ngram_4", "qa"), "p_value"] < 0.05 and table.loc[("target", "qa"), "verdict"] == "reference"
    text = markdown(leaderboard(_frame(rows)))
    assert "| mode | QA | RAG | Mean accepted tokens | Overall |" in text
    assert re.search(r"\| ngram_4 \| 2\.00x\* \(n=3, p[<=]0\.\d+\)", text)


def test_the_category_recorded_with_a_request_decides_its_column():
    frame = _frame([("q1", "target", 10.0, 10, 0), ("q1", "ngram_4", 20.0, 5, 5)]).assign(category="rag")
    assert set(leaderboard(frame)["column"]) == {"rag", "overall"}


def test_a_run_on_other_prompts_has_no_leaderboard(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    migrated(url)
    store = Store(url)
    run = store.create_run("he", {"bench": {"modes": ["target", "model_4"]}}, "t", "d", 2, status="done")
    store.add_requests([request_record(run.id, 0, mode="target", k=0), request_record(run.id, 1)])
    assert spec_bench(store, run.id).empty


def test_the_store_feeds_the_leaderboard_with_turns_and_categories(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    migrated(url)
    store = Store(url)
    run = store.create_run("sb", {"bench": {"modes": ["target", "model_4"]}}, "t", "d", 4, status="done")
    recs = [
        replace(
            request_record(run.id, i * 2 + j, mode=mode, k=k, latency=lat), prompt_id=pid, turn=turn, category="writing"
        )
        for i, (pid, turn) in enumerate((("multiturn-81", 1), ("multiturn-81-t2", 2)))
        for j, (mode, k, lat) in enumerate((("target", 0, 1.0), ("model_4", 4, 0.5)))
    ]
    store.add_requests(recs)
    table = spec_bench(store, run.id).set_index(["mode", "column"])
    assert table.loc[("model_4", "multiturn"), "speedup"] == pytest.approx(2.0)
    assert table.loc[("model_4", "multiturn"), "n"] == 2
    assert {r.turn for r in store.requests(run.id)} == {1, 2}


@pytest.fixture
def two_turns(tiny_dirs):
    """The first writing question of Spec-Bench and its second turn, raw (the tiny tokenizer has no template)."""
    return dict(prompts="spec-bench-writing", limit=2, max_new_tokens=8, prompt_format="raw")


def test_a_second_turn_carries_the_targets_own_first_answer(store, tiny_dirs, decoder, two_turns):
    cfg = bench_cfg(tiny_dirs, None, modes=["target", "ngram_2"], **two_turns)
    run = create_run(store, cfg)
    assert execute(store, run.id, cfg, decoder=decoder, progress=False) == "done"
    rows = store.requests(run.id)
    first, second = load("spec-bench-writing", limit=2)
    answer = next(r.output_text for r in rows if r.mode == "target" and r.prompt_id == first.id)
    expected = decoder.encode(second.text, "raw", ((first.text, answer),))
    assert {r.prompt_tokens for r in rows if r.prompt_id == second.id} == {len(expected)}
    assert {(r.prompt_id, r.turn, r.category) for r in rows} == {(first.id, 1, "writing"), (second.id, 2, "writing")}
    assert all(r.identical for r in rows)


def test_without_a_target_mode_the_first_answer_is_decoded_target_only_once(store, tiny_dirs, decoder, two_turns):
    with_target = bench_cfg(tiny_dirs, None, modes=["target", "ngram_2"], **two_turns)
    alone = bench_cfg(tiny_dirs, None, modes=["ngram_2"], **two_turns)
    tokens = []
    for cfg in (with_target, alone):
        run = create_run(store, cfg)
        execute(store, run.id, cfg, decoder=decoder, progress=False)
        tokens.append({r.prompt_tokens for r in store.requests(run.id) if r.turn == 2})
    assert tokens[0] == tokens[1] and len(tokens[0]) == 1


def test_the_shipped_questions_are_the_file_the_provenance_note_names():
    import hashlib

    from engine.prompts.sets import SPEC_BENCH

    note = (SPEC_BENCH.parent / "PROVENANCE.md").read_text(encoding="utf-8")
    assert hashlib.sha256(SPEC_BENCH.read_bytes()).hexdigest() in note
    assert (SPEC_BENCH.parent / "LICENSE").read_text(encoding="utf-8").lstrip().startswith("Apache License")


def test_a_served_run_gets_the_leaderboard_against_its_own_no_speculation_server():
    rows = []
    for i, base in enumerate((10.0, 11.0, 12.0)):
        rows.append((f"qa-{i}", "llamacpp-none_c1", base, 0, 0))
        rows.append((f"qa-{i}", "llamacpp-ngram-mod_c1", base * 1.5, 10, 5))
    table = leaderboard(_frame(rows)).set_index(["mode", "column"])
    assert table.loc[("llamacpp-ngram-mod_c1", "qa"), "speedup"] == pytest.approx(1.5)
    assert table.loc[("llamacpp-none_c1", "qa"), "verdict"] == "reference"
    assert "| llamacpp-none_c1 | 1.00x (n=3) |" in markdown(leaderboard(_frame(rows)))
