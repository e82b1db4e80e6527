"""The batched recorder: a batch's rows and the run's progress are one transaction."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from helpers import migrated, request_record
from sqlalchemy import event

import db.connect as connect
from db.store import Store, StoreError
from engine.record.writer import Recorder


@pytest.fixture
def short_lock_store(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'phoenix.db'}"
    migrated(url)
    monkeypatch.setattr(connect, "BUSY_TIMEOUT_MS", 200)  # a writer gives up after 0.2 s
    return Store(url), tmp_path / "phoenix.db"


def test_a_lock_taken_right_after_a_batch_commits_never_duplicates_a_row(short_lock_store):
    """Before the fix the rows and the progress were two transactions: another process taking the
    write lock between them failed the progress write, the batch was retried, and its rows landed twice."""
    store, path = short_lock_store
    run = store.create_run("r", {}, "t", "d", total=4)
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    locked = threading.Event()

    def lock_for_half_a_second(_session) -> None:
        if not locked.is_set():  # the first commit is the recorder's first batch
            locked.set()
            blocker.execute("BEGIN IMMEDIATE")
            threading.Timer(0.5, blocker.rollback).start()  # over twice the 0.2 s busy timeout

    event.listen(store._sessions, "after_commit", lock_for_half_a_second)
    recorder = Recorder(store, run.id, interval_s=0.05)
    recorder.put(request_record(run.id, 0))
    recorder.put(request_record(run.id, 1))
    assert locked.wait(5)
    time.sleep(0.8)  # the lock is gone again; whatever was retried has been retried
    try:
        recorder.put(request_record(run.id, 2))
        recorder.put(request_record(run.id, 3))
        recorder.close()
    except StoreError:
        pass  # a write that met the lock may surface; what matters is what the database holds
    finally:
        blocker.close()
    seqs = [r.seq for r in store.requests(run.id)]
    assert len(seqs) == len(set(seqs)), f"duplicated rows: {seqs}"
    assert store.get_run(run.id).progress_done == len(seqs)


def test_a_failed_batch_writes_neither_rows_nor_progress(short_lock_store):
    store, path = short_lock_store
    run = store.create_run("r", {}, "t", "d", total=2)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="locked by another writer"):
            store.add_requests([request_record(run.id, 0), request_record(run.id, 1)], progress=(run.id, 2))
    finally:
        blocker.rollback()
        blocker.close()
    assert store.requests(run.id) == [] and store.get_run(run.id).progress_done == 0


def test_close_drains_every_queued_record_and_counts_only_real_requests(short_lock_store):
    store, _ = short_lock_store
    run = store.create_run("r", {}, "t", "d", total=3)
    recorder = Recorder(store, run.id, batch=2, interval_s=5.0)
    for seq in range(4):
        recorder.put(request_record(run.id, seq, warmup=seq == 0))
    recorder.close()
    assert len(store.requests(run.id, include_warmup=True)) == 4
    assert store.get_run(run.id).progress_done == 3 == recorder.done


class FailsFor:
    """A store whose add_requests fails ``n`` times, then writes."""

    def __init__(self, store, n: int):
        self.store, self.n = store, n

    def __getattr__(self, name):
        return getattr(self.store, name)

    def add_requests(self, records, progress=None):
        if self.n:
            self.n -= 1
            raise StoreError("database is locked")
        return self.store.add_requests(records, progress)


def test_one_transient_failure_is_retried_and_forgotten_and_the_run_keeps_every_row(store):
    """The lab's recorder once kept its first write error forever: a run whose retry wrote every row still failed."""
    run = store.create_run("r", {}, "t", "d", total=3)
    recorder = Recorder(store, run.id, batch=8, interval_s=0.05)
    recorder.writer.store, recorder.writer.retry_s = FailsFor(store, 1), (0.0,)
    for seq in range(3):
        recorder.put(request_record(run.id, seq))
    recorder.close()  # no error: the retry wrote them
    assert recorder.error is None and [r.seq for r in store.requests(run.id)] == [0, 1, 2]


def test_a_pending_batch_of_ten_thousand_rows_or_more_is_held_never_dropped(store):
    run = store.create_run("r", {}, "t", "d", total=10_001)
    recorder = Recorder(store, run.id, batch=20_000, interval_s=0.05)
    recorder.writer.store, recorder.writer.retry_s = FailsFor(store, 3), (0.0,)
    for seq in range(10_001):
        recorder.put(request_record(run.id, seq))
    recorder.close()
    assert store.count_requests(run.id) == 10_001 and store.get_run(run.id).progress_done == 10_001
