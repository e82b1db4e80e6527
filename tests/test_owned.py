"""A run owned by a foreground process (a sweep, a watch, a load level) heartbeats while it works and ends as what
happened to it: interrupted on Ctrl-C or SIGTERM, failed with its line on any error. Nothing stays `running`."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from helpers import migrated

from db.store import Store
from engine.errors import PhoenixError
from engine.queue.owned import owned

pytestmark = pytest.mark.fast


@pytest.fixture
def store(tmp_path):
    return Store(migrated(f"sqlite:///{tmp_path / 'owned.db'}"))


def _run(store: Store) -> int:
    return store.create_run("sweep", {}, "m", None, 1).id


def test_an_owned_run_heartbeats_while_it_works(store):
    run_id = _run(store)
    with owned(store, run_id, every_s=0.05):
        first = store.get_run(run_id).heartbeat_at
        time.sleep(0.3)
        assert store.get_run(run_id).heartbeat_at > first
    assert store.get_run(run_id).worker_id


@pytest.mark.parametrize(
    ("exc", "status", "error"),
    [
        (KeyboardInterrupt(), "interrupted", None),
        (PhoenixError("every request failed"), "failed", "every request failed"),
        (ValueError("NaN in a counter"), "failed", "ValueError: NaN in a counter"),
    ],
)
def test_an_owned_run_ends_as_what_stopped_it(store, exc, status, error):
    run_id = _run(store)
    with pytest.raises(type(exc)), owned(store, run_id, every_s=0.05):
        raise exc
    info = store.get_run(run_id)
    assert info.status == status and info.error == error


def test_sigterm_interrupts_an_owned_run_in_another_process(tmp_path):
    url = migrated(f"sqlite:///{tmp_path / 'term.db'}")
    run_id = Store(url).create_run("watch", {}, "m", None, 1).id
    code = (
        "import os, signal, time\n"
        "from db.store import Store\n"
        "from engine.queue.owned import owned\n"
        f"with owned(Store({url!r}), {run_id}):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr
    assert Store(url).get_run(run_id).status == "interrupted"


def test_a_watch_with_a_negative_sample_count_is_one_line_before_anything_is_recorded(store):
    from engine.engines.config import WatchConfig
    from engine.engines.record import watch

    with pytest.raises(PhoenixError, match=r"^--samples must be 1 or more \(or left out: until Ctrl-C\), got -3$"):
        watch(store, WatchConfig(url="http://127.0.0.1:9", samples=-3))
    assert store.list_runs() == []


def test_a_side_by_side_run_in_which_every_request_failed_ends_failed_and_counts_no_failure_identical(
    store, monkeypatch
):
    from engine.engines import side_by_side as side
    from engine.engines.counters import SpecCounters

    class Dead:  # a server that answers /metrics and fails every completion
        def identity(self, engine):
            return {"engine": engine, "version": "test"}

        def metrics(self):
            return SpecCounters()

    failed = {"prompt": None, "error": "HTTP 500: boom", "latency_s": 0.01, "prompt_tokens": 0, "output_tokens": 0,
              "text": "", "draft_n": None, "draft_n_accepted": None}  # fmt: skip
    monkeypatch.setattr(side.llamacpp, "start", lambda c: {"state": "running", "url": "u", "command": "llama-server"})
    monkeypatch.setattr(side, "client_for", lambda url, model, **kw: Dead())
    monkeypatch.setattr(side, "one_request", lambda cl, p, n, chat, extra=None: {**failed, "prompt": p})
    with pytest.raises(PhoenixError, match=r"^every request failed; the first: HTTP 500: boom$"):
        side.engines(store, side.EnginesConfig(spec_types="none,ngram-mod", limit=2), say=lambda _: None)
    (run,) = store.list_runs()
    assert run.status == "failed" and run.error.startswith("every request failed")
    assert all(r.identical is None for r in store.requests(run.id))
