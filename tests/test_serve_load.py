"""Phoenix's server under load and as a process: the load sweep records each level as a run with its variants side
by side, the dashboard shows the live run and the levels, SIGTERM drains and records, kill -9 keeps what was written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from apptest import open_page
from helpers import free_port, http_server, migrated, tiny_service, wait_for, write_prompts

from db.store import Store
from engine.errors import PhoenixError

pytestmark = pytest.mark.subprocess  # a server on a port, a load sweep, a process to signal


@pytest.fixture(scope="module")
def swept(tiny_dirs, tmp_path_factory):
    """The tiny Qwen3 pair served with its agreeing draft; a load sweep of two levels, three variants."""
    from engine.engines.config import LoadConfig
    from engine.engines.load import sweep as load_sweep

    root = tmp_path_factory.mktemp("load")
    prompts = write_prompts(root / "prompts.jsonl")
    url = migrated(f"sqlite:///{root / 'load.db'}")
    store = Store(url)
    service = tiny_service(tiny_dirs, store)
    with http_server(service) as port:
        cfg = LoadConfig(
            url=f"http://127.0.0.1:{port}",
            prompts=prompts,
            limit=4,
            max_new_tokens=12,
            chat=False,
            concurrency="1,3",
            variants="none,auto,k2",
        )
        runs = load_sweep(store, cfg, say=lambda _line: None)
    return store, url, runs, service.run_id


def test_each_level_is_a_run_with_every_variant_side_by_side_and_identical_to_speculation_off(swept):
    store, _, runs, _ = swept
    assert len(runs) == 2
    for run_id, c in zip(runs, (1, 3)):
        info = store.get_run(run_id)
        assert info.status == "done" and info.config["level"] == c
        recs = store.requests(run_id)
        # in the server's own grammar, as its live run names them: auto and k2 of a server drafting with model
        assert sorted({r.mode for r in recs}) == sorted(f"phoenix-{v}_c{c}" for v in ("none", "model-auto", "model-k2"))
        assert all(r.error is None and r.ttft_s is not None and 0 < r.ttft_s <= r.latency_s for r in recs)
        spec = [r for r in recs if not r.mode.startswith("phoenix-none")]
        assert all(r.identical for r in spec) and sum(r.proposed for r in spec) > 0
        assert all(bool(r.positions) == bool(r.proposed) and (r.passes == 0 or r.batch_size >= 1) for r in spec)
        assert set(info.config["wall_s"]) == {"none", "model-auto", "model-k2"}
    assert store.get_run(runs[1]).config["order"] == ["model-k2", "model-auto", "none"]  # reversed every other level
    live = {r.mode for r in store.requests(swept[3])}
    assert {"phoenix-model-auto_live", "phoenix-model-k2_live"} <= live  # one name per kind of request


def test_a_k_the_server_refuses_is_one_line_before_anything_is_sent(swept, monkeypatch):
    from engine.engines import load
    from engine.engines.config import LoadConfig
    from engine.engines.load import sweep

    store = swept[0]
    monkeypatch.setattr(load, "served_drafter", lambda url, timeout_s: ("model", 8))
    monkeypatch.setattr(load, "served_model", lambda url, timeout_s, api_key=None: "m")
    before = len(store.list_runs())
    with pytest.raises(PhoenixError, match="--variants k99: the server takes k up to 8"):
        sweep(store, LoadConfig(variants="none,k99", warmup=False), say=lambda _: None)
    assert len(store.list_runs()) == before  # nothing recorded


def test_two_spellings_of_one_variant_are_refused_before_anything_is_sent():
    from engine.engines.protocol import named

    assert [named(v, "eagle3") for v in ("auto", "eagle3", "eagle3-auto")] == ["eagle3-auto"] * 3
    assert (
        named("k0", "eagle3") == "none" and named("k3", "model") == "model-k3" and named("choice", "x") == "choice-auto"
    )


@pytest.mark.pages
def test_the_levels_table_and_the_live_runs_loop_are_on_the_run_pages(swept, monkeypatch):
    store, url, runs, live_id = swept
    monkeypatch.setenv("PHOENIX_DB", url)
    at = open_page("run", run=runs[1])
    assert any("Under load: concurrency 3" in s.value for s in at.subheader)
    table = next(d.value for d in at.dataframe if "TTFT p95 (s)" in d.value.columns)
    assert len(table) == 3 and (table["throughput tok/s"] > 0).all()
    assert table.loc[table["mode"] == "phoenix-none_c3", "throughput x reference (ratio of totals)"].iloc[0] == 1.0
    at = open_page("run", run=live_id)
    assert any("Phoenix serving: drafter model, max batch 4" in s.value for s in at.subheader)
    by_batch = next(d.value for d in at.dataframe if "share k = 0" in d.value.columns)
    assert by_batch["n"].sum() == sum(1 for s in store.serve_steps(live_id) if s.k is not None)


def serve_process(tiny_dirs, tmp_path, port: int, *extra: str) -> subprocess.Popen:
    d = tiny_dirs["qwen3"]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine",
            "serve",
            "--target",
            d["target"],
            "--draft",
            d["near"],
            "--drafter",
            "model",
            "--port",
            str(port),
            "--no-profile",
            "--db",
            str(tmp_path / "p.db"),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def post(port: int, body: dict, timeout: float = 60):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    return urllib.request.urlopen(req, timeout=timeout)


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_sigterm_drains_the_request_in_flight_and_records_it(tiny_dirs, tmp_path):
    port = free_port()
    proc = serve_process(tiny_dirs, tmp_path, port)
    try:
        wait_for(lambda: healthy(port) or proc.poll() is not None, 120, "the server")
        lines: list[str] = []
        with post(port, {"prompt": "def f(x):\n", "max_tokens": 300, "stream": True}) as resp:
            for raw in resp:
                lines.append(raw.decode())
                if len(lines) == 3:
                    proc.send_signal(signal.SIGTERM)  # mid-stream: the answer still arrives whole
        assert lines[-2].strip() == "data: [DONE]" or any("[DONE]" in x for x in lines[-3:])
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    (run,) = store.list_runs()
    (rec,) = store.requests(run.id)
    assert run.status == "done" and rec.error is None and rec.output_tokens > 0


def test_a_half_sent_body_cannot_hold_the_exit_after_sigterm(tiny_dirs, tmp_path):
    import socket

    port = free_port()
    proc = serve_process(tiny_dirs, tmp_path, port, "--shutdown-timeout-s", "2")
    try:
        wait_for(lambda: healthy(port) or proc.poll() is not None, 120, "the server")
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{\"prompt\": ")  # fmt: skip
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0  # it once waited for the rest of the body for ever
    finally:
        if proc.poll() is None:
            proc.kill()
    (run,) = Store(f"sqlite:///{tmp_path / 'p.db'}").list_runs()
    assert run.status == "done"


def test_a_second_sigterm_ends_the_requests_in_flight_now_and_records_them(tiny_dirs, tmp_path):
    port = free_port()
    proc = serve_process(tiny_dirs, tmp_path, port, "--shutdown-timeout-s", "600", "--max-tokens-cap", "100000")
    try:
        wait_for(lambda: healthy(port) or proc.poll() is not None, 120, "the server")
        with post(port, {"prompt": "def f(x):\n", "max_tokens": 480, "stream": True}) as resp:
            resp.readline()
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)  # no waiting out the deadline: the request ends now
            start = time.monotonic()
            assert proc.wait(30) == 0 and time.monotonic() - start < 30
    finally:
        if proc.poll() is None:
            proc.kill()
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    (run,) = store.list_runs()
    out = proc.stdout.read() if proc.stdout else ""
    # done only if it finished before the second signal; the server's log says why otherwise
    assert run.status in ("interrupted", "done"), f"{run.error}\n{out[-2000:]}"
    if run.status == "interrupted":
        assert "second signal" in (run.error or "")
        recs = store.requests(run.id)
        assert any(r.error is not None and "second signal" in r.error for r in recs)


def test_kill_9_loses_nothing_already_recorded(tiny_dirs, tmp_path):
    port = free_port()
    proc = serve_process(tiny_dirs, tmp_path, port)
    try:
        wait_for(lambda: healthy(port) or proc.poll() is not None, 120, "the server")
        for i in range(2):
            with post(port, {"prompt": f"x = {i}\n", "max_tokens": 5}) as r:
                assert r.status == 200
        store = Store(f"sqlite:///{tmp_path / 'p.db'}")
        (run,) = store.list_runs()
        wait_for(lambda: store.count_requests(run.id) == 2, 30, "both rows")
    finally:
        proc.kill()
        proc.wait(30)
    assert store.count_requests(run.id) == 2
    out = proc.stdout.read() if proc.stdout else ""
    assert "Phoenix serves" in out and "Traceback" not in out
    from engine.preload import allocator

    if allocator():  # `serve` restarted itself with tcmalloc (--preload auto), one process, and the run says so
        assert "preloaded libtcmalloc_minimal.so.4" in out
        assert store.get_run(run.id).config["environment"]["preload"] == "libtcmalloc_minimal.so.4"


def test_a_sweep_sends_its_api_key_and_never_stores_it(tiny_dirs, tmp_path):
    from engine.decode.decoder import Decoder
    from engine.decode.loading import load_pair
    from engine.engines.config import LoadConfig
    from engine.engines.load import sweep
    from engine.serve.config import ServeConfig, check_serve
    from engine.serve.service import Service

    store = Store(migrated(f"sqlite:///{tmp_path / 'key.db'}"))
    d = tiny_dirs["qwen3"]
    decoder = Decoder(load_pair(d["target"], d["near"], "cpu", "float32"))
    service = Service(check_serve(ServeConfig(drafter="model", profile=False, api_key="s3cret")), decoder, store)
    with http_server(service) as port:
        base = dict(url=f"http://127.0.0.1:{port}", prompts=write_prompts(tmp_path / "p.jsonl"), limit=2, warmup=False)
        with pytest.raises(PhoenixError, match="401"):  # without the key: one line, nothing sent
            sweep(store, LoadConfig(**base, max_new_tokens=4, chat=False, concurrency="1"), say=lambda _: None)
        (run_id,) = sweep(
            store,
            LoadConfig(**base, max_new_tokens=4, chat=False, concurrency="1", api_key="s3cret"),
            say=lambda _: None,
        )
    info = store.get_run(run_id)
    assert info.status == "done" and all(r.error is None for r in store.requests(run_id))
    assert info.config["load"]["api_key"] == "set" and "s3cret" not in json.dumps(info.config)


@pytest.mark.parametrize("deadline", ["2.9"])
def test_at_the_shutdown_deadline_every_held_request_ends_aborted_with_an_openai_error_and_is_recorded(
    tiny_dirs, tmp_path, deadline
):
    """uvicorn was given max(1, int(deadline)), at or below Phoenix's own deadline, so it cancelled the answers first:
    whole requests got a plain-text 500, streams ended without [DONE], and rows said the client went away."""
    import threading

    port = free_port()
    proc = serve_process(tiny_dirs, tmp_path, port, "--shutdown-timeout-s", deadline, "--max-batch", "1")
    answers: dict[int, tuple[int, str]] = {}
    try:
        wait_for(lambda: healthy(port) or proc.poll() is not None, 120, "the server")

        def whole(i: int) -> None:
            try:
                with post(port, {"prompt": f"def f{i}(x):\n", "max_tokens": 480, "ignore_eos": True}) as r:
                    answers[i] = (r.status, r.read().decode())
            except urllib.error.HTTPError as exc:
                answers[i] = (exc.code, exc.read().decode())

        # twelve: on the fastest CPU here a request takes 0.4 s, and six could all end inside the 2.9 s deadline
        workers = [threading.Thread(target=whole, args=(i,)) for i in range(12)]
        for w in workers:
            w.start()
        stream: list[str] = []
        with post(port, {"prompt": "x", "max_tokens": 480, "ignore_eos": True, "stream": True}) as resp:
            proc.send_signal(signal.SIGTERM)
            stream = [raw.decode() for raw in resp]
        for w in workers:
            w.join(60)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    log = proc.stdout.read() if proc.stdout else ""
    assert "CancelledError" not in log and "Traceback" not in log, log[-3000:]
    assert any("[DONE]" in line for line in stream)
    ended = [json.loads(text) for status, text in answers.values() if status != 200]
    assert len(answers) == 12 and ended, answers  # twelve of 0.4-1 s each, one at a time: the deadline ends some
    assert all(e["error"]["code"] == "aborted" and "deadline" in e["error"]["message"] for e in ended)
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    (run,) = store.list_runs()
    recs = store.requests(run.id)
    assert len(recs) == 13 and run.status == "interrupted"
    aborted = [r for r in recs if r.error]
    assert len(aborted) >= len(ended) and all("deadline" in r.error for r in aborted), [r.error for r in aborted]


def test_two_passes_of_the_same_prompts_are_cold_by_default_and_warm_only_when_named(tiny_dirs, tmp_path):
    """The cold protocol: a second sweep of the same (long) prompts against the same server finds none of them in
    its prefix cache, and every row says so (0, not unknown); under --cache warm the same sweep is served from it.
    Outputs stay identical to speculation off either way (the salt changes the cache key, not the prompt)."""
    import json as _json

    from engine.engines.config import LoadConfig
    from engine.engines.load import sweep as load_sweep

    body = "".join(f"    y{j} = x * {j} + {j}\n" for j in range(12))
    path = tmp_path / "long.jsonl"
    path.write_text("".join(_json.dumps({"id": f"p{i}", "prompt": f"def g{i}(x):\n{body}"}) + "\n" for i in range(3)))
    store = Store(migrated(f"sqlite:///{tmp_path / 'cold.db'}"))
    service = tiny_service(tiny_dirs, store)
    with http_server(service) as port:
        cfg = LoadConfig(
            url=f"http://127.0.0.1:{port}", prompts=str(path), limit=3, max_new_tokens=6, chat=False,
            concurrency="1", variants="none,k2",
        )  # fmt: skip
        cold = [load_sweep(store, cfg, say=lambda _line: None)[0] for _ in range(2)]
        from dataclasses import replace

        repeated = load_sweep(store, replace(cfg, request_rate="50,50"), say=lambda _line: None)  # one rate twice
        assert len(repeated) == 2
        cold += repeated  # the second level is a new pass, not a re-send into the first one's cache
        warm = [load_sweep(store, replace(cfg, cache="warm"), say=lambda _line: None)[0] for _ in range(2)]
    for run_id in cold:
        rows = store.requests(run_id)
        assert rows and all(r.cached_tokens == 0 and r.prompt_tokens >= 16 for r in rows)
        info = store.get_run(run_id)
        assert info.config["cache_scenario"] == "cold"
        assert all(f["cached_share"] == 0.0 for f in info.config["figures"].values())
        assert all(r.identical for r in rows if not r.mode.startswith("phoenix-none"))
    rows = store.requests(warm[1])
    assert sum(r.cached_tokens or 0 for r in rows) > 0  # the warm scenario is what it says
    info = store.get_run(warm[1])
    assert info.config["cache_scenario"].startswith("warm")
    assert any(f["cached_share"] > 0 for f in info.config["figures"].values())


def test_under_the_system_scenario_a_pass_shares_its_system_prompt_and_nothing_from_an_earlier_pass(
    tiny_dirs, tmp_path
):
    """`--cache system`: one cache_salt a pass, so each variant's first request prefills the system prompt and the
    rest of its pass take its whole blocks from the cache, never their own text; a second sweep starts cold again
    (what a fleet plan prices, engine.analysis.fleet_plan.Blocks)."""
    import json as _json
    from dataclasses import replace

    from engine.engines.config import LoadConfig
    from engine.engines.load import sweep as load_sweep

    system = tmp_path / "system.txt"
    system.write_text("".join(f"Rule {j}: answer with code that runs.\n" for j in range(10)))
    path = tmp_path / "p.jsonl"
    lines = (_json.dumps({"id": f"p{i}", "prompt": f"def g{i}(x): return x + {i}"}) + "\n" for i in range(3))
    path.write_text("".join(lines))
    store = Store(migrated(f"sqlite:///{tmp_path / 'system.db'}"))
    service = tiny_service(tiny_dirs, store)
    with http_server(service) as port:
        cfg = LoadConfig(
            url=f"http://127.0.0.1:{port}", prompts=str(path), limit=3, max_new_tokens=4, chat=False,
            concurrency="1", variants="none,k2", cache="system", system_prompt=str(system),
        )  # fmt: skip
        runs = [load_sweep(store, cfg, say=lambda _line: None)[0] for _ in range(2)]
        cold = load_sweep(store, replace(cfg, cache="cold"), say=lambda _line: None)[0]
    for run_id in runs:
        info = store.get_run(run_id)
        assert info.config["cache_scenario"].startswith("system")
        for mode in {r.mode for r in store.requests(run_id)}:
            rows = sorted((r for r in store.requests(run_id) if r.mode == mode), key=lambda r: r.seq)
            assert rows[0].cached_tokens == 0  # each pass's first request: nothing from an earlier pass
            assert all(16 <= r.cached_tokens < r.prompt_tokens - 8 for r in rows[1:]), [r.cached_tokens for r in rows]
    assert all(r.cached_tokens == 0 for r in store.requests(cold))
