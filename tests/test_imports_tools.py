"""SGLang's bench_serving, GuideLLM and AIPerf results become Phoenix runs (issue 69): each fixture was written by the
real tool against Phoenix's embedded server (tests/fixtures/imports/PROVENANCE.md, make_tools.sh), imported row for
row, every figure it shares with Phoenix equal to Phoenix's recomputation from the same requests; a broken or
truncated file of each is one line with nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import import_results

FIXTURES = Path(__file__).parent / "fixtures" / "imports"
SGLANG = FIXTURES / "sglang-bench-phoenix-embedded-c4.jsonl"
GUIDELLM = FIXTURES / "guidellm-phoenix-embedded-c1-c4.json"
AIPERF = FIXTURES / "aiperf-phoenix-embedded-c4_aiperf.json"
AIPERF_RECORDS = FIXTURES / "aiperf-phoenix-embedded-c4.jsonl"


def test_an_sglang_file_imports_row_for_row_and_agrees_with_its_printed_figures(store):
    doc = json.loads(SGLANG.read_text().splitlines()[0])
    (run_id,) = import_results(store, [SGLANG], engine="phoenix")
    run, rows = store.get_run(run_id), store.requests(run_id)
    assert len(rows) == doc["completed"] == len(doc["ttfts"])
    assert [r.ttft_s for r in rows] == pytest.approx(doc["ttfts"])
    assert [r.output_tokens for r in rows] == doc["output_lens"] and [r.output_text for r in rows] == doc[
        "generated_texts"
    ]
    imported, f = run.config["imported"], run.config["figures"]["as-served"]
    assert imported["tool"] == "sglang bench_serving" and imported["warnings"] == []  # every shared figure agrees
    assert f["output_throughput"] == pytest.approx(doc["output_throughput"], rel=1e-9)
    assert f["ttft_ms_p95"] == pytest.approx(doc["p95_ttft_ms"], rel=1e-9)  # SGLang's percentiles are Phoenix's
    assert imported["aggregates"]["p99_ttft_ms"] == doc["p99_ttft_ms"]  # what SGLang printed, kept
    assert run.config["level"] == 4 and run.config["request_rate"] is None  # every request at once, 4 in flight


def test_a_guidellm_sweep_imports_as_one_sweep_a_run_per_benchmark(store):
    doc = json.loads(GUIDELLM.read_text())
    ids = import_results(store, [GUIDELLM], engine="phoenix", hardware="2-core Xeon")
    runs = [store.get_run(i) for i in ids]
    assert [r.config["level"] for r in runs] == [1, 4]  # concurrent@1, concurrent@4
    assert len({r.config["sweep"]["id"] for r in runs}) == 1
    for run, bench in zip(runs, doc["benchmarks"]):
        rows, done = store.requests(run.id), bench["requests"]["successful"]
        assert len(rows) == len(done) == bench["metrics"]["request_totals"]["successful"]
        assert [r.ttft_s * 1000 for r in rows] == pytest.approx([r["time_to_first_token_ms"] for r in done])
        assert [r.cached_tokens for r in rows] == [r["cached_tokens"] for r in done]  # the server's usage said
        imported = run.config["imported"]
        assert imported["warnings"] == [] and imported["version"] == doc["metadata"]["guidellm_version"]
        f = run.config["figures"]["as-served"]
        assert f["output_throughput"] == pytest.approx(
            bench["metrics"]["output_tokens_per_second"]["successful"]["mean"]
        )
        # GuideLLM's median is its own (a value at a rank): kept beside Phoenix's, never compared
        assert (
            imported["aggregates"]["time_to_first_token_ms.median"]
            == (bench["metrics"]["time_to_first_token_ms"]["successful"]["median"])
        )
        assert imported["speculative"]["requests_reporting"] == len(done)  # Phoenix's per-request metrics, read


def test_an_aiperf_profile_imports_with_its_records_and_its_command(store):
    doc = json.loads(AIPERF.read_text())
    records = [json.loads(line) for line in AIPERF_RECORDS.read_text().splitlines()]
    (run_id,) = import_results(store, [AIPERF], engine="phoenix")
    run, rows = store.get_run(run_id), store.requests(run_id)
    assert len(rows) == len(records) == doc["completed_request_count"]["avg"]
    assert [r.latency_s * 1000 for r in rows] == pytest.approx(
        [r["metrics"]["request_latency"]["value"] for r in records]
    )
    imported, f = run.config["imported"], run.config["figures"]["as-served"]
    assert imported["warnings"] == [] and imported["command"].startswith("aiperf profile")
    assert f["tpot_ms_p50"] == pytest.approx(doc["inter_token_latency"]["p50"], rel=1e-6)  # its ITL is vLLM's TPOT
    assert f["output_throughput"] == pytest.approx(doc["output_token_throughput"]["avg"], rel=1e-6)
    assert imported["speculative"]["requests_reporting"] == len(records)


def test_aiperf_aggregates_alone_keep_the_tools_figures_and_its_records_alone_are_pointed_to_them(store, tmp_path):
    from engine.errors import PhoenixError

    alone = tmp_path / "x_aiperf.json"
    alone.write_text(AIPERF.read_text())  # no records beside it
    (run_id,) = import_results(store, [alone])
    f = store.get_run(run_id).config["figures"]["as-served"]
    assert (
        store.requests(run_id) == []
        and f["ttft_ms_p95"] == json.loads(AIPERF.read_text())["time_to_first_token"]["p95"]
    )
    with pytest.raises(PhoenixError, match="import its profile_export_aiperf.json"):
        import_results(store, [AIPERF_RECORDS])


def _cut(text: str) -> str:
    return text[: len(text) // 2]


BROKEN = {
    "sglang truncated": (SGLANG, "bad.jsonl", _cut),
    "sglang columns of different lengths": (
        SGLANG,
        "bad.jsonl",
        lambda t: t.replace('"ttfts": [', '"ttfts": [1.0, ', 1),
    ),
    "guidellm truncated": (GUIDELLM, "bad.json", _cut),
    "guidellm without requests": (
        GUIDELLM,
        "bad.json",
        lambda t: json.dumps({**json.loads(t), "benchmarks": [{"duration": 1.0}]}),
    ),
    "guidellm an unknown strategy": (
        GUIDELLM,
        "bad.json",
        lambda t: t.replace('"type_": "concurrent"', '"type_": "teleport"'),
    ),
    "aiperf truncated": (AIPERF, "bad_aiperf.json", _cut),
    "aiperf a negative duration": (
        AIPERF,
        "bad_aiperf.json",
        lambda t: json.dumps(
            {k: v for k, v in json.loads(t).items() if k != "end_time"} | {"benchmark_duration": {"avg": -1}}
        ),
    ),
}


@pytest.mark.parametrize("kind", list(BROKEN))
def test_a_broken_file_of_each_tool_is_one_line_and_nothing_is_stored(store, tmp_path, kind):
    from engine.errors import PhoenixError

    source, name, edit = BROKEN[kind]
    bad = tmp_path / name
    bad.write_text(edit(source.read_text()))
    with pytest.raises(PhoenixError) as err:
        import_results(store, [SGLANG, bad])  # a good file first: all or nothing
    assert "\n" not in str(err.value) and str(bad) in str(err.value)
    assert store.list_runs() == []


def test_a_broken_aiperf_record_is_one_line_naming_the_records_file(store, tmp_path):
    from engine.errors import PhoenixError

    (tmp_path / "x_aiperf.json").write_text(AIPERF.read_text())
    (tmp_path / "x.jsonl").write_text(AIPERF_RECORDS.read_text().replace('"value":', '"value":"soon","v":', 1))
    with pytest.raises(PhoenixError, match=r"x\.jsonl \(record 1\): \w+ = 'soon' is not a number") as err:
        import_results(store, [tmp_path / "x_aiperf.json"])
    assert "\n" not in str(err.value)
    assert store.list_runs() == []


@pytest.mark.pages
def test_the_new_run_form_imports_an_upload_after_showing_what_it_found(tmp_path, monkeypatch):
    from apptest import open_page

    from db.migrate import ensure_schema
    from db.store import Store

    url = f"sqlite:///{tmp_path / 'p.db'}"
    ensure_schema(url)
    monkeypatch.setenv("PHOENIX_DB", url)
    at = open_page("new_run")
    uploads = [(AIPERF.name, AIPERF.read_bytes(), "application/json")]
    uploads.append((AIPERF_RECORDS.name, AIPERF_RECORDS.read_bytes(), "application/json"))
    at.file_uploader(key="imp_files").set_value(uploads).run()
    assert not at.exception
    shown = [c.value for c in at.code]
    assert any("aiperf: " in s and "(12 rows)" in s for s in shown)  # what it found, as literal text
    assert Store(url).list_runs() == []  # nothing stored before the user confirms
    at.text_input(key="imp_hardware").input("2-core Xeon").run()
    at.button(key="imp_go").click().run()
    assert not at.exception
    (run,) = Store(url).list_runs()
    assert run.config["hardware"] == "2-core Xeon" and len(Store(url).requests(run.id)) == 12
    at.file_uploader(key="imp_files").set_value(("x.json", b'{"duration": 1', "application/json")).run()
    assert any("not JSON" in c.value for c in at.code)  # the CLI's refusal line, and nothing more stored
    assert len(Store(url).list_runs()) == 1
