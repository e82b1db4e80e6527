"""Phoenix stops only what it started: a pid is not an identity. Each process Phoenix starts is recorded with its
pid and its start time (and this boot's id); a stale pid file that now names somebody else's process, even one
whose command line holds the same words, is left alone."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest

from engine.engines import llamacpp
from engine.engines.llamacpp import LlamaCppConfig
from engine.errors import PhoenixError
from engine.queue import autostart
from engine.queue.autostart import identity, is_process, register, stop_workers, write_pid

pytestmark = pytest.mark.fast


@pytest.fixture
def decoy():
    """Somebody else's process whose command line holds every word Phoenix used to look for."""
    procs: list[subprocess.Popen] = []

    def make(*words: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *words])
        procs.append(proc)
        for _ in range(200):  # until it has exec'd, /proc shows the test's own command line
            if all(w in open(f"/proc/{proc.pid}/cmdline").read() for w in words):
                break
            time.sleep(0.01)
        return proc

    yield make
    for proc in procs:
        proc.kill()
        proc.wait()


def test_an_identity_is_stable_for_one_process_and_differs_for_one_started_later(decoy):
    a = decoy("x")
    time.sleep(0.05)  # start times count clock ticks (10 ms): a reused pid belongs to a process started later
    b = decoy("y")
    assert identity(a.pid) == identity(a.pid) is not None
    assert identity(a.pid) != identity(b.pid)
    assert is_process(a.pid, identity(a.pid)) and not is_process(a.pid, identity(b.pid))
    assert not is_process(a.pid, None) and not is_process(a.pid, "")
    recorded = identity(a.pid)
    a.kill()
    a.wait()
    assert not is_process(a.pid, recorded)  # gone: its own record no longer names a running process


@pytest.mark.parametrize("recorded", ["bare pid", "another identity"])
def test_llamacpp_stop_leaves_alone_a_process_a_stale_pid_file_names(tmp_path, decoy, recorded):
    proc = decoy("llama-server", "--port", "8090")
    cfg = LlamaCppConfig()
    pid_file = llamacpp.files(cfg, tmp_path)["pid"]
    pid_file.write_text(str(proc.pid) if recorded == "bare pid" else f"{proc.pid} boot:12345")
    assert llamacpp.running_pid(cfg, tmp_path) is None
    assert llamacpp.stop(cfg, tmp_path) is False
    assert llamacpp.stop_all(tmp_path) == []
    time.sleep(0.1)
    assert proc.poll() is None  # still running


def test_llamacpp_stop_signals_the_process_its_record_names(tmp_path, decoy):
    proc = decoy("llama-server")
    cfg = LlamaCppConfig()
    write_pid(llamacpp.files(cfg, tmp_path)["pid"], proc.pid)  # as `start` records the server it launched
    assert llamacpp.running_pid(cfg, tmp_path) == proc.pid
    assert llamacpp.stop(cfg, tmp_path, wait_s=5) is True
    assert proc.wait(5) is not None


def test_worker_stop_leaves_alone_another_process_named_like_a_worker(tmp_path, decoy):
    proc = decoy("-m", "engine", "worker")
    db = "sqlite:////tmp/other.db"
    folder = autostart.registry(tmp_path, db)
    folder.mkdir(parents=True)
    (folder / str(proc.pid)).write_text("")  # an entry without the identity Phoenix writes
    assert stop_workers(db, tmp_path, wait_s=0.5) == []
    time.sleep(0.1)
    assert proc.poll() is None


def test_a_worker_registers_with_its_identity_and_is_found_by_it(tmp_path, decoy):
    proc = decoy("-m", "engine", "worker")
    db = "sqlite:////tmp/ours.db"
    entry = register(tmp_path, db, proc.pid)
    assert entry.read_text() == identity(proc.pid)
    assert autostart.live_workers(db, tmp_path) == [proc.pid]


def test_the_server_key_holds_what_identifies_a_server_and_not_how_long_start_waits(tmp_path):
    cfg = LlamaCppConfig()
    assert llamacpp.files(cfg, tmp_path) == llamacpp.files(replace(cfg, startup_s=5.0), tmp_path)
    assert llamacpp.files(cfg, tmp_path) != llamacpp.files(replace(cfg, port=8091), tmp_path)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("port", 0, r"^--port must be in 1\.\.65535, got 0$"),
        ("threads", 0, r"^--threads must be in 1\.\.512, got 0$"),
        ("ctx", -5, r"^--ctx must be in 64\.\.1048576, got -5$"),
        ("parallel", 0, r"^--parallel must be in 1\.\.256, got 0$"),
    ],
)
def test_an_out_of_range_llamacpp_setting_is_one_line_before_anything_starts(tmp_path, field, value, message):
    with pytest.raises(PhoenixError, match=message):
        llamacpp.start(replace(LlamaCppConfig(), **{field: value}), tmp_path)
    assert not list(tmp_path.glob("llamacpp-*"))


def test_two_starts_of_one_configuration_take_turns(tmp_path, monkeypatch):
    inside: list[int] = []
    overlap: list[bool] = []

    def slow_start(cfg, argv, data_dir):
        inside.append(1)
        overlap.append(len(inside) > 1)
        time.sleep(0.2)
        inside.pop()
        return {"state": "started"}

    monkeypatch.setattr(llamacpp, "command", lambda cfg: ["llama-server"])
    monkeypatch.setattr(llamacpp, "_start", slow_start)
    threads = [threading.Thread(target=llamacpp.start, args=(LlamaCppConfig(), tmp_path)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap == [False, False]
