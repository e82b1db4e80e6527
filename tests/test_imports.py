"""Results from the field's own tools become Phoenix runs (issue 69): a real `vllm bench serve --save-result
--save-detailed` file (tests/fixtures/imports/PROVENANCE.md: vLLM 0.32's own client against Phoenix's embedded
server), imported row for row, its aggregates equal to Phoenix's recomputation of them; a GPU-style sweep labelled
by its hardware and never ranked against a CPU sweep; broken, truncated, huge and hostile files refused in one line
with nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import import_results

FIXTURES = Path(__file__).parent / "fixtures" / "imports"
REAL = FIXTURES / "vllm-bench-phoenix-embedded-c4.json"


def test_a_real_vllm_bench_file_imports_row_for_row_and_its_figures_are_the_tools_own(store):
    doc = json.loads(REAL.read_text())
    (run_id,) = import_results(store, [REAL], engine="phoenix", hardware="2-core Xeon (the fixture's machine)")
    run, rows = store.get_run(run_id), store.requests(run_id)
    assert run is not None and run.status == "done"
    assert len(rows) == len(doc["input_lens"]) == doc["completed"] + doc["failed"]
    assert [r.prompt_tokens for r in rows] == doc["input_lens"]
    assert [r.output_tokens for r in rows] == doc["output_lens"]
    assert [r.ttft_s for r in rows] == pytest.approx(doc["ttfts"])
    assert [r.output_text for r in rows] == doc["generated_texts"]
    assert [r.queue_s for r in rows] == pytest.approx(doc["queue_times"])
    imported, f = run.config["imported"], run.config["figures"]["as-served"]
    assert imported["tool"] == "vllm bench serve" and imported["warnings"] == []  # every figure agrees
    assert f["output_throughput"] == pytest.approx(doc["output_throughput"], rel=1e-9)
    assert f["ttft_ms_p50"] == pytest.approx(doc["median_ttft_ms"], rel=1e-9)
    assert f["tpot_ms_mean"] == pytest.approx(doc["mean_tpot_ms"], rel=1e-9)
    assert imported["aggregates"]["median_ttft_ms"] == doc["median_ttft_ms"]  # the tool's own, kept beside
    assert run.config["level"] == doc["max_concurrency"] and run.config["request_rate"] is None


def test_a_figure_that_disagrees_with_its_requests_is_said_and_unknown_fields_are_kept(store, tmp_path):
    doc = json.loads(REAL.read_text())
    doc["output_throughput"] *= 1.25  # what a tool that counted differently would print
    doc["my_cluster_field"] = {"rack": 7}
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    (run_id,) = import_results(store, [path])
    imported = store.get_run(run_id).config["imported"]
    assert len(imported["warnings"]) == 1 and imported["warnings"][0].startswith("output_throughput: the tool says")
    # what Phoenix does not read is kept as the tool wrote it: the new field, and the client's start times
    assert imported["unknown_fields"] == {"my_cluster_field": {"rack": 7}, "start_times": doc["start_times"]}


def test_a_file_without_per_request_data_keeps_the_tools_figures_and_says_so(store, tmp_path):
    doc = {k: v for k, v in json.loads(REAL.read_text()).items() if k not in ("input_lens", "output_lens", "ttfts")}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(doc))
    (run_id,) = import_results(store, [path])
    run = store.get_run(run_id)
    assert store.requests(run_id) == []
    f = run.config["figures"]["as-served"]
    assert f["output_throughput"] == doc["output_throughput"] and f["answered"] == doc["completed"] == 12
    assert f["ttft_ms_p50"] == doc["median_ttft_ms"] and f["failed"] == 0
    assert "no per-request data" in run.config["imported"]["warnings"][0]


def test_a_gpu_sweep_draws_beside_a_cpu_sweep_labelled_by_its_hardware_and_never_ranked_against_it(store, tmp_path):
    from engine.analysis import sweeps

    doc = json.loads(REAL.read_text())
    levels = []
    for c in (1, 4, 16):  # shaped like an H100 sweep: the same file at three levels, its figures scaled
        d = dict(doc, max_concurrency=c, duration=doc["duration"] / (10 * c))
        d["output_throughput"] = doc["total_output_tokens"] / d["duration"]
        d["request_throughput"] = doc["completed"] / d["duration"]
        levels.append(d)
    gpu = tmp_path / "h100.jsonl"
    gpu.write_text("\n".join(json.dumps(d) for d in levels))
    gpu_ids = import_results(
        store, [gpu], engine="vllm", variant="eagle3-k3", hardware="8x H100 (fixture, not measured)"
    )
    cpu_ids = import_results(store, [REAL], engine="phoenix", hardware="2-core Xeon")
    found = sweeps.sweeps(store.list_runs())
    assert sorted(len(runs) for runs in found.values()) == [1, 3]
    frame = sweeps.points(found)
    assert set(frame["hardware"]) == {"8x H100 (fixture, not measured)", "2-core Xeon"}
    for _head, group, *_ in sweeps._loads(frame):
        assert group["hardware"].nunique() == 1  # a ranking only ever within one machine's figures
    assert len(gpu_ids) == 3 and len(cpu_ids) == 1


BROKEN = {
    "truncated": lambda text: text[: len(text) // 2],
    "not JSON": lambda text: "<html>oops</html>",
    "another tool's": lambda text: json.dumps({"results": {"humaneval": {}}}),
    "a time that is no number": lambda text: text.replace('"ttfts": [', '"ttfts": ["soon", ', 1),
    "lists of different lengths": lambda text: text.replace('"input_lens": [', '"input_lens": [7, ', 1),
    "a negative duration": lambda text: json.dumps({**json.loads(text), "duration": -1}),
}


@pytest.mark.parametrize("kind", list(BROKEN))
def test_a_broken_file_is_one_line_and_nothing_of_the_import_is_stored(store, tmp_path, kind):
    from engine.errors import PhoenixError

    bad = tmp_path / "bad.json"
    bad.write_text(BROKEN[kind](REAL.read_text()))
    with pytest.raises(PhoenixError) as err:
        import_results(store, [REAL, bad])  # the good file first: all or nothing
    assert "\n" not in str(err.value) and str(bad) in str(err.value)
    assert store.list_runs() == []


def test_a_huge_or_binary_file_is_refused_before_it_is_read_whole(store, tmp_path, monkeypatch):
    from engine.errors import PhoenixError
    from engine.imports import files

    monkeypatch.setattr(files, "MAX_BYTES", 1000)
    with pytest.raises(PhoenixError, match="over the 0 MB an import takes"):
        import_results(store, [REAL])
    monkeypatch.undo()
    binary = tmp_path / "x.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(PhoenixError, match="not UTF-8"):
        import_results(store, [binary])
    assert store.list_runs() == []


def test_the_command_imports_and_refuses_in_one_line(tmp_path, capsys):
    from engine.cli import main

    db = str(tmp_path / "c.db")
    assert main(["import", str(REAL), "--hardware", "2-core Xeon", "--db", db]) == 0
    assert "imported 1 run(s): #1" in capsys.readouterr().out
    assert main(["import", str(tmp_path / "missing.json"), "--db", db]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be read" in err
    assert main(["import", str(REAL), "--format", "guidellm", "--db", db]) == 2


@pytest.mark.pages
def test_the_sweeps_page_draws_an_imported_gpu_sweep_labelled_by_its_hardware(tmp_path, monkeypatch):
    from apptest import open_page

    from db.migrate import ensure_schema
    from db.store import Store

    url = f"sqlite:///{tmp_path / 'p.db'}"
    ensure_schema(url)
    doc = json.loads(REAL.read_text())
    path = tmp_path / "h100.jsonl"
    path.write_text("\n".join(json.dumps(dict(doc, max_concurrency=c)) for c in (1, 4, 16)))
    ids = import_results(Store(url), [path], engine="vllm", variant="eagle3-k3", hardware="8x H100 (fixture)")
    monkeypatch.setenv("PHOENIX_DB", url)
    at = open_page("sweeps", sweeps=str(ids[0]))
    assert not at.exception
    shown = " ".join(str(s.value) for s in list(at.subheader) + list(at.caption) + list(at.markdown))
    assert "8x H100 (fixture)" in shown


SCRAPE = FIXTURES / "vllm-metrics-smollm2-eagle3.prom"


def test_a_real_vllm_scrape_imports_as_a_watch_run_with_its_per_position_acceptance(store, tmp_path, monkeypatch):
    from engine.engines.counters import parse_metrics

    counters = parse_metrics(SCRAPE.read_text())
    (run_id,) = import_results(store, [SCRAPE], hardware="2-core Xeon (the fixture's machine)")
    run, (interval,) = store.get_run(run_id), store.intervals(run_id)
    assert run.config["engine"]["engine"] == "vllm" and run.config["serve_watch"]["imported"] == "Prometheus scrape"
    assert (interval.drafts, interval.draft_tokens, interval.accepted) == (
        counters.drafts, counters.draft_tokens, counters.accepted)  # fmt: skip
    assert interval.per_position == [counters.per_pos[i] for i in sorted(counters.per_pos)]
    assert interval.drafts > 0 and len(interval.per_position) >= 2
    imported = run.config["imported"]
    assert imported["acceptance"] == pytest.approx(counters.accepted / counters.draft_tokens)
    assert imported["per_position"][0] == pytest.approx(counters.per_pos[0] / counters.drafts)  # unconditional
    assert store.requests(run_id) == [] and interval.tokens_per_s == 0.0  # no span, so no made-up rate
    from apptest import open_page

    monkeypatch.setenv("PHOENIX_DB", store.url)
    page = open_page("run", run=run_id)
    assert not page.exception and any("Watching vllm" in h.value for h in page.subheader)


@pytest.mark.parametrize(
    "body, said",
    [
        ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1.0\n", "no spec-decode counters"),
        ("vllm:spec_decode_num_drafts_total 0.0\nvllm:spec_decode_num_draft_tokens_total 0.0\n", "drafted nothing"),
        ('vllm:spec_decode_num_drafts_total 3.0\nvllm:spec_decode_num_accepted_tokens_per_pos_total{position="x9"} 1\n',
         "draft position"),
        ("vllm:spec_decode_num_drafts_total -4.0\n", "not a count"),
    ],
)  # fmt: skip
def test_a_scrape_phoenix_cannot_read_is_one_line_and_nothing_is_stored(store, tmp_path, body, said):
    from engine.errors import PhoenixError

    bad = tmp_path / "bad.prom"
    bad.write_text(body)
    with pytest.raises(PhoenixError, match=said):
        import_results(store, [SCRAPE, bad], format="prometheus")
    assert store.list_runs() == []  # the good scrape before it is not stored either


def test_a_bench_file_and_a_scrape_import_together_each_as_its_kind(store):
    ids = import_results(store, [REAL, SCRAPE], engine="vllm")
    kinds = sorted("serve_watch" in store.get_run(i).config for i in ids)
    assert kinds == [False, True]


def test_a_price_per_hour_gives_each_level_its_cost_per_1k_tokens(store):
    doc = json.loads(REAL.read_text())
    (run_id,) = import_results(store, [REAL], hardware="8x H100", price_per_hour=98.32)
    price = store.get_run(run_id).config["price"]
    assert price["usd_per_1k_tokens"] == pytest.approx(1000 * 98.32 / 3600 / doc["output_throughput"], rel=1e-9)


def _night(doc: dict, slower: float) -> dict:
    """The fixture as another night's result: every time scaled by ``slower`` (the tool's figures with them)."""
    d = json.loads(json.dumps(doc))
    for key in ("ttfts", "latencies"):
        d[key] = [t * slower for t in d[key]]
    d["itls"] = [[t * slower for t in gaps] for gaps in d["itls"]]
    d["duration"] *= slower
    for key in [k for k in d if k.endswith("_ms") and isinstance(d[k], (int, float))]:
        d[key] *= slower
    for key in ("output_throughput", "request_throughput", "total_token_throughput"):
        d[key] /= slower
    return d


def test_an_imported_nightly_series_is_judged_like_any_other_and_a_real_slowdown_fails_the_gate(tmp_path, capsys):
    from engine.cli import main

    doc, db = json.loads(REAL.read_text()), str(tmp_path / "n.db")
    for night, slower in enumerate([1.0, 1.02, 0.99, 1.01, 1.0, 1.33, 1.34]):  # a wobble, then 25% slower
        path = tmp_path / f"night-{night}.json"
        path.write_text(json.dumps(_night(doc, slower)))
        assert main(["import", str(path), "--engine", "vllm", "--hardware", "8x H100", "--db", db]) == 0
        if night == 4:
            assert main(["regressions", "--db", db, "--exit-code"]) == 0  # a 1-2% wobble is no regression
    capsys.readouterr()
    assert main(["regressions", "--db", db, "--exit-code"]) == 1
    said = capsys.readouterr().out
    assert "regression" in said and "#6, #7" in said
