"""The server's recorder never drops a row silently (issue 50): a store that fails is retried, its rows held and
spilled to a file; past that the server refuses new work with 503; /health says so; once the store answers, every
held row is written once; a run that ends with rows unwritten ends failed, naming the spill file, never done."""

from __future__ import annotations

import json
import sqlite3

from helpers import wait_for
from test_serve_api import PROMPTS, decoder, make_service  # noqa: F401  (decoder: a fixture)

from engine.serve.recorder import Recorder


class Flaky:
    """A store whose writes fail ``failures`` times (a locked database), then pass to the real one."""

    def __init__(self, store, failures: int):
        self.store, self.failures, self.calls = store, failures, 0

    def __getattr__(self, name):
        return getattr(self.store, name)

    def add_requests(self, records, progress=None):
        self.calls += 1
        if self.failures != 0:
            self.failures -= 1
            raise sqlite3.OperationalError("database is locked")
        return self.store.add_requests(records, progress)


def serve(decoder, tmp_path):  # noqa: F811
    from fastapi.testclient import TestClient

    from engine.serve.api import make_app

    service, store = make_service(decoder, tmp_path, max_batch=2)
    return TestClient(make_app(service)), service, store


def test_a_store_that_fails_for_a_while_loses_nothing_and_writes_each_row_once(decoder, tmp_path):  # noqa: F811
    client, service, store = serve(decoder, tmp_path)
    with client as c:
        flaky = Flaky(store, failures=-1)  # fails until told otherwise
        service.recorder.store = flaky
        service.recorder.retry_s = (0.0, 0.0)
        for p in PROMPTS:
            assert c.post("/v1/completions", json={"prompt": p, "max_tokens": 4}).status_code == 200
        wait_for(lambda: service.recorder.health()["pending"] >= 3, 20, "the rows to be held")
        health = c.get("/health").json()["recorder"]
        assert not health["ok"] and "database is locked" in health["error"] and health["pending"] >= 3
        spilled = [json.loads(line) for line in service.recorder.spill.read_text().splitlines()]
        assert sum("request" in x for x in spilled) == 3  # a crash now would still leave every row on disk
        flaky.failures = 0  # the store answers again
        wait_for(lambda: service.recorder.health()["ok"], 20, "the held rows to be written")
        assert not service.recorder.spill.exists()
    run = store.get_run(service.run_id)
    assert run.status == "done" and store.count_requests(run.id) == 3  # each once


def test_rows_that_never_reach_the_store_end_the_run_failed_and_past_the_spill_new_work_is_refused(
    decoder,  # noqa: F811
    tmp_path,
):
    client, service, store = serve(decoder, tmp_path)
    with client as c:
        service.recorder.store = Flaky(store, failures=-1)
        service.recorder.retry_s = (0.0,)
        assert c.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 4}).status_code == 200
        wait_for(lambda: service.recorder.spill.exists(), 20, "the spill file")
        assert c.get("/health").status_code == 200  # held and spilled: still serving
        service.recorder.spill = tmp_path / "no-such-folder" / "spill.jsonl"  # the disk refuses the spill too
        assert c.post("/v1/completions", json={"prompt": PROMPTS[1], "max_tokens": 4}).status_code == 200
        wait_for(lambda: service.recorder.refusing is not None, 20, "the server to refuse new work")
        health = c.get("/health")
        assert health.status_code == 503 and "cannot record" in health.json()["error"]["message"]
        r = c.post("/v1/completions", json={"prompt": PROMPTS[2], "max_tokens": 4})
        assert r.status_code == 503 and "cannot record requests now" in r.json()["error"]["message"]
    run = store.get_run(service.run_id)
    assert run.status == "failed" and "2 answered requests were not recorded" in (run.error or "")


def test_the_recorder_retries_with_waits_then_holds(tmp_path):
    class Never:
        url = f"sqlite:///{tmp_path / 'x.db'}"

        def add_serve_steps(self, run_id, steps):
            pass

        def add_requests(self, records, progress=None):
            raise OSError("No space left on device")

    rec = Recorder(Never(), 1, tmp_path / "s.jsonl", retry_s=(0.0, 0.0))  # type: ignore[arg-type]
    assert rec.write([], [], 0) and rec.lost() is None  # nothing to write is no failure
    from db.entities import RequestRecord

    row = RequestRecord(run_id=1, seq=0, mode="none", prompt_id="p", tokens_per_s=1.0, output_text="", output_sha256="")
    assert not rec.write([], [row], 1)
    assert "No space left" in (rec.error or "") and "1 answered requests were not recorded" in (rec.lost() or "")
    header, *rows = (tmp_path / "s.jsonl").read_text().splitlines()
    assert json.loads(header)["run_id"] == 1 and json.loads(rows[0])["request"]["prompt_id"] == "p"


def test_rows_a_server_could_not_record_are_replayed_by_the_next_server_on_the_database(decoder, tmp_path):  # noqa: F811
    """A spill file is not the end: the run's page says it waits, and the next server on the same database writes
    it into its run, once, with the run's progress, then removes it."""
    from engine.serve.recorder import replay_spills, waiting

    client, service, store = serve(decoder, tmp_path)
    with client as c:
        service.recorder.store = Flaky(store, failures=-1)
        service.recorder.retry_s = (0.0,)
        for p in PROMPTS:
            assert c.post("/v1/completions", json={"prompt": p, "max_tokens": 4}).status_code == 200
        wait_for(lambda: service.recorder.health()["pending"] >= 3, 20, "the rows to be held")
    run = store.get_run(service.run_id)
    assert run.status == "failed" and store.count_requests(run.id) == 0
    spill, held = waiting(store, run.id) or (None, 0)
    assert spill == service.recorder.spill and held == 3
    steps = len(read_steps(spill))
    assert replay_spills(store) == [f"run {run.id}: 3 requests and {steps} steps replayed from {spill}"]
    run = store.get_run(run.id)
    assert store.count_requests(run.id) == 3 and run.progress_done == 3 and not spill.exists()
    assert "replayed from" in (run.error or "") and waiting(store, run.id) is None
    assert replay_spills(store) == []  # written once


def read_steps(spill):
    from engine.serve.recorder import read_spill

    return read_spill(spill)[2]


def test_a_spill_file_of_another_database_or_of_a_live_run_is_left_alone(decoder, tmp_path):  # noqa: F811
    from engine.serve.recorder import replay_spills, spill_path

    client, service, store = serve(decoder, tmp_path)
    with client as c:
        c.get("/health")
        live = spill_path(store, service.run_id)
        live.write_text(json.dumps({"spill": 1, "database": "sqlite:///elsewhere.db", "run_id": service.run_id}) + "\n")
        assert replay_spills(store) == [] and live.exists()  # another database's rows never land here
        live.write_text("not json\n")
        assert "left" in replay_spills(store)[0] and live.exists()
    live.unlink()
