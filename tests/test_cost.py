"""Cost (issue 59): CPU seconds per 1,000 output tokens, from the process's measured CPU time: a lab run's per mode,
a load level's per variant from the server's process (a server Phoenix started: its session; Phoenix's own: its
/health), and never a made-up figure where the time could not be read."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

from helpers import bench_cfg

from engine.engines import process
from engine.engines.server_cpu import cost, cpu_reader
from engine.measure import cpu_per_1k_tokens


def test_a_process_sessions_cpu_time_is_read_from_proc_and_grows_with_work():
    before = process.session_cpu_s(os.getpid())
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    after = process.session_cpu_s(os.getpid())
    assert before is not None and after is not None and after - before >= 0.2
    assert process.session_cpu_s(2**22 + 12345) is None  # no such process: no figure


def test_phoenixs_health_carries_its_cpu_seconds_and_the_reader_takes_them():
    class Health(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps({"status": "ok", "cpu_s": 12.5}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert cpu_reader(f"http://127.0.0.1:{server.server_port}/v1", None, None)() == 12.5
    finally:
        server.shutdown()
    assert cpu_reader("http://127.0.0.1:9/v1", None, None)() is None  # nothing answers: no figure


def test_a_variants_cost_is_its_blocks_cpu_over_its_tokens_or_none():
    assert cost([[1.0, 500, 2.0], [1.0, 500, 3.0]]) == {"cpu_s": 5.0, "cpu_s_per_1k_tokens": 5.0}
    assert cost([[1.0, 500, 2.0], [1.0, 500, None]]) == {"cpu_s": None, "cpu_s_per_1k_tokens": None}
    assert cpu_per_1k_tokens(3.0, 0) is None and cpu_per_1k_tokens(None, 10) is None


def test_a_lab_run_keeps_each_modes_cpu_seconds_and_the_run_page_prices_a_thousand_tokens(
    store, tiny_dirs, prompt_file, db_url, monkeypatch
):
    from apptest import open_page

    from engine.bench.run import execute
    from engine.bench.setup import create_run

    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "ngram_3"], limit=2)
    run = create_run(store, cfg)
    assert execute(store, run.id, cfg, progress=False) == "done"
    spent = store.get_run(run.id).config["cpu_s"]
    assert set(spent) == {"target", "ngram_3"} and all(v > 0 for v in spent.values())
    monkeypatch.setenv("PHOENIX_DB", db_url)
    captions = [c.value for c in open_page("run", run=run.id).caption]
    assert any(
        c.startswith("Cost, CPU-seconds per 1,000 output tokens (spread in brackets): target ") for c in captions
    )
    kept = store.get_run(run.id).config
    rows = [r for r in store.requests(run.id) if not r.warmup]
    for mode in ("target", "ngram_3"):  # the seconds and the tokens they produced, counted together
        assert kept["cpu_tokens"][mode] == sum(r.output_tokens for r in rows if r.mode == mode)
        assert len(kept["cpu_each"][mode]) == sum(1 for r in rows if r.mode == mode)  # each request's: the spread
    # a session killed before it wrote its CPU time (kill -9, then resume): the page says what the cost covers
    store.merge_config(run.id, {"cpu_tokens": {"target": kept["cpu_tokens"]["target"] // 2}})
    captions = [c.value for c in open_page("run", run=run.id).caption]
    assert any("CPU timed for" in c and "target" in c for c in captions), captions


def test_the_cost_text_says_its_spread_and_what_it_does_not_cover():
    from engine.measure import cost_text

    assert cost_text(2.0, 1000, 1000, [1.5, 2.5]) == "2.0 (1.5-2.5)"
    assert cost_text(2.0, 500, 1000) == "4.0, CPU timed for 500 of 1,000 tokens"
    assert cost_text(None, 500, 1000) == "" and cost_text(1.0, 0, 10) == ""


def test_a_run_at_concurrency_n_prices_each_modes_groups(store, tiny_dirs, prompt_file):
    from engine.bench.run import execute
    from engine.bench.setup import create_run

    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "ngram_3"], limit=4, concurrency=2)
    run = create_run(store, cfg)
    assert execute(store, run.id, cfg, progress=False) == "done"
    kept = store.get_run(run.id).config
    rows = [r for r in store.requests(run.id) if not r.warmup]
    for mode in ("target", "ngram_3"):  # `bench --concurrency` once measured no CPU at all
        assert kept["cpu_s"][mode] > 0
        assert kept["cpu_tokens"][mode] == sum(r.output_tokens for r in rows if r.mode == mode)


def test_a_served_run_prices_its_traffic(tiny_dirs, tmp_path, monkeypatch):
    import urllib.request

    from apptest import open_page
    from helpers import http_server, migrated, tiny_service

    from db.store import Store

    url = migrated(f"sqlite:///{tmp_path / 'served.db'}")
    store = Store(url)
    service = tiny_service(tiny_dirs, store, max_batch=2)
    with http_server(service) as port:
        for i in range(3):
            body = json.dumps({"prompt": f"x = {i}\n", "max_tokens": 6}).encode()
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=60) as r:
                assert r.status == 200
    (run,) = store.list_runs()
    served = store.get_run(run.id).config["serve_cpu"]
    assert served["cpu_s"] > 0 and served["tokens"] == sum(r.output_tokens for r in store.requests(run.id))
    monkeypatch.setenv("PHOENIX_DB", url)
    captions = [c.value for c in open_page("run", run=run.id).caption]
    assert any("served traffic" in c and "since it was ready" in c for c in captions), captions
