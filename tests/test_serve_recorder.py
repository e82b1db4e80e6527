"""The server's recorder never drops a row silently (issue 50): a store that fails is retried, its rows held and
spilled to a file; past that the server refuses new work with 503; /health says so; once the store answers, every
held row is written once; a run that ends with rows unwritten ends failed, naming the spill file, never done."""

from __future__ import annotations

import json
import sqlite3

import pytest
from helpers import wait_for
from test_serve_api import PROMPTS, decoder, make_service  # noqa: F401  (decoder: a fixture)

from engine.record.spills import Recorder


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


def spilled_requests(path) -> int:
    """How many requests the spill file holds now (it is replaced whole, so a read sees one version)."""
    return sum("request" in json.loads(line) for line in path.read_text().splitlines()) if path.exists() else 0


def test_a_store_that_fails_for_a_while_loses_nothing_and_writes_each_row_once(decoder, tmp_path):  # noqa: F811
    client, service, store = serve(decoder, tmp_path)
    with client as c:
        flaky = Flaky(store, failures=-1)  # fails until told otherwise
        service.recorder.store = flaky
        service.recorder.retry_s = (0.0, 0.0)
        for p in PROMPTS:
            assert c.post("/v1/completions", json={"prompt": p, "max_tokens": 4}).status_code == 200
        # a crash once the third write has failed would still leave every row on disk: the spill follows the
        # failed write (its retries first), so it is waited for, not read the moment the rows are held
        wait_for(lambda: spilled_requests(service.recorder.spill) == 3, 20, "the rows to be held and spilled")
        health = c.get("/health").json()["recorder"]
        assert not health["ok"] and health["error"].startswith("OperationalError") and health["pending"] >= 3
        assert str(tmp_path) not in json.dumps(health)  # /health is unauthenticated: no path, no database URL
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
    from engine.record.spills import replay_spills, waiting

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
    steps = read_steps(spill)
    assert replay_spills(store) == [f"run {run.id}: 3 requests and {steps} steps replayed from {spill}"]
    run = store.get_run(run.id)
    assert store.count_requests(run.id) == 3 and run.progress_done == 3 and not spill.exists()
    assert "replayed from" in (run.error or "") and waiting(store, run.id) is None
    assert replay_spills(store) == []  # written once


def read_steps(spill):
    from engine.record.spills import read_spill

    return read_spill(spill)[2]


def test_a_spill_file_of_another_database_or_of_a_live_run_is_left_alone(decoder, tmp_path):  # noqa: F811
    from engine.record.spills import replay_spills, spill_path

    client, service, store = serve(decoder, tmp_path)
    with client as c:
        c.get("/health")
        live = spill_path(store, service.run_id)
        live.write_text(json.dumps({"spill": 1, "database": "sqlite:///elsewhere.db", "run_id": service.run_id}) + "\n")
        assert replay_spills(store) == [] and live.exists()  # another database's rows never land here
        live.write_text("not json\n")
        assert "left" in replay_spills(store)[0] and live.exists()
    live.unlink()


class Heartless:
    """A store whose heartbeat fails while ``down`` (locked by another process, read-only, a full disk)."""

    def __init__(self, store):
        self.store, self.down = store, True

    def __getattr__(self, name):
        return getattr(self.store, name)

    def heartbeat(self, run_id):
        if self.down:
            from db.entities import StoreError

            raise StoreError("database is locked")
        return self.store.heartbeat(run_id)


def test_a_failure_met_while_idle_never_ends_the_recorder_and_every_later_answer_is_recorded(
    decoder,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    import engine.serve.service as service_module

    monkeypatch.setattr(service_module, "HEARTBEAT_S", 0.0)  # a heartbeat on every pass
    client, service, store = serve(decoder, tmp_path)
    with client as c:
        heartless = Heartless(store)
        service.store = heartless
        wait_for(lambda: not service.recorder.health()["ok"], 20, "the heartbeat's failure to be seen")
        assert c.get("/health").json()["recorder"]["error"].startswith("StoreError")
        assert service._threads[0].is_alive()  # the recorder thread outlived it
        for p in PROMPTS:
            assert c.post("/v1/completions", json={"prompt": p, "max_tokens": 4}).status_code == 200
        heartless.down = False
        wait_for(lambda: service.recorder.health()["ok"], 20, "the recorder to be well again")
        assert "error" not in c.get("/health").json()["recorder"]  # no old error text once it is well
    run = store.get_run(service.run_id)
    assert run.status == "done" and store.count_requests(run.id) == 3


def test_a_database_file_deleted_under_the_server_is_noticed_and_its_rows_held_and_spilled(
    decoder,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    import engine.serve.service as service_module

    monkeypatch.setattr(service_module, "HEARTBEAT_S", 0.0)
    client, service, store = serve(decoder, tmp_path)
    with client as c:
        service.recorder.retry_s = (0.0,)
        db = tmp_path / "serve.db"
        db.rename(tmp_path / "moved-away.db")  # the path no longer names the open file (deleted, replaced)
        wait_for(lambda: not service.recorder.health()["ok"], 20, "the idle recorder to notice")
        assert c.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 4}).status_code == 200
        wait_for(lambda: service.recorder.spill.exists(), 20, "the rows to be spilled")
        assert "removed or replaced" in (service.recorder.error or "")
        assert not c.get("/health").json()["recorder"]["ok"]
        rows = [json.loads(x) for x in service.recorder.spill.read_text().splitlines()[1:]]
        assert sum("request" in r for r in rows) == 1


