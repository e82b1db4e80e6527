"""The per-prompt oracle in every comparison (report, Run page, Policies page) and a hybrid's passes by source,
from a run through the store to the page."""

from __future__ import annotations

import random

import pandas as pd
import pytest
import torch
from apptest import chart_frames, charts, open_page
from helpers import app_record, bench_cfg, migrated, run_cli
from test_eagle3 import random_head

from db.store import Store
from engine.analysis.oracle import oracle_table
from engine.analysis.sources import source_passes
from engine.bench.report import oracle, sources
from engine.bench.run import execute
from engine.bench.setup import create_run
from engine.decode.decoder import Decoder
from engine.decode.eagle3 import save_head
from engine.decode.loading import fingerprint, load_pair

HAND = pd.DataFrame(
    [
        ("p1", "target", 10.0),
        ("p1", "ngram_8", 20.0),
        ("p1", "eagle3_3", 15.0),
        ("p1", "bandit", 18.0),
        ("p2", "target", 10.0),
        ("p2", "ngram_8", 11.0),
        ("p2", "eagle3_3", 16.0),
        ("p2", "bandit", 12.0),
        ("p3", "target", 10.0),
        ("p3", "ngram_8", 9.0),
        ("p3", "eagle3_3", 8.0),
        ("p3", "bandit", 10.0),
        ("p4", "ngram_8", 30.0),  # a prompt not every fixed mode answered: the oracle leaves it out
    ],
    columns=["prompt_id", "mode", "tokens_per_s"],
)


def test_the_oracle_takes_the_fastest_fixed_mode_per_prompt_and_shares_are_paired_per_prompt():
    table = oracle_table(HAND).set_index("mode")
    # best per prompt: ngram_8 (20), eagle3_3 (16), target (10): 2.0x, 1.6x, 1.0x target; median 1.6x
    assert table.loc["oracle", "x reference"] == pytest.approx(1.6) and table.loc["oracle", "oracle picks"] == 3
    assert table.loc["oracle", "n"] == 3  # p4 left out
    # bandit: 18/20, 12/16, 10/10 of the oracle
    assert table.loc["bandit", "share of oracle"] == pytest.approx(0.9)
    assert table.loc["bandit", "share p25"] == pytest.approx(0.825) and pd.isna(table.loc["bandit", "oracle picks"])
    assert [table.loc[m, "oracle picks"] for m in ("ngram_8", "eagle3_3", "target")] == [1, 1, 1]
    assert table.loc["target", "share of oracle"] == pytest.approx(10 / 16)


def test_a_run_with_one_fixed_mode_has_no_oracle():
    assert oracle_table(HAND[HAND["mode"].isin(["target", "bandit"])]).empty


def hybrid_request(run_id: int, seq: int, rng, prompt: int):
    rec = app_record(run_id, seq, "hybrid_8", 8, rng, prompt_id=f"HumanEval/{prompt}")
    rec.per_source = {
        "suffix": {"passes": 3, "proposed": [3, 3, 2], "accepted": [3, 2, 1], "reached": [3, 3, 2]},
        "eagle3": {"passes": 9, "proposed": [9, 9, 9], "accepted": [5, 2, 1], "reached": [9, 5, 2]},
    }
    return rec


@pytest.fixture
def hybrid_db(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'hybrid.db'}"
    migrated(url)
    store = Store(url)
    run = store.create_run(
        "hybrid",
        {"bench": {"modes": ["target", "eagle3_3", "hybrid_8"], "drafter": "eagle3"}},
        "t",
        "h",
        6,
        status="done",
    )
    rng = random.Random(1)
    recs = []
    for i in range(3):
        recs += [
            app_record(run.id, 3 * i, "target", 0, rng, prompt_id=f"HumanEval/{i}"),
            app_record(run.id, 3 * i + 1, "eagle3_3", 3, rng, prompt_id=f"HumanEval/{i}"),
            hybrid_request(run.id, 3 * i + 2, rng, i),
        ]
    store.add_requests(recs)
    monkeypatch.setenv("PHOENIX_DB", url)
    return store, run.id


def test_per_source_counts_survive_the_store_and_sum_across_requests(hybrid_db):
    store, run_id = hybrid_db
    rows = [r for r in store.requests(run_id) if r.mode == "hybrid_8"]
    assert rows[0].per_source["eagle3"]["accepted"] == [5, 2, 1]
    assert all(r.per_source is None for r in store.requests(run_id) if r.mode != "hybrid_8")
    table = sources(store, run_id).set_index("source")
    assert table.loc["suffix", "passes"] == 9 and table.loc["eagle3", "passes"] == 27
    assert table.loc["suffix", "share of passes"] == pytest.approx(0.25)
    assert table.loc["suffix", "acceptance"] == pytest.approx(6 / 8)
    assert table.loc["eagle3", "accepted per pass"] == pytest.approx(8 / 9)


