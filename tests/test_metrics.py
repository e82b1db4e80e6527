"""Prometheus /metrics in vLLM's shape, scraped from a live worker process."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest
from helpers import bench_cfg, start_worker, stop, wait_for
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from db.entities import PositionCount
from engine.bench.setup import create_run
from engine.observe.prometheus import Metrics


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
    return sum(
        v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == v2 for k, v2 in labels.items())
    )


@pytest.mark.subprocess
def test_a_live_worker_serves_vllm_shaped_counters_that_match_the_database(store, db_url, tiny_dirs, prompt_file):
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_2", "model_4"], max_new_tokens=16)
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
    for mode, k in (("target", "0"), ("model_2", "2"), ("model_4", "4")):
        n = sum(1 for r in rows if r.mode == mode)
        assert total(samples, "phoenix:request_latency_seconds_count", mode=mode, arm=k) == n == 3
        assert total(samples, "phoenix:request_tokens_per_second_count", mode=mode, arm=k) == n
    assert all(dict(ls).get("model_name") == cfg.target for (n, ls), _ in samples.items() if "spec_decode" in n)


def test_per_position_counters_follow_vllms_unconditional_definition():
    m = Metrics()
    rec = type(
        "R",
        (),
        {
            "mode": "model_3",
            "k": 3,
            "latency_s": 1.0,
            "tokens_per_s": 10.0,
            "proposed": 12,
            "accepted": 7,
            "positions": [PositionCount(0, 4, 4), PositionCount(1, 4, 2), PositionCount(2, 4, 1)],
        },
    )()
    m.observe(rec, "t")
    assert m.drafts.labels("t", "0")._value.get() == 4  # four passes drafted
    assert [m.per_pos.labels("t", "0", str(i))._value.get() for i in range(3)] == [4, 2, 1]
    # vLLM's derived figures: acceptance 7/12, mean acceptance length 1 + 7/4
    assert m.accepted.labels("t", "0")._value.get() / m.draft_tokens.labels("t", "0")._value.get() == pytest.approx(
        7 / 12
    )


@pytest.mark.parametrize(
    "how,value,pattern",
    [
        ("env", "http", "PHOENIX_METRICS_PORT must be a port number"),
        ("flag", "70000", "--metrics-port must be a port number"),
        ("flag", "busy", "cannot serve metrics on 127.0.0.1"),
    ],
)
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


def test_the_grafana_dashboard_file_is_the_one_the_code_builds():
    from engine.observe.grafana import FILE, PANELS, render

    assert FILE.read_text() == render(), (
        "run: python -c 'from engine.observe.grafana import FILE, render; FILE.write_text(render())'"
    )
    assert {t for t, _, _ in PANELS} >= {
        "Draft acceptance rate",
        "Mean acceptance length",
        "Acceptance by draft position",
        "Tokens/sec by mode and arm (mean per request)",
    }


def test_a_new_run_precreates_every_child_at_zero_as_vllm_does():
    m = Metrics()
    m.prepare("tgt", 4, [("target", 0), ("bandit", 2), ("bandit", 4)])
    body = generate_latest(m.registry).decode()
    for pos in range(4):
        assert (
            f'phoenix:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="tgt",position="{pos}"}} 0.0'
            in body
        )
    assert 'position="4"' not in body
    assert 'phoenix:spec_decode_num_drafts_total{engine="0",model_name="tgt"} 0.0' in body
    assert 'phoenix:request_tokens_per_second_count{arm="4",mode="bandit"} 0.0' in body
    assert 'phoenix:num_requests_running{engine="0",model_name="tgt"} 0.0' in body


PROMETHEUS = shutil.which("prometheus")


def answers(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=2).status == 200
    except OSError:
        return False


def promql(base: str, expr: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def scalar(base: str, expr: str) -> str | None:
    result = promql(base, expr)
    return result[0]["value"][1] if result else None


@pytest.mark.services
@pytest.mark.skipif(
    PROMETHEUS is None and not os.environ.get("PHOENIX_REQUIRE_PROMETHEUS"),
    reason="Debian's prometheus is not installed (.ci/run installs it)",
)
def test_every_dashboard_expression_returns_what_the_database_implies_through_a_real_prometheus(
    store, db_url, tiny_dirs, prompt_file, tmp_path
):
    from engine.observe.grafana import PANELS

    assert PROMETHEUS, "PHOENIX_REQUIRE_PROMETHEUS is set but no prometheus binary is on PATH"
    port, prom_port = free_port(), free_port()
    (tmp_path / "prometheus.yml").write_text(
        f"global: {{scrape_interval: 100ms, scrape_timeout: 90ms}}\n"
        f"scrape_configs: [{{job_name: phoenix, static_configs: [{{targets: ['127.0.0.1:{port}']}}]}}]\n"
    )
    prom = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{prom_port}"
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_2", "bandit"], arms=[0, 2, 4], max_new_tokens=16)
    worker = None
    try:
        wait_for(lambda: answers(f"{base}/-/ready"), what="Prometheus to start")
        worker = start_worker(db_url, "--metrics-port", str(port), "--max-idle", "120")
        wait_for(lambda: scalar(base, "up") == "1", what="the first scrape")
        run = create_run(store, cfg, status="queued")
        wait_for(lambda: store.get_run(run.id).status == "done", what="the run to finish")
        rows = store.requests(run.id)
        spec = [r for r in rows if r.proposed]
        drafts, proposed, accepted = (
            sum(r.positions[0].proposed for r in spec),
            sum(r.proposed for r in spec),
            sum(r.accepted for r in spec),
        )
        wait_for(
            lambda: (
                scalar(base, "sum(phoenix:spec_decode_num_drafts_total)") == str(drafts)
                and scalar(base, "sum(phoenix:num_requests_running)") == "0"
            ),
            timeout=30,
            what="the last scrape",
        )
        got = {
            title: [
                (r["metric"], float(r["value"][1]))
                for r in promql(base, targets[0][0].replace("$__rate_interval", "10m").replace("$model_name", ".*"))
            ]
            for title, _, targets in PANELS
        }
    finally:
        stop(prom)
        if worker is not None:
            stop(worker)
    assert got["Draft acceptance rate"][0][1] == pytest.approx(accepted / proposed)
    assert got["Mean acceptance length"][0][1] == pytest.approx(1 + accepted / drafts)
    per_pos = {int(m["position"]): v for m, v in got["Acceptance by draft position"]}
    assert sorted(per_pos) == [0, 1, 2, 3]  # k up to 4, each child there from the start
    for pos, value in per_pos.items():
        assert value == pytest.approx(sum(p.accepted for r in spec for p in r.positions if p.position == pos) / drafts)
    tps = {(m["mode"], int(m["arm"])): v for m, v in got["Tokens/sec by mode and arm (mean per request)"]}
    for (mode, k), value in tps.items():
        mine = [r.tokens_per_s for r in rows if r.mode == mode and r.k == k]
        assert value == pytest.approx(sum(mine) / len(mine))
    assert set(tps) == {(r.mode, r.k) for r in rows}
    shares = {(m["mode"], int(m["arm"])): v for m, v in got["Requests per second by mode and arm"]}
    for key, value in shares.items():
        assert value / sum(shares.values()) == pytest.approx(sum((r.mode, r.k) == key for r in rows) / len(rows))
    assert got["Requests running"][0][1] == 0
