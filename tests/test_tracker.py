"""Tags, notes, archive, delete and baselines: the store functions and their CLI, on tmp_path databases."""

from __future__ import annotations

import random

import pytest
from helpers import app_record, assert_one_line_error, run_cli

from db import tracker
from db.store import Store


def _three_runs(store):
    one = store.create_run("one", {"bench": {}}, "tgt", "drf", 3, status="done")
    store.add_requests([app_record(one.id, i, "model_4", 4, random.Random(i)) for i in range(3)])
    store.create_run("two", {"bench": {}}, "tgt", "drf", 3, status="running")
    store.create_run("three", {"bench": {}}, "other", "drf", 0, status="done")
    return store


@pytest.fixture
def runs(store):
    """Run 1 done with 3 requests, run 2 running, run 3 done on another target (SQLite, for the CLI tests)."""
    return _three_runs(store)


@pytest.fixture
def any_runs(any_store):
    """The same three runs on SQLite and on PostgreSQL."""
    return _three_runs(any_store)


def test_tags_are_added_once_removed_and_listed_sorted(any_runs):
    assert any_runs.add_tags(1, ["draft-v2", " baseline ", "draft-v2"]) == ["baseline", "draft-v2"]
    assert any_runs.add_tags(3, ["x"]) == ["x"]
    assert any_runs.get_run(1).tags == ["baseline", "draft-v2"] and [r.tags for r in any_runs.list_runs()] == [
        ["x"],
        [],
        ["baseline", "draft-v2"],
    ]
    assert any_runs.remove_tags(1, ["baseline"]) == ["draft-v2"]
    assert any_runs.all_tags() == ["draft-v2", "x"]


@pytest.mark.parametrize("tags", [[""], ["   "], ["a\nb"], ["t" * 101], ["\u3164"], ["\u2800\u2800"], ["\u200b"]])
def test_a_bad_tag_is_refused(any_runs, tags):
    with pytest.raises(tracker.TrackerError, match="tags are 1..100 visible, printable characters"):
        any_runs.add_tags(1, tags)


def test_archive_hides_nothing_from_the_store_and_comes_back(any_runs):
    any_runs.set_archived(1, True)
    assert any_runs.get_run(1).archived and len(any_runs.requests(1)) == 3
    any_runs.set_archived(1, False)
    assert not any_runs.get_run(1).archived


def test_delete_removes_the_run_and_every_row_in_one_go_and_refuses_a_running_run(any_runs):
    any_runs.add_tags(1, ["gone"])
    any_runs.set_baseline(1)
    job = any_runs.create_distill({}, "out")
    any_runs.set_distill_fields(job.id, before_run_id=1, after_run_id=3)
    assert any_runs.delete_run(1) == 3
    assert any_runs.get_run(1) is None and any_runs.count_requests(1) == 0 and any_runs.all_tags() == []
    assert any_runs.baseline_of("tgt") is None
    assert (any_runs.get_distill(job.id).before_run_id, any_runs.get_distill(job.id).after_run_id) == (None, 3)
    with pytest.raises(tracker.TrackerError, match="run 2 is running; cancel it first"):
        any_runs.delete_run(2)
    assert any_runs.get_run(2) is not None


def test_one_baseline_per_target_model(any_runs):
    assert any_runs.set_baseline(1) == "tgt"
    four = any_runs.create_run("four", {"bench": {}}, "tgt", "drf", 1, status="done")
    any_runs.add_requests([app_record(four.id, 0, "model_4", 4, random.Random(9))])
    any_runs.set_baseline(four.id)
    assert any_runs.baseline_of("tgt") == four.id and any_runs.baseline_of("other") is None
    any_runs.clear_baseline("tgt")
    assert any_runs.baseline_of("tgt") is None


def test_a_run_that_is_running_or_answered_nothing_is_no_baseline(any_runs):
    with pytest.raises(tracker.TrackerError, match="run 2 is running with 0 answered"):
        any_runs.set_baseline(2)  # a killed replica's run stays running with no rows
    with pytest.raises(tracker.TrackerError, match="run 3 is done with 0 answered"):
        any_runs.set_baseline(3)
    assert any_runs.baseline_of("tgt") is None


def test_the_cli_tags_notes_archives_and_deletes(capsys, runs, db_url):
    assert run_cli(capsys, "tag", "1", "draft-v2", "exp", "--db", db_url)[1].strip() == "run 1: tags draft-v2, exp"
    assert run_cli(capsys, "note", "1", "--text", "why: **new draft**", "--db", db_url)[0] == 0
    assert Store(db_url).get_run(1).note == "why: **new draft**"
    assert run_cli(capsys, "archive", "1", "--db", db_url)[0] == 0
    listed = run_cli(capsys, "runs", "--db", db_url)[1]
    assert " one " not in listed and "three" in listed
    assert "#draft-v2 #exp  (archived)" in run_cli(capsys, "runs", "--archived", "--tag", "exp", "--db", db_url)[1]
    assert run_cli(capsys, "unarchive", "1", "--db", db_url)[0] == 0
    assert run_cli(capsys, "baseline", "1", "--db", db_url)[1].strip() == "run 1 is the baseline of tgt"
    assert run_cli(capsys, "delete", "1", "--yes", "--db", db_url)[1].strip() == "run 1 deleted with its 3 requests"