def spill_of(store, run_id: int, rows: list, header: dict | None = None, name: str | None = None):
    from db.store import safe_url
    from engine.record.spills import spill_path

    path = spill_path(store, run_id) if name is None else spill_path(store, run_id).with_name(name)
    head = (
        header if header is not None else {"spill": 1, "database": safe_url(store.url), "run_id": run_id, "progress": 0}
    )
    path.write_text("".join(json.dumps(x) + "\n" for x in [head, *rows]))
    return path


def request_row(run_id: int, seq, **kw) -> dict:
    return {"request": {"run_id": run_id, "seq": seq, "mode": "none", "prompt_id": f"p{seq}", "tokens_per_s": 1.0,
                        "output_text": "x", "output_sha256": "0" * 64, **kw}}  # fmt: skip


def ended_run(store, status: str = "failed") -> int:
    run = store.create_run("served", {}, "t", None, 0)
    store.set_status(run.id, status, "rows left unrecorded")
    return run.id


@pytest.mark.parametrize(
    "rows,header,why",
    [
        ([{}], None, "neither a request nor a step"),
        ([[1, 2]], None, "neither a request nor a step"),
        ([{"request": 1}], None, "not an object"),
        ([request_row(1, 0, color="red")], None, "unknown fields"),
        ([{"request": {"run_id": 1, "seq": 0}}], None, "missing"),
        ([request_row(1, "x")], None, "seq = 'x' is not int"),
        ([request_row(1, 0, k=True)], None, "k = 'True' is not int"),
        ([request_row(2, 0)], None, "a request of run 2 in run 1's spill"),
        ([], {"spill": 1, "run_id": "abc", "database": "d"}, "not a Phoenix spill file"),
        ([], {"spill": 1, "run_id": None, "database": "d"}, "not a Phoenix spill file"),
        ([], {"spill": 1, "run_id": 1, "database": "d", "progress": "x"}, "progress or database"),
        ([{"step": {"step": 1}}], None, "StepRecord that"),
    ],
)
def test_a_spill_that_is_json_but_not_a_runs_rows_is_one_line_and_left_alone(store, rows, header, why):
    from engine.record.spills import replay_spills

    run_id = ended_run(store)
    assert run_id == 1
    path = spill_of(store, run_id, rows, header)
    said = replay_spills(store)
    assert len(said) == 1 and said[0].startswith(f"left {path} alone") and why in said[0], said
    assert path.exists() and store.count_requests(run_id) == 0


def test_a_copy_of_a_spill_is_not_replayed_and_a_row_already_written_is_never_written_twice(store):
    from engine.record.spills import replay_spills

    run_id = ended_run(store)
    rows = [request_row(run_id, s) for s in range(3)]
    spill_of(store, run_id, rows)
    copy = spill_of(store, run_id, rows, name=f"phoenix-serve-run{run_id}-copy.spill.jsonl")
    said = replay_spills(store)
    assert said == [
        f"run {run_id}: 3 requests and 0 steps replayed from {copy.with_name(f'phoenix-serve-run{run_id}.spill.jsonl')}"
    ]
    assert store.count_requests(run_id) == 3 and copy.exists()  # a copy is the user's file: left as it is
    spill_of(store, run_id, rows + [request_row(run_id, 3)])  # the same rows again, and one new
    assert "1 requests" in replay_spills(store)[0] and store.count_requests(run_id) == 4


def test_a_large_spill_is_read_a_line_at_a_time_and_written_in_batches(store, monkeypatch):
    from engine.record import spills as recorder

    run_id = ended_run(store, "interrupted")
    spill_of(store, run_id, [request_row(run_id, s) for s in range(1200)])
    batches = []
    real = store.add_requests
    monkeypatch.setattr(
        store, "add_requests", lambda recs, progress=None: batches.append(len(recs)) or real(recs, progress)
    )
    monkeypatch.setattr(
        type(recorder.spill_path(store, run_id)), "read_text", lambda *a, **k: pytest.fail("read whole")
    )
    recorder.replay_spills(store, batch=500)
    assert batches == [500, 500, 200] and store.count_requests(run_id) == 1200


def test_a_spill_that_cannot_be_written_leaves_no_empty_tmp_file(tmp_path, monkeypatch):
    from db.entities import RequestRecord
    from engine.record import spills as recorder

    class Full:
        url = f"sqlite:///{tmp_path / 'x.db'}"

        def add_serve_steps(self, run_id, steps):
            pass

        def add_requests(self, records, progress=None):
            raise OSError("No space left on device")

    real, calls = recorder.json.dumps, []

    def disk_fills(*args, **kw):  # the header goes in, then the disk is full
        calls.append(1)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real(*args, **kw)

    monkeypatch.setattr(recorder.json, "dumps", disk_fills)
    spill = tmp_path / "phoenix-serve-run1.spill.jsonl"
    rec = Recorder(Full(), 1, spill, retry_s=())  # type: ignore[arg-type]
    row = RequestRecord(run_id=1, seq=0, mode="none", prompt_id="p", tokens_per_s=1.0, output_text="", output_sha256="")
    assert not rec.write([], [row], 1) and "No space left" in (rec.spill_error or "")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither the spill nor an empty .tmp
