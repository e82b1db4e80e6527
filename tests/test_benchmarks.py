"""Smoke test of the benchmark scripts with tiny sizes (the real runs are not for CI)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import pair_flags

from benchmarks import report
from benchmarks.common import latest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.bench
def test_the_results_report_renders_every_done_run_with_its_link_command_and_identity(tiny_dirs, prompt_file, tmp_path):
    from engine.bench.config import BenchConfig, validate
    from engine.bench.run import execute
    from engine.bench.setup import create_run

    d = tiny_dirs["qwen3"]
    store = report.open_results(str(tmp_path / "results.db"))
    cfg = validate(
        BenchConfig(
            target=d["target"],
            draft=d["near"],
            prompts=prompt_file,
            limit=3,
            max_new_tokens=10,
            modes=["target", "model_2", "ngram_2"],
            name="tiny side by side",
        )
    )
    run = create_run(store, cfg)
    assert execute(store, run.id, cfg, progress=False) == "done"
    md = report.render(report.open_results(str(tmp_path / "results.db")))
    assert "### tiny side by side" in md and f"/run?run={run.id}" in md
    assert "| model_2 | 3 |" in md and "x target" in md
    assert "--modes target,model_2,ngram_2" in md and "--limit 3" in md and "--max-new-tokens 10" in md
    assert "6 of 6 identical" in md  # the two drafting modes on three prompts; target rows are the reference
    assert "Break-even fit" in md and "a = " in md


def test_the_bench_command_names_only_the_settings_that_differ_from_the_defaults():
    from engine.bench.config import BenchConfig

    cmd = report.bench_command(BenchConfig(target="smollm2", limit=5, modes=["target", "model_4"], name="two words"))
    assert cmd == "python -m engine bench --target smollm2 --limit 5 --modes target,model_4 --name 'two words'"


@pytest.mark.bench
def test_the_runs_page_case_lists_many_runs_through_sql_paging_and_has_its_own_file(tmp_path):
    from benchmarks import dashboard

    dashboard.main(["--sizes", "", "--single-run", "", "--many-runs", "40", "--repeats", "1", "--out", str(tmp_path)])
    result = latest("dashboard_runs", tmp_path)
    case = result["many_runs"]["40"]
    assert case["queries"]["n"] == 1 and case["queries"]["median"] > 0 and case["runs_page_render_s"] > 0


@pytest.mark.bench
def test_dashboard_benchmark_builds_times_and_records_a_small_database(tmp_path):
    from benchmarks import dashboard

    dashboard.main(
        ["--sizes", "300", "--single-run", "200", "--many-runs", "", "--repeats", "1", "--out", str(tmp_path)]
    )
    result = latest("dashboard", tmp_path)
    for row in (result["results"]["300"], result["single_run"]["200"]):
        assert row["insert_rows_per_s"] > 0 and row["run_page_render_s"] > 0
        assert set(row["queries"]) >= {
            "arm_totals",
            "mode_summaries",
            "positions",
            "request_sample",
            "bandit",
            "all_queries_median_s",
        }
    assert result["single_run"]["200"]["shown_run_requests"] == 200


@pytest.mark.bench
def test_overhead_benchmark_measures_bare_db_and_sentry_side_by_side(tiny_dirs, prompt_file, tmp_path):
    from benchmarks import overhead

    d = tiny_dirs["qwen3"]
    result = overhead.main(
        [
            *pair_flags(d, prompt_file),
            "--limit",
            "2",
            "--repeats",
            "1",
            "--max-new-tokens",
            "8",
            "--k",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert set(result["table"]) == {"bare", "db", "db+sentry"}
    assert result["rows_recorded"] == {"db": 2, "db+sentry": 2}
    assert result["sentry_transactions_received"] == 2  # the receiver really got one trace per request
    assert result["table"]["bare"]["overhead"]["median"] == 0.0


@pytest.mark.bench
def test_gpu_script_runs_its_timing_on_cpu_with_tiny_shapes(tmp_path):
    from benchmarks import gpu

    result = gpu.main(
        ["--tiny", "--device", "cpu", "--reps", "2", "--prompt-len", "16", "--skip-decode", "--out", str(tmp_path)]
    )
    q = result["qwen3_random_init"]
    assert set(q["target_pass_s"]) == set(range(1, 10)) and q["c"] > 0
    assert set(q["predictions"]) == {"0.6", "0.7", "0.8"}
    assert latest("gpu", tmp_path)["gpu"].startswith("no GPU")


@pytest.mark.compile
def test_the_gpu_scripts_compiled_comparison_runs_on_cpu_with_tiny_shapes(tmp_path):
    from benchmarks import gpu

    result = gpu.main(
        [
            "--tiny",
            "--device",
            "cpu",
            "--reps",
            "2",
            "--prompt-len",
            "16",
            "--skip-decode",
            "--compile",
            "--out",
            str(tmp_path),
        ]
    )
    (r,) = result["compiled"]
    assert r["compile"]["compiled"] and r["compile"]["recompiles"] == 0
    assert set(r["compiled_pass_s"]) == set(range(1, 10)) and r["speedup_step"] > 0


@pytest.mark.subprocess  # torch.profiler over both engines' decodes: half a minute
def test_profile_splits_wall_time_into_forwards_and_the_rest(tiny_dirs, prompt_file, tmp_path):
    from benchmarks import profile_decode

    d = tiny_dirs["qwen3"]
    result = profile_decode.main(
        [
            *pair_flags(d, prompt_file),
            "--limit",
            "2",
            "--k",
            "2",
            "--max-new-tokens",
            "8",
            "--out",
            str(tmp_path),
        ]
    )
    for b in result["engines"].values():
        assert 0 < b["target_forward_s"] < b["wall_s"] and b["top_ops"]
        assert 0 <= b["outside_forwards_share"] < 1


@pytest.mark.e2e  # 10 s: it regenerates every table of docs/results.md; the full suite (CI) keeps it
def test_the_results_doc_is_generated_from_the_committed_results_database():
    """docs/results.md quotes only runs that benchmarks/results.db holds: regenerate it after any new run."""
    text = report.render(report.open_results(str(report.RESULTS_DB)))
    assert report.DOC.read_text(encoding="utf-8") == text, "docs/results.md is stale: run `python -m benchmarks.report`"


def test_the_limits_benchmark_measures_floor_step_and_verify_cost_in_one_process(tiny_dirs, tmp_path):
    from benchmarks import limits
    from benchmarks.common import latest

    result = limits.main(
        [
            "--target",
            tiny_dirs["qwen3"]["target"],
            "--dtypes",
            "float32",
            "--k-max",
            "2",
            "--reps",
            "2",
            "--context",
            "8",
            "--stream-mb",
            "8",
            "--batches",
            "1,2",
            "--batch-widths",
            "1,5",  # past the longest verify (k_max + 1 = 3): measured at 3
            "--out",
            str(tmp_path),
        ]
    )
    r = result["dtypes"][0]
    bw = r["bandwidth"]
    assert bw["gb_per_s"]["median"] > 0 and bw["read_gb_per_s"]["median"] > 0 and r["weight_bytes"] > 0
    fastest = max(bw["gb_per_s"]["median"], bw["read_gb_per_s"]["median"])  # the floor takes the faster read
    assert r["floor_step_s"] == pytest.approx(r["weight_bytes"] / (fastest * 1e9))
    for engine_name in ("eager", "static", "served"):  # served: the server's forward (Phoenix's runner)
        e = r[engine_name]
        assert set(e["verify_over_step"]) == {1, 2, 3}  # every width 1 .. k_max + 1
        assert e["verify_over_step"][1] == 1.0 and e["step_over_floor"] > 0
        # each path's floor is its own: the weight bytes over the read rate taken beside its steps
        assert e["floor_step_s"] == pytest.approx(r["weight_bytes"] / (e["read_gb_per_s"] * 1e9))
        assert e["step_over_floor"] == pytest.approx(e["step_s"]["median"] / e["floor_step_s"])
        assert set(e["batched"]) == {1, 2} and set(e["batched"][2]) == {1, 3}  # rows x tokens, 3 = k_max + 1
        assert e["batched"][1][3]["over_step"] == e["verify_over_step"][3] and e["batched"][2][3]["over_step"] > 0
        assert e["graphs"] == {"one_row": 0, "batched": 0}  # eager paths compile nothing
    stored = latest("limits", tmp_path)
    assert stored["provenance"]["cpu"] and "cpu_flags" in stored["provenance"]  # every figure names its CPU
    text = limits.markdown(stored)
    assert "| float32 |" in text and text.startswith(f"CPU: {stored['provenance']['cpu']}")
    assert "| float32 | eager | 2 |" in text  # the batched grid's row


@pytest.mark.parametrize("tied", [True, False])
def test_a_step_reads_one_row_of_an_untied_input_embedding(tied):
    """The floor's bytes are what a one-token step reads: a tied embedding once (the output layer reads it whole),
    an untied input embedding one row (Qwen2.5-Coder-1.5B's is an eighth of its weights)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from benchmarks.limits import weight_bytes

    config = LlamaConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, tie_word_embeddings=tied)  # fmt: skip
    model = LlamaForCausalLM(config)
    every = sum(p.numel() * p.element_size() for p in model.parameters())  # parameters() lists a tied weight once
    embed = model.get_input_embeddings().weight
    read = every if tied else every - (embed.shape[0] - 1) * embed.shape[1] * embed.element_size()
    assert weight_bytes(model) == read


def _slug(heading: str) -> str:
    # GitHub's anchors: lower case, punctuation dropped except hyphens, spaces to hyphens
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_is_a_front_door_whose_figures_link_to_runs_that_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150, "the README is a front door: move detail into docs/"
    rows = [line for line in readme.splitlines() if re.match(r"^\| .*\d\.\d\dx", line)]
    assert rows and all(re.search(r"\[#\d+\]\(docs/results\.md#", row) for row in rows), "a figure without its run"


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))])
def test_every_link_into_the_results_doc_lands_on_a_heading(doc):
    path = ROOT / doc if doc == "README.md" else ROOT / "docs" / doc
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", report.DOC.read_text(encoding="utf-8"), re.M)}
    links = re.findall(r"\((?:docs/)?results\.md#([^)]+)\)", path.read_text(encoding="utf-8"))
    assert not [a for a in links if a not in anchors], f"{doc} links to a results.md section that does not exist"
