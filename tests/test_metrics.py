"""Prometheus /metrics in vLLM's shape, scraped from a live worker process."""
from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from db.entities import PositionCount
from engine.bench.setup import create_run
from engine.observe.prometheus import Metrics
from helpers import bench_cfg, start_worker, stop, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples: dict, name: str, **labels) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == v2 for k, v2 in labels.items()))


@pytest.mark.slow
def test_a_live_worker_serves_vllm_shaped_counters_that_match_the_database(store, db_url, tiny_dirs, prompt_file):
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "fixed_2", "fixed_4"], max_new_tokens=16)
    run = create_run(store, cfg, status="queued")
    port = free_port()
    proc = start_worker(db_url, "--metrics-port", str(port), "--max-idle", "60")
    try:
        wait_for(lambda: store.get_run(run.id).status == "done", what="the run to finish")
        samples = wait_for(lambda: scrape(port), what="/metrics to answer")
    finally:
        stop(proc)
    rows = [r for r in store.requests(run.id)]
    spec = [r for r in rows if r.proposed]
    drafts = sum(r.positions[0].proposed for r in spec)
    assert total(samples, "phoenix:spec_decode_num_drafts_total") == drafts > 0
    assert total(samples, "phoenix:spec_decode_num_draft_tokens_total") == sum(r.proposed for r in spec)
    assert total(samples, "phoenix:spec_decode_num_accepted_tokens_total") == sum(r.accepted for r in spec)
    for pos in range(4):
        expected = sum(p.accepted for r in spec for p in r.positions if p.position == pos)
        assert total(samples, "phoenix:spec_decode_num_accepted_tokens_per_pos_total", position=str(pos)) == expected
    assert total(samples, "phoenix:spec_decode_num_accepted_tokens_per_pos_total", position="4") == 0
    for mode, k in (("target", "0"), ("fixed_2", "2"), ("fixed_4", "4")):
        n = sum(1 for r in rows if r.mode == mode)
        assert total(samples, "phoenix:request_latency_seconds_count", mode=mode, arm=k) == n == 3
        assert total(samples, "phoenix:request_tokens_per_second_count", mode=mode, arm=k) == n
    assert all(dict(ls).get("model_name") == cfg.target for (n, ls), _ in samples.items() if "spec_decode" in n)


def test_per_position_counters_follow_vllms_unconditional_definition():
    m = Metrics()
    rec = type("R", (), {"mode": "fixed_3", "k": 3, "latency_s": 1.0, "tokens_per_s": 10.0, "proposed": 12,
                         "accepted": 7, "positions": [PositionCount(0, 4, 4), PositionCount(1, 4, 2), PositionCount(2, 4, 1)]})()
    m.observe(rec, "t")
    assert m.drafts.labels("t", "0")._value.get() == 4  # four passes drafted
    assert [m.per_pos.labels("t", "0", str(i))._value.get() for i in range(3)] == [4, 2, 1]
    # vLLM's derived figures: acceptance 7/12, mean acceptance length 1 + 7/4
    assert m.accepted.labels("t", "0")._value.get() / m.draft_tokens.labels("t", "0")._value.get() == pytest.approx(7 / 12)


@pytest.mark.parametrize("how,value,pattern", [
    ("env", "http", "PHOENIX_METRICS_PORT must be a port number"),
    ("flag", "70000", "--metrics-port must be a port number"),
    ("flag", "busy", "cannot serve metrics on 127.0.0.1"),
])
def test_a_bad_metrics_port_is_one_clear_line(monkeypatch, tmp_path, capsys, how, value, pattern):
    from engine.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        value = str(taken.getsockname()[1]) if value == "busy" else value
        argv = ["worker", "--once", "--db", f"sqlite:///{tmp_path / 'x.db'}"]
        if how == "env":
            monkeypatch.setenv("PHOENIX_METRICS_PORT", value)
        else:
            argv += ["--metrics-port", value]
        assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert pattern in err[-1] and "Traceback" not in "\n".join(err)
