"""Smoke test of the benchmark scripts with tiny sizes (the real runs are not for CI)."""
from __future__ import annotations

import json

import pytest

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


def test_the_runs_page_case_lists_many_runs_through_sql_paging_and_has_its_own_file(tmp_path):
    from benchmarks import dashboard

    dashboard.main(["--sizes", "", "--single-run", "", "--many-runs", "40", "--repeats", "1", "--out", str(tmp_path)])
    result = latest("dashboard_runs", tmp_path)
    case = result["many_runs"]["40"]
    assert case["queries"]["n"] == 1 and case["queries"]["median"] > 0 and case["runs_page_render_s"] > 0


def test_dashboard_benchmark_builds_times_and_records_a_small_database(tmp_path):
    from benchmarks import dashboard

    dashboard.main(["--sizes", "300", "--single-run", "200", "--many-runs", "", "--repeats", "1", "--out", str(tmp_path)])
    result = latest("dashboard", tmp_path)
    for row in (result["results"]["300"], result["single_run"]["200"]):
        assert row["insert_rows_per_s"] > 0 and row["run_page_render_s"] > 0
        assert set(row["queries"]) >= {"arm_totals", "mode_summaries", "positions", "request_sample", "bandit", "all_queries_median_s"}
    assert result["single_run"]["200"]["shown_run_requests"] == 200


def test_regret_benchmark_runs_every_policy_against_the_fixed_arms(tiny_dirs, prompt_file, tmp_path):
    from benchmarks import regret

    d = tiny_dirs["qwen3"]
    regret.main(["--target", d["target"], "--draft", d["near"], "--prompts", prompt_file, "--limit", "3",
                 "--max-new-tokens", "8", "--arms", "0,2", "--policies", "model_based,ucb1:pass",
                 "--db", f"sqlite:///{tmp_path / 'r.db'}", "--out", str(tmp_path)])
    result = latest("regret", tmp_path)
    assert result["status"] == "done" and result["best_fixed"] in ("target", "fixed_2")
    modes = {r["mode"] for r in result["table"]}
    assert modes == {"target", "fixed_2", "bandit:model_based", "bandit:ucb1:pass"}
    assert all(len(c) == 3 for c in result["cumulative_regret"].values())


def test_overhead_benchmark_measures_bare_db_and_sentry_side_by_side(tiny_dirs, prompt_file, tmp_path):
    from benchmarks import overhead

    d = tiny_dirs["qwen3"]
    result = overhead.main(["--target", d["target"], "--draft", d["near"], "--prompts", prompt_file, "--limit", "2",
                            "--repeats", "1", "--max-new-tokens", "8", "--k", "2", "--out", str(tmp_path)])
    assert set(result["table"]) == {"bare", "db", "db+sentry"}
    assert result["rows_recorded"] == {"db": 2, "db+sentry": 2}
    assert result["sentry_transactions_received"] == 2  # the receiver really got one trace per request
    assert result["table"]["bare"]["overhead"]["median"] == 0.0


def test_gpu_script_runs_its_timing_on_cpu_with_tiny_shapes(tmp_path):
    from benchmarks import gpu

    result = gpu.main(["--tiny", "--device", "cpu", "--reps", "2", "--prompt-len", "16", "--skip-decode", "--out", str(tmp_path)])
    q = result["qwen3_random_init"]
    assert set(q["target_pass_s"]) == set(range(1, 10)) and q["c"] > 0
    assert set(q["predictions"]) == {"0.6", "0.7", "0.8"}
    assert latest("gpu", tmp_path)["gpu"].startswith("no GPU")


@pytest.mark.slow  # torch.profiler over every backend's decodes
def test_profile_splits_wall_time_into_forwards_and_the_rest(tiny_dirs, prompt_file, tmp_path):
    from benchmarks import profile_decode

    d = tiny_dirs["qwen3"]
    result = profile_decode.main(["--target", d["target"], "--draft", d["near"], "--prompts", prompt_file, "--limit", "2",
                                  "--k", "2", "--max-new-tokens", "8", "--out", str(tmp_path)])
    for b in result["backends"].values():
        assert 0 < b["target_forward_s"] < b["wall_s"] and b["top_ops"]
        assert 0 <= b["outside_forwards_share"] < 1