@pytest.mark.pages
def test_the_run_page_shows_the_oracle_and_each_sources_acceptance_as_the_report_computes_them(hybrid_db):
    store, run_id = hybrid_db
    at = open_page("run", run=run_id)
    by_columns = {tuple(d.value.columns): d.value for d in at.dataframe}
    shown = next(v for k, v in by_columns.items() if "share of oracle (IQR)" in k).set_index("mode")
    expected = oracle(store, run_id).set_index("mode")
    for mode in expected.index:
        picks = expected.loc[mode, "oracle picks"]
        assert str(shown.loc[mode, "oracle picks"]) == ("–" if pd.isna(picks) else str(picks))
        if mode != "oracle":
            assert shown.loc[mode, "share of oracle (IQR)"].startswith(f"{expected.loc[mode, 'share of oracle']:.3f}")
    per_source = next(v for k, v in by_columns.items() if "share of passes" in k).set_index("source")
    assert per_source.loc["suffix", "acceptance"] == pytest.approx(6 / 8)
    index = next(i for i, spec in enumerate(charts(at)) if "hybrid_8 · suffix" in str(chart_frames(at, i)[0]))
    curve = chart_frames(at, index)[0]
    rates = curve[(curve["arm"] == "hybrid_8 · eagle3") & (curve["kind"] == "conditional")]
    assert rates["rate"].round(4).tolist() == [round(5 / 9, 4), round(2 / 5, 4), round(1 / 2, 4)]


@pytest.mark.pages
def test_the_policies_page_shows_each_policys_share_of_the_oracle(app_db):
    at = open_page("policies", run=1)
    table = next(d.value for d in at.dataframe if "share of oracle (IQR)" in d.value.columns).set_index("mode")
    expected = oracle(app_db, 1).set_index("mode")
    assert {"oracle", "bandit"} <= set(table.index)
    assert table.loc["bandit", "share of oracle (IQR)"].startswith(f"{expected.loc['bandit', 'share of oracle']:.3f}")


def test_report_prints_the_oracle_under_the_results_and_by_oracle_as_a_table(app_db, capsys):
    code, out, _ = run_cli(capsys, "report", "1", "--db", app_db.url)
    assert code == 0 and "oracle (best fixed mode per prompt, in hindsight, 5 prompts)" in out
    code, out, err = run_cli(capsys, "report", "1", "--by", "oracle", "--format", "csv", "--db", app_db.url)
    frame = pd.read_csv(__import__("io").StringIO(out))
    assert code == 0 and frame["mode"].iloc[0] == "oracle" and "in hindsight" in err
    assert frame.set_index("mode").loc["bandit", "share of oracle"] == pytest.approx(
        oracle(app_db, 1).set_index("mode").loc["bandit", "share of oracle"]
    )


def test_by_source_on_a_run_without_a_hybrid_is_one_clear_line(app_db, capsys):
    code, _, err = run_cli(capsys, "report", "1", "--by", "source", "--db", app_db.url)
    assert code != 0 and "needs a hybrid_<k> mode" in err and len(err.strip().splitlines()) == 1


def test_a_bench_run_of_hybrid_and_confident_modes_records_every_source_and_equals_target_only(
    store, tiny_dirs, prompt_file, tmp_path
):
    d = tiny_dirs["qwen3"]
    dec = Decoder(load_pair(d["target"], None, "cpu", "float32"))
    counts: dict[int, int] = {}
    for tok in dec.run(dec.encode("def add(a, b):\n    return a + b\n"), 0, 40).output_ids:
        counts[tok] = counts.get(tok, 0) + 1
    save_head(random_head(dec.pair.target, sorted(counts)[:3]), tmp_path / "head", torch.float32)
    cfg = bench_cfg(
        tiny_dirs,
        prompt_file,
        draft=str(tmp_path / "head"),
        drafter="eagle3",
        limit=4,
        max_new_tokens=24,
        modes=["target", "eagle3_3", "eagle3-conf_6", "hybrid_8"],
        confidence_threshold=0.9,
    )
    cfg.hybrid.min_score = 0.5
    run = create_run(store, cfg)
    assert execute(store, run.id, cfg, progress=False) == "done"
    rows = [r for r in store.requests(run.id) if not r.warmup]
    assert all(r.identical for r in rows)
    hybrid = [r for r in rows if r.mode == "hybrid_8"]
    assert all(r.per_source and sum(t["passes"] for t in r.per_source.values()) <= r.passes for r in hybrid)
    assert sum(source_passes(store.source_counts(run.id))["passes"]) == sum(
        sum(t["passes"] for t in r.per_source.values()) for r in hybrid
    )
    config = store.get_run(run.id).config
    stored = config["bench"]
    assert stored["confidence_threshold"] == 0.9 and stored["hybrid"]["min_score"] == 0.5
    head = load_pair(d["target"], str(tmp_path / "head"), "cpu", "float32").draft
    assert config["draft_sha256"] == fingerprint(head) and len(config["draft_sha256"]) == 64  # which head ran
    assert not oracle(store, run.id).empty
