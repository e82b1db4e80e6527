"""Smoke test of the benchmark scripts with tiny sizes (the real runs are not for CI)."""
from __future__ import annotations

import json

from benchmarks import decode, efficiency, report
from benchmarks.common import latest


def test_decode_then_efficiency_and_report_on_tiny_models(tiny_dirs, tmp_path, monkeypatch, capsys):
    d = tiny_dirs["qwen3"]
    decode.main(["--target", d["target"], "--draft", d["near"], "--limit", "2", "--max-new-tokens", "10",
                 "--repeats", "1", "--ks", "2", "--out", str(tmp_path)])
    result = latest("decode", tmp_path)
    assert set(result["table"]) == {"target", "ours_2", "hf_2", "ngram_2"}
    assert result["table"]["ours_2"]["identical"] == "2/2" and result["table"]["hf_2"]["identical"] == "2/2"
    assert result["provenance"]["git_sha"] is None or len(result["provenance"]["git_sha"]) == 40
    eff = efficiency.analyse(result)
    assert set(eff) <= {"ours_2"}
    monkeypatch.setattr(report, "latest", lambda name: latest(name, tmp_path))
    md = report.render()
    assert "| ours_2 |" in md and "x target" in md
    json.dumps(result)  # everything stored is plain JSON


def test_dashboard_benchmark_builds_times_and_records_a_small_database(tmp_path):
    from benchmarks import dashboard

    dashboard.main(["--sizes", "300", "--repeats", "1", "--out", str(tmp_path)])
    result = latest("dashboard", tmp_path)
    row = result["results"]["300"]
    assert row["insert_rows_per_s"] > 0 and row["run_page_render_s"] > 0
    assert set(row["queries"]) >= {"mode_summaries", "positions", "request_sample", "all_queries_median_s"}
