"""What an experiment tracker keeps beside the measurements: tags, notes, archive, delete and baselines.

Plain values in and out, like db.store; each function is one transaction. A tag is 1..100 printable characters
without surrounding spaces; user text is never interpreted here (the dashboard renders notes with HTML off).
"""
from __future__ import annotations

from sqlalchemy import delete, func, select, update

from db.models import BanditStep, Baseline, Distill, Request, RequestPosition, Run, RunTag
from db.store import Store, StoreError, status_expr

MAX_TAG = 100
MAX_NOTE = 20_000


class TrackerError(StoreError):
    """A request the store refuses: unknown run, bad tag, deleting a running run. One line, exit 2."""


def clean_tags(tags: list[str]) -> list[str]:
    out = []
    for tag in tags:
        tag = tag.strip()
        if not tag or len(tag) > MAX_TAG or not tag.isprintable():
            raise TrackerError(f"tags are 1..{MAX_TAG} printable characters, got {tag!r}")
        if tag not in out:
            out.append(tag)
    if not out:
        raise TrackerError("give at least one tag")
    return out


def _existing(s, run_id: int) -> Run:
    run = s.get(Run, run_id)
    if run is None:
        raise TrackerError(f"no run {run_id}: see `python -m engine runs`")
    return run


def add_tags(store: Store, run_id: int, tags: list[str]) -> list[str]:
    tags = clean_tags(tags)
    with store.session_scope() as s:
        _existing(s, run_id)
        have = set(s.scalars(select(RunTag.tag).where(RunTag.run_id == run_id)))
        s.add_all(RunTag(run_id=run_id, tag=t) for t in tags if t not in have)
        return sorted(have | set(tags))


def remove_tags(store: Store, run_id: int, tags: list[str]) -> list[str]:
    tags = clean_tags(tags)
    with store.session_scope() as s:
        _existing(s, run_id)
        s.execute(delete(RunTag).where(RunTag.run_id == run_id, RunTag.tag.in_(tags)))
        return sorted(s.scalars(select(RunTag.tag).where(RunTag.run_id == run_id)))


def all_tags(store: Store) -> list[str]:
    with store.session_scope() as s:
        return list(s.scalars(select(RunTag.tag).distinct().order_by(RunTag.tag)))


def set_note(store: Store, run_id: int, text: str) -> None:
    if len(text) > MAX_NOTE:
        raise TrackerError(f"notes are at most {MAX_NOTE} characters, got {len(text)}")
    with store.session_scope() as s:
        _existing(s, run_id).note = text or None


def set_archived(store: Store, run_id: int, archived: bool) -> None:
    with store.session_scope() as s:
        _existing(s, run_id).archived = archived


def request_count(store: Store, run_id: int) -> int:
    with store.session_scope() as s:
        _existing(s, run_id)
        return s.scalar(select(func.count()).select_from(Request).where(Request.run_id == run_id)) or 0


def delete_run(store: Store, run_id: int) -> int:
    """The run and every row that hangs off it (requests, positions, bandit steps, tags, its baseline pin), in one
    transaction; refused while the run is running or queued. Returns the number of requests removed."""
    with store.session_scope() as s:
        _existing(s, run_id)
        status = s.scalar(select(status_expr()).where(Run.id == run_id))
        if status in ("running", "queued"):
            raise TrackerError(f"run {run_id} is {status}; cancel it first (`python -m engine cancel {run_id}`)")
        n = s.scalar(select(func.count()).select_from(Request).where(Request.run_id == run_id)) or 0
        # explicit child deletes: SQLite cascades only with foreign_keys on, and this must not depend on it
        ids = select(Request.id).where(Request.run_id == run_id).scalar_subquery()
        s.execute(delete(RequestPosition).where(RequestPosition.request_id.in_(ids)))
        s.execute(delete(BanditStep).where(BanditStep.request_id.in_(ids)))
        s.execute(delete(Request).where(Request.run_id == run_id))
        s.execute(delete(RunTag).where(RunTag.run_id == run_id))
        s.execute(delete(Baseline).where(Baseline.run_id == run_id))
        s.execute(update(Distill).where(Distill.before_run_id == run_id).values(before_run_id=None))
        s.execute(update(Distill).where(Distill.after_run_id == run_id).values(after_run_id=None))
        s.execute(delete(Run).where(Run.id == run_id))
        return n


def set_baseline(store: Store, run_id: int) -> str:
    """Pin the run as the baseline of its target model (replacing any other); returns the target."""
    with store.session_scope() as s:
        run = _existing(s, run_id)
        pinned = s.get(Baseline, run.target)
        if pinned is None:
            s.add(Baseline(target=run.target, run_id=run_id))
        else:
            pinned.run_id = run_id
        return run.target


def clear_baseline(store: Store, target: str) -> None:
    with store.session_scope() as s:
        s.execute(delete(Baseline).where(Baseline.target == target))


def baseline_of(store: Store, target: str) -> int | None:
    with store.session_scope() as s:
        return s.scalar(select(Baseline.run_id).where(Baseline.target == target))
