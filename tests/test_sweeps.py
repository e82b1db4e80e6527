"""A load sweep as one picture (engine.analysis.sweeps, the Sweeps page): levels grouped by invocation, the frontier,
the best setting at each load with its paired-block interval, and the best within a typed SLO."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace

import pandas as pd
import pytest

from engine.analysis import sweeps as S


def level_run(
    run_id: int, name: str, level: int, figures: dict, sweep: str | None = None, blocks=None, engine="phoenix"
):
    config = {
        "load": {"engine": engine, "prompts": "humaneval-test", "limit": 8, "concurrency": "1,2,4"},
        "level": level,
        "request_rate": None,
        "figures": figures,
        "environment": {"cpu": "AMD EPYC (family 25, model 1)"},
    }
    if sweep:
        config["sweep"] = {"id": sweep, "engine": engine}
    if blocks:
        config["blocks"] = blocks
    return SimpleNamespace(
        id=run_id, name=f"{name} c={level}", config=config, target="smollm2", created_at=datetime(2026, 12, 3)
    )


def fig(tps: float, ttft_ms: float, tpot_ms: float = 20.0, goodput: float | None = None) -> dict:
    return {"answered": 8, "output_throughput": tps, "ttft_ms_p50": ttft_ms / 2, "ttft_ms_p95": ttft_ms,
            "tpot_ms_p50": tpot_ms, "goodput": goodput}  # fmt: skip


def test_levels_group_by_their_stored_sweep_or_by_invocation_for_older_runs():
    runs = [
        level_run(1, "old", 1, {"none": fig(30, 100)}),
        level_run(2, "old", 2, {"none": fig(50, 150)}),
        level_run(5, "old", 1, {"none": fig(31, 90)}),  # the same command again, later: a sweep of its own
        level_run(6, "new", 1, {"none": fig(30, 100)}, sweep="s1"),
        level_run(7, "new", 2, {"none": fig(55, 140)}, sweep="s1"),
    ]
    found = S.sweeps(runs)
    assert sorted(sorted(r.id for r in rs) for rs in found.values()) == [[1, 2], [5], [6, 7]]
    assert found["s1"][0].id == 6 and S.label(found["s1"]).startswith("#6-#7 new (phoenix, smollm2)")


def test_the_frontier_keeps_only_points_nothing_beats_on_both_throughput_and_latency():
    frame = pd.DataFrame(
        {"throughput_tok_s": [10, 20, 30, 25, 40], "ttft_p95_s": [0.1, 0.2, 0.5, 0.6, 0.9], "setting": list("abcde")}
    )
    assert S.frontier(frame)["setting"].tolist() == ["a", "b", "c", "e"]  # d: c is faster and quicker


def test_the_best_setting_at_each_load_says_by_how_much_with_the_interval_of_paired_blocks():
    blocks = {
        "none": [[1.0, 100], [1.0, 110], [1.0, 95], [1.0, 105]],
        "k3": [[1.0, 150], [1.0, 160], [1.0, 140], [1.0, 150]],
    }
    runs = [
        level_run(1, "s", 1, {"none": fig(100, 100), "k3": fig(150, 90)}, sweep="x", blocks=blocks),
        level_run(2, "s", 2, {"none": fig(180, 200), "k3": fig(170, 210)}, sweep="x"),
    ]
    frame = S.points(S.sweeps(runs))
    best = S.best_at_each_load(frame, {r.id: r for r in runs})
    assert best["leader"].tolist() == ["phoenix k3 (#1)", "phoenix none (#1)"]
    assert best["x runner-up"].round(2).tolist()[0] == 1.46  # the median of the paired blocks' ratios
    low, high = (float(x.rstrip("x")) for x in best["interval (95%)"].iloc[0].split("-"))
    assert 1.3 < low <= 1.5 <= high < 1.7  # the four blocks' ratios: 1.50, 1.45, 1.47, 1.43
    # level 2 kept no blocks: no interval, so no winner is named however the point estimates fall
    assert best["verdict"].tolist() == ["best", S.NO_INTERVAL]
    assert "no interval" in best["ranked by"].iloc[1] and best["interval (95%)"].iloc[1] == ""


def test_a_lead_inside_its_noise_is_a_tie_with_its_interval_shown():
    blocks = {
        "none": [[1.0, 100], [1.0, 120], [1.0, 90], [1.0, 110]],
        "k3": [[1.0, 112], [1.0, 98], [1.0, 108], [1.0, 103]],
    }
    runs = [level_run(1, "s", 1, {"none": fig(105.0, 100), "k3": fig(105.03, 90)}, sweep="x", blocks=blocks)]
    best = S.best_at_each_load(S.points(S.sweeps(runs)), {r.id: r for r in runs})
    row = best.iloc[0]
    assert row["verdict"] == S.TIE and row["interval (95%)"]  # 1.0003x: shown with its interval, never "best"
    low, high = (float(x.rstrip("x")) for x in row["interval (95%)"].split("-"))
    assert low < 1 < high


def test_a_setting_that_answered_nothing_is_failed_not_zero_and_never_ranked():
    dead = {"answered": 0, "output_throughput": 0.0, "ttft_ms_p95": None}
    runs = [level_run(1, "s", 1, {"none": fig(100, 100), "k3": dead}, sweep="x")]
    frame = S.points(S.sweeps(runs))
    assert pd.isna(frame.set_index("variant").loc["k3", "throughput_tok_s"])  # not 0
    best = S.best_at_each_load(frame, {})
    assert best["leader"].iloc[0] == "phoenix none (#1)" and best["verdict"].iloc[0] == "only setting"
    assert best["failed settings"].iloc[0] == "phoenix k3 (#1)"
    table = S.slo_table(frame, {"ttft_p95": 500}).set_index("setting")
    assert (
        pd.isna(table.loc["phoenix k3 (#1)", "stops meeting at"]) and table.loc["phoenix k3 (#1)", "failed at"] == "1"
    )


def test_at_a_fixed_arrival_rate_settings_are_ranked_by_latency_never_by_throughput():
    runs = [
        level_run(1, "s", 16, {"none": fig(100, 100) | {"e2el_ms_p50": 900}, "k3": fig(101, 90) | {"e2el_ms_p50": 600}})
    ]
    runs[0].config["request_rate"] = 2.0
    frame = S.points(S.sweeps(runs))
    lat = {"none": [0.9, 0.95, 0.85, 0.92, 0.88], "k3": [0.6, 0.62, 0.58, 0.61, 0.59]}
    best = S.best_at_each_load(frame, {}, latencies=lambda run_id, v: lat[v])
    row = best.iloc[0]
    assert row["leader"] == "phoenix k3 (#1)" and row["verdict"] == "best" and "latency" in row["ranked by"]
    unbounded = [level_run(2, "u", 16, {"none": fig(100, 100)}, sweep="y")]
    unbounded[0].config["request_rate"] = "inf"
    assert S.points(S.sweeps(unbounded))["load_label"].tolist() == ["unbounded (all at once)"]


def test_a_gguf_served_as_it_is_carries_its_quantization_in_every_setting_name():
    runs = [level_run(1, "s", 1, {"none": fig(100, 100)}, sweep="x", engine="llamacpp")]
    runs[0].config["servers"] = [{"variant": "none", "command": "llama-server -m /m/qwen-q4_k_m.gguf -t 2"}]
    frame = S.points(S.sweeps(runs))
    assert frame["setting"].tolist() == ["llamacpp Q4_K_M none (#1)"] and frame["weights"].tolist() == ["Q4_K_M"]


def test_the_best_within_an_slo_and_where_each_setting_stops_meeting_it():
    runs = [
        level_run(1, "s", 1, {"none": fig(30, 100), "k3": fig(50, 120)}, sweep="x"),
        level_run(2, "s", 4, {"none": fig(100, 300), "k3": fig(120, 650)}, sweep="x"),
        level_run(3, "s", 8, {"none": fig(160, 450), "k3": fig(150, 900)}, sweep="x"),
    ]
    frame = S.points(S.sweeps(runs))
    within = S.best_within(frame, {"ttft_p95": 500})
    assert within["leading within the SLO"].tolist() == ["phoenix k3 (#1)", "phoenix none (#1)", "phoenix none (#1)"]
    assert within["settings meeting it"].tolist() == ["2 of 2", "1 of 2", "1 of 2"]
    table = S.slo_table(frame, {"ttft_p95": 500}).set_index("setting")
    assert (
        table.loc["phoenix k3 (#1)", "meets up to"] == "1" and table.loc["phoenix k3 (#1)", "stops meeting at"] == "4"
    )
    assert table.loc["phoenix none (#1)", "meets up to"] == "8" and pd.isna(
        table.loc["phoenix none (#1)", "stops meeting at"]
    )


@pytest.mark.pages
def test_the_sweeps_page_answers_the_best_setting_at_a_load_within_an_slo_on_the_committed_runs(monkeypatch):
    from apptest import open_page

    from engine.paths import RESULTS_DB

    monkeypatch.setenv("PHOENIX_DB", f"sqlite:///{RESULTS_DB}")
    at = open_page("sweeps", sweeps="161,138,143", ttft_p95="500")
    assert not at.exception
    assert any(s.value.startswith("smollm2 · ") for s in at.subheader)
    within = at.dataframe[1].value
    row = within[within["load"] == "concurrency 8"].iloc[0]
    assert row["leading within the SLO"] == "phoenix none (#161)" and round(row["tok/s"], 1) == 167.3
    charts = [c for c in at.get("vega_lite_chart")]
    assert len(charts) >= 2  # throughput against load, latency against throughput


@pytest.mark.pages
def test_the_sweeps_page_on_a_database_without_load_runs_says_what_makes_one(app_db):
    from apptest import open_page

    at = open_page("sweeps")
    assert any("No runs yet" in i.value for i in at.info)


def test_two_runs_that_sent_the_same_prompts_in_the_same_blocks_are_paired_block_by_block():
    blocks_a = {"none": [[1.0, 100], [1.0, 50], [1.0, 200], [1.0, 80]]}
    blocks_b = {"none": [[1.0, 110], [1.0, 56], [1.0, 219], [1.0, 87]]}  # about 1.1x on every prompt
    a = level_run(1, "a", 1, {"none": fig(107.5, 100)}, sweep="x", blocks=blocks_a)
    b = level_run(2, "b", 1, {"none": fig(118.0, 100)}, sweep="y", blocks=blocks_b, engine="vllm")
    for r in (a, b):
        r.config["block"] = 1
    paired = S.paired_across({1: a, 2: b}, (2, "none"), (1, "none"))
    assert (
        paired is not None and 1.08 < paired[1] <= paired[0] <= paired[2] < 1.13
    )  # tight: prompts vary, ratios do not
    assert S.unpaired_ratio(S.block_rates({1: a, 2: b}, 2, "none"), S.block_rates({1: a, 2: b}, 1, "none"))[1] < 1
    b.config["load"]["limit"] = 99  # other prompts: no pairing
    assert S.paired_across({1: a, 2: b}, (2, "none"), (1, "none")) is None


def test_the_page_opens_on_the_newest_steady_sitting_not_one_tagged_disturbed():
    from datetime import UTC, datetime, timedelta
    from types import SimpleNamespace

    from engine.analysis.sweeps import sitting

    def sweep(first: int, engine: str, day: int, tags=()):
        at = datetime(2026, 12, day, 10, tzinfo=UTC)
        cfg = {"load": {"engine": engine}, "environment": {"cpu": "fixture CPU"}}
        return [
            SimpleNamespace(
                id=first + i, target="smollm2", config=cfg, created_at=at + timedelta(minutes=i), tags=list(tags)
            )
            for i in range(3)
        ]

    found = {
        "phoenix-5": sweep(1, "phoenix", 5),
        "vllm-5": sweep(10, "vllm", 5),
        "phoenix-6": sweep(20, "phoenix", 6, ["disturbed"]),
        "vllm-6": sweep(30, "vllm", 6, ["disturbed"]),
    }
    assert sitting(found) == ["vllm-5", "phoenix-5"]
    assert sitting({k: v for k, v in found.items() if k.endswith("6")}) == ["vllm-6", "phoenix-6"]  # nothing else


def test_a_sitting_pools_each_engines_two_passes_so_a_one_block_level_gets_an_interval():
    """Phoenix, vLLM, Phoenix, vLLM in one sitting, one block a pass at c=16: each setting's figures are the mean of
    its passes and the ratio's interval a bootstrap over both passes' blocks (one pass each had no interval)."""
    from engine.export.published_sitting import sitting

    def run(run_id, engine, tps):
        blocks = {"none": [[1.0, tps]]}
        return level_run(run_id, f"{engine} pass {run_id}", 16, {"none": fig(tps, 900)}, f"s{run_id}", blocks, engine)

    passes = ((1, "phoenix", 200.0), (2, "vllm", 240.0), (3, "phoenix", 210.0), (4, "vllm", 250.0))
    runs = {i: run(i, engine, tps) for i, engine, tps in passes}
    store = SimpleNamespace(get_run=runs.get)
    figs = SimpleNamespace(store=store, run=runs.__getitem__, results="results.md")
    pooled = sitting(figs, "1-4").strip().splitlines()[-1]
    assert "none 205.0 (20, n/a, 2 passes)" in pooled and "none 245.0 (20, n/a, 2 passes)" in pooled
    assert "vllm 1.2" in pooled and "by totals" not in pooled and ("vllm best" in pooled or S.TIE in pooled)
    alone = sitting(figs, "1-2").strip().splitlines()[-1]  # one pass each: no interval
    assert "by totals (one block each)" in alone and S.NO_INTERVAL in alone


def test_a_ratio_over_passes_widens_where_passes_disagree_and_pairs_them():
    """At a fixed rate one pass's requests share its queue: two passes that disagree widen the interval past what
    the requests alone give (runs #1044, #1048); one pass is the bootstrap over requests itself."""
    from engine.analysis.stats import clustered_ratio, unpaired_ratio

    fast, slow, steady = [1.0, 1.1, 0.9] * 6, [2.0, 2.2, 1.8] * 6, [1.5, 1.6, 1.4] * 6
    assert clustered_ratio([fast + slow], [steady + steady]) == unpaired_ratio(fast + slow, steady + steady)
    over_passes = clustered_ratio([fast, slow], [steady, steady])
    over_requests = unpaired_ratio(fast + slow, steady + steady)
    assert over_passes is not None and over_requests is not None
    assert over_passes[2] - over_passes[1] > over_requests[2] - over_requests[1]
    with pytest.raises(ValueError, match="pairs passes"):
        clustered_ratio([fast, slow], [steady])
