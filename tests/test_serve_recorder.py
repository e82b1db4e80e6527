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
    assert json.loads((tmp_path / "s.jsonl").read_text())["request"]["prompt_id"] == "p"
