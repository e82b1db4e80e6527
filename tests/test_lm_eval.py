"""Answer quality by a harness no one here wrote (issue 69): lm-evaluation-harness's results import as quality runs
with each answer a row; through Phoenix's server in fp32, every drafter (asked for per request, at a k that makes it
draft) gives answers identical to speculation off and the same pass@1; the paired difference says when bf16 moved
a score."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import http_server, import_results, tiny_service

FIXTURES = Path(__file__).parent / "fixtures" / "imports" / "lm-eval"
RESULTS = next(FIXTURES.glob("results_*.json"))
SAMPLES = next(FIXTURES.glob("samples_*.jsonl"))
HARNESS = os.environ.get("PHOENIX_LM_EVAL") or str(Path(__file__).parents[1] / ".venv-lm-eval" / "bin" / "lm_eval")


def test_a_real_lm_eval_result_imports_as_a_quality_run_with_each_answer_a_row(store):
    doc = json.loads(RESULTS.read_text())
    samples = [json.loads(line) for line in SAMPLES.read_text().splitlines()]
    (run_id,) = import_results(store, [RESULTS], engine="phoenix")
    run, rows = store.get_run(run_id), store.requests(run_id)
    quality = run.config["quality"]
    assert quality["scores"]["phoenix_humaneval"]["pass_at_1"] == doc["results"]["phoenix_humaneval"]["pass_at_1,none"]
    assert quality["drafter"] == "model"  # what the task asked of the server, per request
    assert [r.output_text for r in rows] == [s["filtered_resps"][0] for s in samples]
    assert [r.prompt_id for r in rows] == [f"phoenix_humaneval/{s['doc']['task_id']}" for s in samples]
    assert run.config["imported"]["version"] == doc["lm_eval_version"] and "load" not in run.config  # not a load run


def test_broken_lm_eval_files_are_one_line_and_nothing_is_stored(store, tmp_path):
    from engine.errors import PhoenixError

    cut = tmp_path / "results_x.json"
    cut.write_text(RESULTS.read_text()[:500])
    bad_score = tmp_path / "results_y.json"
    doc = json.loads(RESULTS.read_text())
    doc["results"]["phoenix_humaneval"]["pass_at_1,none"] = "high"
    bad_score.write_text(json.dumps(doc))
    bad_sample = tmp_path / "results_z.json"
    bad_sample.write_text(RESULTS.read_text())
    (tmp_path / "samples_phoenix_humaneval_z.jsonl").write_text('{"doc_id": 0}\n')
    for path, said in [(cut, "not JSON"), (bad_score, "is not a number"), (bad_sample, "line 1: not a sample")]:
        with pytest.raises(PhoenixError, match=said) as err:
            import_results(store, [path], format="lm-eval" if path is not cut else "auto")
        assert "\n" not in str(err.value)
    assert store.list_runs() == []


def test_results_without_samples_keep_the_scores_and_say_so(store, tmp_path):
    alone = tmp_path / "results_2026.json"
    alone.write_text(RESULTS.read_text())
    (run_id,) = import_results(store, [alone])
    run = store.get_run(run_id)
    assert store.requests(run_id) == [] and "--log_samples" in run.config["imported"]["warnings"][0]


def test_the_paired_difference_is_zero_when_nothing_moved_and_has_an_interval_when_scores_did():
    from engine.analysis.quality import compare

    docs = [f"d{i}" for i in range(20)]
    same = {d: {"pass_at_1": float(i % 2)} for i, d in enumerate(docs)}
    answers = {d: d for d in docs}
    exact = compare(same, same, answers, answers, "pass_at_1")
    assert exact is not None and (exact.diff, exact.low, exact.high, exact.identical) == (0.0, 0.0, 0.0, 20)
    moved = dict(same, d0={"pass_at_1": 1.0}, d2={"pass_at_1": 1.0})  # two problems pass with the drafter
    diff = compare(same, moved, answers, dict(answers, d0="other", d2="other"), "pass_at_1")
    assert diff is not None and diff.diff == pytest.approx(0.1) and diff.low < 0 < diff.high  # not significant
    assert diff.identical == 18


@pytest.mark.subprocess
@pytest.mark.skipif(
    not Path(HARNESS).is_file() and not os.environ.get("PHOENIX_REQUIRE_LM_EVAL"),
    reason="lm-eval is not installed (.ci/run makes .venv-lm-eval from requirements-lm-eval.txt)",
)
def test_through_the_server_every_drafter_answers_as_speculation_off_in_fp32(store, tiny_dirs, tmp_path, monkeypatch):
    from engine.analysis.quality import diff_of
    from engine.engines.lm_eval import LmEvalConfig
    from engine.imports.quality import evaluate

    monkeypatch.setenv("PHOENIX_LM_EVAL", HARNESS)
    from helpers import migrated

    served = store.__class__(migrated(f"sqlite:///{tmp_path / 'served.db'}"))  # the server's own runs, apart
    service = tiny_service(tiny_dirs, served)
    with http_server(service) as port:
        cfg = LmEvalConfig(url=f"http://127.0.0.1:{port}", drafters="none,model,ngram,suffix", limit=3)
        cfg.max_tokens, cfg.k, cfg.stops, cfg.out = 24, 4, "none", str(tmp_path / "harness")
        ids = evaluate(store, cfg, say=lambda _line: None)
    assert len(ids) == 4
    for other in ids[1:]:
        diff = diff_of(store, ids[0], other)
        assert diff is not None and diff.documents == 3
        assert diff.identical == 3 and diff.diff == 0.0  # fp32: identical answers, the same pass@1
    rows = served.requests(service.run_id)
    assert {r.drafter for r in rows} == {"none", "model", "ngram", "suffix"}
    for drafter in ("model", "ngram", "suffix"):  # each drafted: the check is not vacuous
        assert sum(r.proposed for r in rows if r.drafter == drafter) > 0
    assert all(len(r.output_text) > 0 for r in store.requests(ids[0]))


@pytest.mark.pages
def test_the_run_page_shows_a_quality_runs_scores_and_answers_as_text(tmp_path, monkeypatch):
    from apptest import open_page

    from db.migrate import ensure_schema
    from db.store import Store

    url = f"sqlite:///{tmp_path / 'p.db'}"
    ensure_schema(url)
    (run_id,) = import_results(Store(url), [RESULTS], engine="phoenix")
    monkeypatch.setenv("PHOENIX_DB", url)
    at = open_page("run", run=run_id)
    assert any(s.value == "Answer quality" for s in at.subheader)
    frames = [d.value for d in at.dataframe]
    assert frames[0]["metric"].tolist()[0] == "pass_at_1" and len(frames[1]) == len(SAMPLES.read_text().splitlines())


def test_the_published_quality_block_says_equal_only_where_every_answer_is_identical(store, tmp_path):
    from engine.export.published import Figures, render

    same = import_results(store, [RESULTS], name="lm-eval HumanEval through phoenix serve: tiny, float32, drafter none")
    again = import_results(
        store, [RESULTS], name="lm-eval HumanEval through phoenix serve: tiny, float32, drafter model"
    )
    moved_dir = tmp_path / "moved"
    moved_dir.mkdir()
    (moved_dir / RESULTS.name).write_text(RESULTS.read_text())
    lines = SAMPLES.read_text().splitlines()
    first = json.loads(lines[0])
    first["filtered_resps"] = ["    return 1\n"]
    (moved_dir / SAMPLES.name).write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    moved = import_results(
        store, [moved_dir / RESULTS.name], name="lm-eval HumanEval through phoenix serve: tiny, bfloat16"
    )
    text = render(f"<!-- generated: quality {same[0]}:{again[0]},{moved[0]} --><!-- /generated -->", Figures(store))
    rows = [line for line in text.splitlines() if line.startswith("| tiny")]
    assert "(baseline)" in rows[0] and "| equal |" in rows[1]
    assert f"{len(lines) - 1}/{len(lines)}" in rows[2] and "tied (interval holds 0)" in rows[2]
