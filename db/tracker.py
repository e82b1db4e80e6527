"""What an experiment tracker keeps beside the measurements: tags, notes, archive, delete and baselines.

Plain values in and out, like db.store; each function is one transaction. A tag is 1..100 printable characters
without surrounding spaces; user text is never interpreted here (the dashboard renders notes with HTML off).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from db.connect import StoreBase, StoreError, rowcount, status_expr
from db.models import (
    BanditStep,
    Baseline,
    Distill,
    Request,
    RequestPosition,
    Run,
    RunPrompt,
    RunTag,
    ServeStep,
    WatchInterval,
)

MAX_TAG = 100
MAX_NOTE = 20_000


class TrackerError(StoreError):
    """A request the store refuses: unknown run, bad tag, deleting a running run. One line, exit 2."""


BLANK = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u2800", "\u00ad", "\u200b", "\u2060", "\ufeff"}  # render as nothing


def clean_tags(tags: list[str], allow_empty: bool = False) -> list[str]:
    """Tags as stored: NFC-normalised (two spellings of one tag are one tag), stripped, printable, and visible (a
    tag made of fillers such as U+3164 or U+2800 would show as a blank chip)."""
    out = []
    for tag in tags:
        tag = unicodedata.normalize("NFC", tag).strip()
        if not tag or len(tag) > MAX_TAG or not tag.isprintable() or all(ch in BLANK or ch.isspace() for ch in tag):
            raise TrackerError(f"tags are 1..{MAX_TAG} visible, printable characters, got {tag!r}")
        if tag not in out:
            out.append(tag)
    if not out and not allow_empty:
        raise TrackerError("give at least one tag")
    return out


def _insert(s, table):
    """INSERT with ON CONFLICT support on both databases: concurrent writers of the same row then agree instead
    of one failing on the unique constraint."""
    return (postgresql.insert if s.get_bind().dialect.name == "postgresql" else sqlite.insert)(table)


def _existing(s, run_id: int) -> Run:
    run = s.get(Run, run_id)
    if run is None:
        raise TrackerError(f"no run {run_id}: see `python -m engine runs`")
    return run


def _add(s, run_id: int, tags: list[str]) -> None:
    if tags:
        s.execute(
            _insert(s, RunTag)
            .values([{"run_id": run_id, "tag": t} for t in tags])
            .on_conflict_do_nothing(index_elements=["run_id", "tag"])
        )


class Tracker(StoreBase):
    def add_tags(self, run_id: int, tags: list[str]) -> list[str]:
        tags = clean_tags(tags)
        with self.session_scope() as s:
            _existing(s, run_id)
            _add(s, run_id, tags)
            return sorted(s.scalars(select(RunTag.tag).where(RunTag.run_id == run_id)))

    def set_tags(self, run_id: int, tags: list[str]) -> list[str]:
        """The run's tags become exactly ``tags``, in one transaction: a bad tag changes nothing."""
        tags = clean_tags(tags, allow_empty=True)
        with self.session_scope() as s:
            _existing(s, run_id)
            s.execute(delete(RunTag).where(RunTag.run_id == run_id, RunTag.tag.not_in(tags)))
            _add(s, run_id, tags)
            return sorted(s.scalars(select(RunTag.tag).where(RunTag.run_id == run_id)))

    def remove_tags(self, run_id: int, tags: list[str]) -> list[str]:
        tags = clean_tags(tags)
        with self.session_scope() as s:
            _existing(s, run_id)
            s.execute(delete(RunTag).where(RunTag.run_id == run_id, RunTag.tag.in_(tags)))
            return sorted(s.scalars(select(RunTag.tag).where(RunTag.run_id == run_id)))

    def all_tags(self) -> list[str]:
        with self.session_scope() as s:
            return list(s.scalars(select(RunTag.tag).distinct().order_by(RunTag.tag)))

    def set_note(self, run_id: int, text: str) -> None:
        """Markdown text, stored NFC; newlines and tabs are part of Markdown, other control characters (a terminal's
        escape sequences, a bell) are refused."""
        text = unicodedata.normalize("NFC", text)
        if len(text) > MAX_NOTE:
            raise TrackerError(f"notes are at most {MAX_NOTE} characters, got {len(text)}")
        if any(not ch.isprintable() and ch not in "\n\t" for ch in text):
            raise TrackerError("notes are text: newlines and tabs are fine, other control characters are not")
        with self.session_scope() as s:
            _existing(s, run_id).note = text or None

    def set_archived(self, run_id: int, archived: bool) -> None:
        with self.session_scope() as s:
            _existing(s, run_id).archived = archived

    def delete_run(self, run_id: int, worker_alive: Callable[[str], bool] = lambda _worker: False) -> int:
        """The run and every row that hangs off it (requests, positions, bandit steps, tags, its baseline pin), in one
        transaction; refused while the run is running or queued, and while ``worker_alive`` says its worker process
        still lives (a paused laptop's run reads as interrupted, but its worker would write again). Returns the number
        of requests removed. The first statement writes the run's row, so the status it judges is the status it
        deletes: a `resume` between check and delete waits for this transaction (row lock on PostgreSQL, the write lock
        on SQLite) and then finds no run."""
        with self.session_scope() as s:
            _existing(s, run_id)
            touched = s.execute(
                update(Run)
                .where(Run.id == run_id, status_expr().not_in(("running", "queued")))
                .values(cancel_requested=Run.cancel_requested)
            )
            run = s.get(Run, run_id)
            status = s.scalar(select(status_expr()).where(Run.id == run_id))
            if rowcount(touched) != 1:
                raise TrackerError(f"run {run_id} is {status}; cancel it first (`python -m engine cancel {run_id}`)")
            if run is not None and run.worker_id and worker_alive(run.worker_id):
                raise TrackerError(
                    f"run {run_id} is {status}, but its worker {run.worker_id} is still alive on this host; "
                    f"stop it first (`python -m engine cancel {run_id}`), then delete"
                )
            n = s.scalar(select(func.count()).select_from(Request).where(Request.run_id == run_id)) or 0
            # explicit child deletes: SQLite cascades only with foreign_keys on, and this must not depend on it
            ids = select(Request.id).where(Request.run_id == run_id).scalar_subquery()
            s.execute(delete(RequestPosition).where(RequestPosition.request_id.in_(ids)))
            s.execute(delete(BanditStep).where(BanditStep.request_id.in_(ids)))
            s.execute(delete(Request).where(Request.run_id == run_id))
            for table in (RunTag, RunPrompt, WatchInterval, ServeStep):
                s.execute(delete(table).where(table.run_id == run_id))
            s.execute(delete(Baseline).where(Baseline.run_id == run_id))
            s.execute(update(Distill).where(Distill.before_run_id == run_id).values(before_run_id=None))
            s.execute(update(Distill).where(Distill.after_run_id == run_id).values(after_run_id=None))
            s.execute(delete(Run).where(Run.id == run_id))
            return n

    def set_baseline(self, run_id: int) -> str:
        """Pin the run as the baseline of its target model (replacing any other); returns the target."""
        with self.session_scope() as s:
            run = _existing(s, run_id)
            answered = s.scalar(
                select(func.count()).select_from(Request).where(Request.run_id == run_id, Request.error.is_(None))
            )
            if run.status != "done" or not answered:  # a running run with 0 rows (a killed replica's) is no baseline
                raise TrackerError(
                    f"run {run_id} is {run.status} with {answered or 0} answered request(s): a baseline is a finished "
                    "run with answers; pin one of those"
                )
            s.execute(
                _insert(s, Baseline)
                .values(target=run.target, run_id=run_id)
                .on_conflict_do_update(index_elements=["target"], set_={"run_id": run_id})
            )
            return run.target

    def clear_baseline(self, target: str) -> None:
        with self.session_scope() as s:
            s.execute(delete(Baseline).where(Baseline.target == target))

    def baseline_of(self, target: str) -> int | None:
        with self.session_scope() as s:
            return s.scalar(select(Baseline.run_id).where(Baseline.target == target))