@pytest.mark.parametrize(
    "argv, pattern",
    [
        ("tag 9 x", "no run 9"),
        ("tag 1 ", "the following arguments are required: tags"),
        ("untag 1 \t", "tags are 1..100 visible, printable characters"),
        ("delete 2 --yes", "run 2 is running; cancel it first"),
        ("delete 1", r"removes it and its 3 requests for good; pass --yes"),
        ("note 9 --text hi", "no run 9"),
        ("archive 0", "run ids are whole numbers"),
        ("baseline 9", "no run 9"),
    ],
)
def test_bad_tracker_input_is_one_line_and_exit_2(capsys, runs, db_url, argv, pattern):
    code, _, err = (
        run_cli(capsys, *[a for a in argv.split(" ") if a], "--db", db_url)
        if "\t" not in argv
        else run_cli(capsys, "untag", "1", "\t", "--db", db_url)
    )
    assert_one_line_error(code, err, pattern)
    assert runs.get_run(1) is not None and runs.count_requests(1) == 3


def test_two_spellings_of_one_tag_are_one_tag(any_runs):
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert any_runs.add_tags(1, [composed]) == [composed]
    assert any_runs.add_tags(1, [decomposed]) == [composed]  # stored NFC


def test_replacing_tags_with_one_bad_tag_changes_nothing(any_runs):
    any_runs.add_tags(1, ["keep", "these"])
    with pytest.raises(tracker.TrackerError):
        any_runs.set_tags(1, ["keep", "bad\ttag"])
    assert any_runs.get_run(1).tags == ["keep", "these"]
    assert any_runs.set_tags(1, ["new", "keep"]) == ["keep", "new"]
    assert any_runs.set_tags(1, []) == []


def test_a_run_whose_worker_still_lives_here_is_not_deleted_even_when_it_reads_as_interrupted(any_runs):
    any_runs.set_status(2, "interrupted")
    with pytest.raises(tracker.TrackerError, match="its worker host:1 is still alive on this host"):
        with any_runs.session_scope() as s:
            from db.models import Run

            s.get(Run, 2).worker_id = "host:1"
        any_runs.delete_run(2, worker_alive=lambda worker: worker == "host:1")
    assert any_runs.get_run(2) is not None


def _race(args) -> str:
    """One process's part of a race: a fresh connection, one tracker call, its outcome as text."""
    url, op, i = args
    store = Store(url)
    try:
        if op == "tag":
            store.add_tags(1, ["shared", f"own-{i % 3}"])
        else:
            store.set_baseline(1 if i % 2 else 3)
        return "ok"
    except Exception as exc:  # the outcome is the test's subject: any failure is reported, not raised
        return f"{type(exc).__name__}: {exc}"
    finally:
        store.engine.dispose()


@pytest.mark.subprocess
@pytest.mark.parametrize("op", ["tag", "baseline"])
def test_concurrent_tagging_and_pinning_from_many_processes_all_succeed(any_store, op):
    """Before the upserts, 32 of 60 concurrent tag calls and 16 of 32 baseline pins failed with UNIQUE errors."""
    import multiprocessing

    for name, target in (("one", "tgt"), ("two", "other"), ("three", "tgt")):  # each with an answer: pinnable
        run = any_store.create_run(name, {"bench": {}}, target, "drf", 1, status="done")
        any_store.add_requests([app_record(run.id, 0, "model_4", 4, random.Random(run.id))])
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        outcomes = pool.map(_race, [(any_store.url, op, i) for i in range(32)])
    assert outcomes == ["ok"] * 32, [o for o in outcomes if o != "ok"][:3]
    if op == "tag":
        assert any_store.get_run(1).tags == ["own-0", "own-1", "own-2", "shared"]
    else:
        assert any_store.baseline_of("tgt") in (1, 3)


@pytest.mark.parametrize(
    "text, ok",
    [("line one\n\n- a list\twith a tab", True), ("ring \x07 the bell", False), ("\x1b[2J clear the screen", False)],
)
def test_a_note_is_markdown_text_with_newlines_but_no_other_control_characters(any_runs, text, ok):
    if ok:
        any_runs.set_note(1, text)
        assert any_runs.get_run(1).note == text
    else:
        with pytest.raises(tracker.TrackerError, match="other control characters are not"):
            any_runs.set_note(1, text)
        assert any_runs.get_run(1).note is None


def _delete_or_requeue(args) -> tuple[str, bool]:
    """One side of the delete/resume race, started together with the other through a barrier."""
    url, op, run_id, barrier = args
    store = Store(url)
    try:
        barrier.wait(10)
        if op == "requeue":
            return op, store.requeue(run_id)
        try:
            store.delete_run(run_id)
            return op, True
        except tracker.TrackerError:
            return op, False
        except Exception:  # a lock timeout is a refusal too: what matters is that both never win
            return op, False
    finally:
        store.engine.dispose()


@pytest.mark.subprocess
def test_delete_and_resume_racing_from_two_processes_never_both_win(any_store):
    """Before delete judged the status with its own first write, a resume could requeue a run between delete's
    check and its delete: the resumed run vanished while the resume reported success."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(2) as pool:
        for trial in range(12):
            run = any_store.create_run(f"r{trial}", {"bench": {}}, "tgt", "drf", 0, status="interrupted")
            barrier = manager.Barrier(2)
            outcome = dict(
                pool.map(_delete_or_requeue, [(any_store.url, op, run.id, barrier) for op in ("requeue", "delete")])
            )
            assert not (outcome["requeue"] and outcome["delete"]), f"trial {trial}: both won"
            assert outcome["requeue"] or outcome["delete"], f"trial {trial}: neither won"
            exists = any_store.get_run(run.id) is not None
            assert exists == (not outcome["delete"])
