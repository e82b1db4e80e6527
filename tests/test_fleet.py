"""`fleet start|stop`: two of Phoenix's servers behind a real vllm-router, each recording its own live run in the one
database, speaking the model-server protocol a router reads; `stop` stops exactly what `start` started."""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port

from engine.engines import replicas
from engine.errors import PhoenixError

pytestmark = [
    pytest.mark.services,
    pytest.mark.skipif(
        not (Path(sys.executable).parent / "vllm-router").is_file()
        and not shutil.which("vllm-router")
        and not os.environ.get("PHOENIX_REQUIRE_ROUTER"),
        reason="vllm-router is not installed (pip install -r requirements-engines.txt)",
    ),
]


def post(url: str, prompt: str) -> dict:
    body = json.dumps({"prompt": prompt, "max_tokens": 6}).encode()
    req = urllib.request.Request(f"{url}/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def test_two_replicas_behind_a_real_router_record_their_own_runs_and_stop_is_exact(tmp_path, monkeypatch):
    from db.migrate import ensure_schema
    from db.store import Store

    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    ensure_schema(db)
    port = free_port()
    cfg = replicas.FleetConfig(replicas=2, router="round_robin", port=port, db=db, max_batch=2, name="ci")
    record = replicas.start(cfg, tmp_path, say=lambda _: None)
    try:
        assert [p["name"] for p in record["processes"]] == ["replica 0", "replica 1", "vllm-router"]
        answers = [post(record["url"], f"def f{i}(x):\n") for i in range(4)]
        assert all(a["choices"][0]["text"] is not None for a in answers)
        for i in range(2):  # each replica speaks the protocol under the names a router reads
            with urllib.request.urlopen(f"http://127.0.0.1:{port + 1 + i}/metrics", timeout=10) as r:
                body = r.read().decode()
            assert "vllm:num_requests_waiting" in body and "vllm:kv_cache_usage_perc" in body
            assert 'vllm:cache_config_info{block_size="16"' in body
        with pytest.raises(PhoenixError, match="already running"):
            replicas.start(cfg, tmp_path, say=lambda _: None)
    finally:
        stopped = replicas.stop(port, tmp_path)
    assert sorted(stopped) == ["replica 0", "replica 1", "vllm-router"]
    store = Store(db)
    runs = {r.name: r for r in store.list_runs()}
    assert set(runs) == {"ci replica 0", "ci replica 1"} and all(r.status == "done" for r in runs.values())
    assert sorted(store.count_requests(r.id) for r in runs.values()) == [2, 2]  # round robin: two each
    with pytest.raises(PhoenixError, match=f"no fleet was started on port {port}"):
        replicas.stop(port, tmp_path)
    # the Fleet page groups the two runs as one fleet, names its router, and gives each replica its own row
    from apptest import open_page

    monkeypatch.setenv("PHOENIX_DB", db)
    at = open_page("fleet")
    text = " ".join(t.value for t in at.text)  # stored strings as text, never Markdown
    assert f"Router round_robin at http://127.0.0.1:{port}" in text and "2 replica(s)" in text
    (table, *_) = [d.value for d in at.dataframe]
    assert list(table["replica"]) == ["ci replica 0", "ci replica 1"] and list(table["answered"]) == [2, 2]


def test_bad_fleet_settings_are_one_line_before_anything_starts(tmp_path):
    for settings, says in (
        ({"replicas": 0}, "--replicas must be in 1..16"),
        ({"port": 65535}, "--port must be in 1..65533"),
        ({"router": "kv_aware"}, "--router must be cache_aware, power_of_two or round_robin"),
    ):
        with pytest.raises(PhoenixError, match=says):
            replicas.start(replicas.FleetConfig(**settings), tmp_path, say=lambda _: None)
    assert not list(tmp_path.glob("fleet-*"))


def _running(port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            body = r.read().decode()
    except OSError:
        return 0.0
    line = next((ln for ln in body.splitlines() if ln.startswith("vllm:num_requests_running")), "x 0")
    return float(line.rsplit(" ", 1)[-1])


@pytest.mark.parametrize("router", ["round_robin", "cache_aware"])
def test_a_replica_killed_mid_load_loses_no_request_silently(tmp_path, router):
    """Issue 60: one replica SIGKILLed while it holds requests. The load client's run records every request it
    sent, answered or an error the client saw; the router sends the later ones to the replica left. Under both
    policies (cache_aware is vllm-router's default; it does not retry what the dead replica held: those are error
    rows). `fleet stop` then closes the dead replica's run, which a kill left "running"."""
    import signal
    import subprocess
    import time

    from db.migrate import ensure_schema
    from db.store import Store

    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    ensure_schema(db)
    port = free_port()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"def f{i}(x):\n"}) + "\n" for i in range(16)))
    cfg = replicas.FleetConfig(replicas=2, router=router, port=port, db=db, max_batch=2, name="kill")
    record = replicas.start(cfg, tmp_path, say=lambda _: None)
    victim = next(p for p in record["processes"] if p["name"] == "replica 1")
    argv = [sys.executable, "-m", "engine", "engines", "load", "--url", f"http://127.0.0.1:{port}", "--engine"]
    argv += ["phoenix", "--variants", "none", "--no-chat", "--prompts", str(prompts), "--limit", "16"]
    argv += ["--max-new-tokens", "300", "--concurrency", "4", "--name", "through the router", "--db", db]
    try:
        load = subprocess.Popen(argv, cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip
        deadline = time.monotonic() + 120
        while _running(port + 2) < 1 and time.monotonic() < deadline and load.poll() is None:
            time.sleep(0.05)
        assert _running(port + 2) >= 1, "replica 1 never held a request"
        os.kill(victim["pid"], signal.SIGKILL)
        out, _ = load.communicate(timeout=300)
    finally:
        said = replicas.stop(port, tmp_path)
    store = Store(db)
    (run,) = [r for r in store.list_runs() if r.name.startswith("through the router")]
    rows = store.requests(run.id)
    assert len(rows) == 16, out[-2000:]  # every request the client sent is a row
    failed = [r for r in rows if r.error]
    answered = [r for r in rows if not r.error]
    # what the victim held either came back through the router's retry (vllm-router retries by default) or is an
    # error the client saw, with its message, in the store: never a row missing or an empty answer
    assert all(r.error.strip() for r in failed), out[-2000:]
    assert len(failed) <= 4 and all(r.output_tokens > 0 for r in answered)
    last = sorted(rows, key=lambda r: r.seq)[-4:]
    assert all(not r.error for r in last), [r.error for r in last]  # routed around the dead replica
    replica0 = next(r for r in store.list_runs() if r.name == "kill replica 0")
    assert store.count_requests(replica0.id) >= len(answered) - 4  # the replica left answered the rest
    dead = next(r for r in store.list_runs() if r.name == "kill replica 1")
    assert dead.status == "interrupted" and "exited before `fleet stop`" in (dead.error or ""), dead
    assert f"replica 1 (had already stopped; its run #{dead.id} marked interrupted)" in said, said
