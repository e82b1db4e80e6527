"""The tracking store (mlflow style): one session_scope, plain entities out.

SQLite gets WAL, foreign keys and a busy timeout on every connection, so the
dashboard can read while a worker writes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from sqlalchemy import and_, case, create_engine, event, func, insert, select, update
from sqlalchemy.engine import CursorResult, Engine, make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, NoSuchModuleError
from sqlalchemy.orm import Session, sessionmaker

from db import entities as E
from db.models import BanditStep, Request, RequestPosition, Run, RunPrompt, RunTag, WatchInterval, utcnow

DEFAULT_DB = "data/phoenix.db"
BUSY_TIMEOUT_MS = int(os.environ.get("PHOENIX_BUSY_TIMEOUT_MS", "5000"))
RUN_STATUSES = ("queued", "running", "done", "failed", "cancelled", "interrupted")
HEARTBEAT_S = 2.0  # how often a worker beats for its running run
STALE_AFTER_S = 30.0  # a running run without a heartbeat this long is 'interrupted'


class StoreError(Exception):
    """A database problem the user can fix; the message says how."""

    exit_code = 2


def resolve_url(db: str | None = None) -> str:
    """--db, else PHOENIX_DB, else data/phoenix.db; a SQLAlchemy URL or a file path."""
    value = db or os.environ.get("PHOENIX_DB") or DEFAULT_DB
    if "://" in value:
        try:
            make_url(value)
        except ArgumentError:
            raise StoreError(f"database URL {value!r} is not a valid SQLAlchemy URL") from None
        return value
    return f"sqlite:///{Path(value).expanduser()}"


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _read_only_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.close()


def read_only_file(url: str) -> Path | None:
    """The SQLite file behind ``url`` when it exists but this process may not write it or its folder (a read-only
    mount, another user's files): such a database is opened for reading instead of refused."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    path = Path(u.database).expanduser().resolve()
    if path.is_file() and not (os.access(path.parent, os.W_OK) and os.access(path, os.W_OK)):
        return path
    return None


def make_engine(url: str) -> Engine:
    u = make_url(url)
    frozen = read_only_file(url)
    if frozen is not None:
        # immutable: nothing can change the file, so SQLite needs no lock, WAL index or journal beside it
        engine = create_engine(f"sqlite:///file:{frozen}?mode=ro&immutable=1&uri=true", future=True)
        event.listen(engine, "connect", _read_only_pragmas)
        return engine
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        parent = Path(u.database).expanduser().resolve().parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the database folder {parent}: {exc.strerror}; pass --db with a writable path"
            ) from None
        if not os.access(parent, os.W_OK):
            raise StoreError(f"the database folder {parent} is not writable; pass --db with a writable path")
    try:
        engine = create_engine(
            url, future=True, **({} if u.get_backend_name() == "sqlite" else {"pool_pre_ping": True})
        )
    except NoSuchModuleError:
        raise StoreError(
            f"unknown database kind {u.drivername!r} in {safe_url(url)}; use a SQLite path or "
            "postgresql+psycopg://USER@HOST/DB"
        ) from None
    except ModuleNotFoundError as exc:
        raise StoreError(
            f"no database driver for {safe_url(url)} ({exc.name} is not installed); use postgresql+psycopg:// "
            "(psycopg is in requirements.txt) or a SQLite path"
        ) from None
    if u.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def safe_url(url: str) -> str:
    """The URL with any password hidden, for messages and logs."""
    return make_url(url).render_as_string(hide_password=True)


class Store:
    def __init__(self, url: str, bench_parser: Callable[[dict], Any] | None = None):
        """``bench_parser`` turns a run's stored config into its typed bench config (the engine's BenchConfig,
        passed in because db imports nothing from engine); every RunInfo this store returns carries it as
        ``.bench``, parsed here once, so readers use attributes instead of digging through the dict."""
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.bench_parser = bench_parser

    def _info(self, r: Run, status: str | None = None, tags: list[str] | None = None) -> E.RunInfo:
        info = _run(r, status, tags)
        if self.bench_parser is not None and "bench" in info.config:
            try:
                info.bench = self.bench_parser(info.config)
            except Exception as exc:  # a config no parser of this version reads: readers fall back to the dict,
                info.bench = None  # and the page says why
                info.config_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
        return info

    @contextmanager
    def session_scope(self) -> Iterator[Session]:
        session = self._sessions()
        try:
            yield session
            session.commit()
        except DatabaseError as exc:  # OperationalError and the rest: one line naming the database
            session.rollback()
            raise operational_error(exc, self.url) from None
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    # runs -----------------------------------------------------------------
    def create_run(
        self, name: str, config: dict, target: str, draft: str | None, total: int, status: str = "running"
    ) -> E.RunInfo:
        with self.session_scope() as s:
            run = Run(
                name=name,
                status=status,
                config=config,
                target=target,
                draft=draft,
                progress_total=total,
                progress_done=0,
            )
            s.add(run)
            s.flush()
            return self._info(run)

    def get_run(self, run_id: int) -> E.RunInfo | None:
        """The run, its status as readers see it (status_expr)."""
        with self.session_scope() as s:
            row = s.execute(select(Run, status_expr()).where(Run.id == run_id)).first()
            return self._info(row[0], row[1], tags=_tags(s, [run_id]).get(run_id, [])) if row else None

    def list_runs(self, limit: int = 1000) -> list[E.RunInfo]:
        with self.session_scope() as s:
            rows = s.execute(select(Run, status_expr()).order_by(Run.id.desc()).limit(limit)).all()
            tags = _tags(s, [r[0].id for r in rows])
            return [self._info(r[0], r[1], tags=tags.get(r[0].id, [])) for r in rows]

    def set_status(self, run_id: int, status: str, error: str | None = None) -> None:
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        values: dict[str, object] = {"status": status}
        if error is not None:
            values["error"] = error[:4000]
        if status in ("done", "failed", "cancelled", "interrupted"):
            values["finished_at"] = utcnow()
        with self.session_scope() as s:
            s.execute(update(Run).where(Run.id == run_id).values(**values))

    def attach(self, run_id: int, worker_id: str) -> None:
        """A foreground process (bench, resume) owns a run: its id and heartbeat let others judge staleness."""
        with self.session_scope() as s:
            s.execute(update(Run).where(Run.id == run_id).values(worker_id=worker_id, heartbeat_at=utcnow()))

    def interrupt_if_running(self, run_id: int, reason: str) -> bool:
        """Mark a running run interrupted now (its worker is known to be gone)."""
        with self.session_scope() as s:
            res = s.execute(
                update(Run)
                .where(Run.id == run_id, Run.status == "running")
                .values(status="interrupted", finished_at=utcnow(), error=reason)
            )
            return rowcount(res) == 1

    # queue ------------------------------------------------------------------
    def claim_next(self, worker_id: str) -> E.RunInfo | None:
        """Atomically take the oldest queued run. PostgreSQL: SELECT ... FOR UPDATE SKIP
        LOCKED, so workers on many machines share one queue without waiting on each
        other. SQLite (one writer at a time): one UPDATE guarded by status."""
        if self.engine.dialect.name == "postgresql":
            return self._claim_skip_locked(worker_id)
        with self.session_scope() as s:
            oldest = select(Run.id).where(Run.status == "queued").order_by(Run.id).limit(1).scalar_subquery()
            res = s.execute(
                update(Run)
                .where(Run.id == oldest, Run.status == "queued")
                .values(status="running", worker_id=worker_id, heartbeat_at=utcnow(), cancel_requested=False)
            )
            if rowcount(res) != 1:
                return None
            run = s.scalars(
                select(Run)
                .where(Run.worker_id == worker_id, Run.status == "running")
                .order_by(Run.heartbeat_at.desc(), Run.id.desc())
                .limit(1)
            ).first()
            return self._info(run) if run else None

    def _claim_skip_locked(self, worker_id: str) -> E.RunInfo | None:
        with self.session_scope() as s:
            run = s.scalars(
                select(Run).where(Run.status == "queued").order_by(Run.id).limit(1).with_for_update(skip_locked=True)
            ).first()
            if run is None:
                return None
            run.status, run.worker_id, run.heartbeat_at, run.cancel_requested = "running", worker_id, utcnow(), False
            s.flush()
            return self._info(run)

    def heartbeat(self, run_id: int) -> None:
        with self.session_scope() as s:
            s.execute(update(Run).where(Run.id == run_id).values(heartbeat_at=utcnow()))

    def request_cancel(self, run_id: int) -> str | None:
        """Queued runs are cancelled at once; running ones at the next request boundary."""
        with self.session_scope() as s:
            run = s.get(Run, run_id)
            if run is None:
                return None
            if run.status == "queued":
                run.status, run.finished_at = "cancelled", utcnow()
            elif run.status == "running":
                run.cancel_requested = True
            return run.status

    def cancel_requested(self, run_id: int) -> bool:
        with self.session_scope() as s:
            return bool(s.scalar(select(Run.cancel_requested).where(Run.id == run_id)))

    def requeue(self, run_id: int) -> bool:
        """Put an interrupted, failed or cancelled run back in the queue to resume it."""
        with self.session_scope() as s:
            res = s.execute(
                update(Run)
                .where(Run.id == run_id, Run.status.in_(("interrupted", "failed", "cancelled")))
                .values(status="queued", error=None, finished_at=None, cancel_requested=False)
            )
            return rowcount(res) == 1

    def mark_stale(self, timeout_s: float = STALE_AFTER_S) -> list[int]:
        """Runs whose worker stopped beating for timeout_s become 'interrupted' (the worker's and
        resume's write; readers use status_expr instead)."""
        with self.session_scope() as s:
            ids = list(s.scalars(select(Run.id).where(_stale(timeout_s))))
            if ids:
                s.execute(
                    update(Run)
                    .where(Run.id.in_(ids), Run.status == "running")
                    .values(
                        status="interrupted",
                        finished_at=utcnow(),
                        error="worker stopped (no heartbeat); resume it to continue",
                    )
                )
            return ids

    def merge_config(self, run_id: int, values: dict) -> None:
        """Add keys known only once the run executes (device, dtype) to its stored config."""
        with self.session_scope() as s:
            run = s.get(Run, run_id)
            if run is not None:
                run.config = {**(run.config or {}), **values}

    # requests ---------------------------------------------------------------
    def add_requests(self, records: list[E.RequestRecord], progress: tuple[int, int] | None = None) -> list[int]:
        """Insert requests with their positions and bandit steps, and with ``progress`` = (run id,
        requests done) the run's progress too, all in one transaction: a batch is either wholly
        written with its progress or not at all, so retrying a failed batch never duplicates."""
        if not records:
            return []
        with self.session_scope() as s:
            ids = _insert_requests(s, records)
            if progress is not None:
                _progress(s, *progress)
        return ids

    def requests(self, run_id: int, include_warmup: bool = False) -> list[E.RequestRecord]:
        with self.session_scope() as s:
            q = select(Request).where(Request.run_id == run_id)
            if not include_warmup:
                q = q.where(Request.warmup.is_(False))
            rows = s.scalars(q.order_by(Request.seq)).all()
            positions = _positions_by_request(s, [r.id for r in rows])
            return [_request(r, positions.get(r.id, [])) for r in rows]

    def add_interval(self, run_id: int, interval: E.WatchInterval) -> None:
        """One `serve watch` interval and the run's progress (intervals so far), in one transaction."""
        with self.session_scope() as s:
            s.add(WatchInterval(run_id=run_id, **asdict(interval)))
            s.flush()
            _progress(s, run_id, interval.seq + 1)

    def prompt_text(self, run_id: int, prompt_id: str) -> str | None:
        """The text a run sent for a prompt; None for runs recorded before 0022 kept it."""
        with self.session_scope() as s:
            return s.scalar(select(RunPrompt.text).where(RunPrompt.run_id == run_id, RunPrompt.prompt_id == prompt_id))

    def intervals(self, run_id: int) -> list[E.WatchInterval]:
        with self.session_scope() as s:
            rows = s.scalars(select(WatchInterval).where(WatchInterval.run_id == run_id).order_by(WatchInterval.seq))
            return [
                E.WatchInterval(
                    r.seq, r.seconds, r.drafts, r.draft_tokens, r.accepted, r.generation_tokens, list(r.per_position)
                )
                for r in rows
            ]

    def count_requests(self, run_id: int) -> int:  # tests and benchmarks count kept rows with it
        with self.session_scope() as s:
            return s.scalar(select(func.count()).select_from(Request).where(Request.run_id == run_id)) or 0

    def queued_count(self) -> int:
        with self.session_scope() as s:
            return s.scalar(select(func.count()).select_from(Run).where(Run.status == "queued")) or 0

    def bandit_steps(self, run_id: int) -> list[tuple[int, E.BanditRecord]]:
        """(request seq, step) for every bandit decision of a run, in order."""
        with self.session_scope() as s:
            rows = s.execute(
                select(Request.seq, BanditStep)
                .join(BanditStep, BanditStep.request_id == Request.id)
                .where(Request.run_id == run_id)
                .order_by(Request.seq)
            ).all()
            return [(seq, _bandit(b)) for seq, b in rows]


def rowcount(result) -> int:
    """Rows an UPDATE matched (a CursorResult's rowcount, which the generic Result type does not declare)."""
    return cast(CursorResult, result).rowcount


def _insert_requests(s: Session, records: list[E.RequestRecord]) -> list[int]:
    """Bulk INSERT ... RETURNING, so the ids come back in parameter order."""
    skip = ("positions", "bandit", "id", "created_at", "prompt_text")
    now = utcnow()
    rows = [{**{k: v for k, v in vars(r).items() if k not in skip}, "created_at": r.created_at or now} for r in records]
    ids = list(s.scalars(insert(Request).returning(Request.id, sort_by_parameter_order=True), rows))
    positions = [
        {
            "request_id": rid,
            "position": p.position,
            "proposed": p.proposed,
            "accepted": p.accepted,
            "reached": p.reached,
        }
        for rid, rec in zip(ids, records)
        for p in rec.positions
    ]
    if positions:
        s.execute(insert(RequestPosition), positions)
    steps = [{"request_id": rid, **vars(rec.bandit)} for rid, rec in zip(ids, records) if rec.bandit is not None]
    if steps:
        s.execute(insert(BanditStep), steps)
    _insert_prompts(s, records)
    return ids


def _insert_prompts(s: Session, records: list[E.RequestRecord]) -> None:
    """Each prompt's text once per run: the first record of a (run, prompt) that carries it."""
    texts = {(r.run_id, r.prompt_id): r.prompt_text for r in records if r.prompt_text is not None}
    for run_id in {run for run, _ in texts}:
        have = set(s.scalars(select(RunPrompt.prompt_id).where(RunPrompt.run_id == run_id)))
        new = [
            {"run_id": run, "prompt_id": pid, "text": text}
            for (run, pid), text in texts.items()
            if run == run_id and pid not in have
        ]
        if new:
            s.execute(insert(RunPrompt), new)


def _progress(s: Session, run_id: int, done: int) -> None:
    s.execute(update(Run).where(Run.id == run_id).values(progress_done=done, heartbeat_at=utcnow()))


def _stale(timeout_s: float):
    cutoff = utcnow() - timedelta(seconds=timeout_s)
    return and_(Run.status == "running", Run.heartbeat_at.is_not(None), Run.heartbeat_at < cutoff)


def status_expr(stale_after_s: float = STALE_AFTER_S):
    """A run's status as readers should see it: 'running' without a recent heartbeat reads as
    'interrupted', computed in SQL so a read never writes."""
    return case((_stale(stale_after_s), "interrupted"), else_=Run.status)


def operational_error(exc: DatabaseError, url: str) -> StoreError:
    text = str(exc.orig) if exc.orig is not None else str(exc)
    where = safe_url(url)
    if "readonly database" in text or "read-only" in text:
        return StoreError(
            f"{where} is read-only here (its file or folder is not writable): reading works, changes "
            "do not; copy it to a writable folder to change it"
        )
    if "file is not a database" in text or "malformed" in text:
        return StoreError(
            f"{where} is not a SQLite database, or it is corrupt; pass --db with a Phoenix database "
            "(a new path creates one)"
        )
    if "locked" in text or "busy" in text:
        return StoreError(
            f"the database {where} is locked by another writer for longer than {BUSY_TIMEOUT_MS} ms; "
            "retry when it is free"
        )
    if "unable to open" in text or "readonly" in text or "read-only" in text:
        return StoreError(f"cannot write the database {where} ({text}); pass --db with a writable path")
    if "connection" in text and ("refused" in text or "failed" in text) or "could not connect" in text:
        return StoreError(
            f"cannot reach the database server of {where}; start it, or point --db / PHOENIX_DB elsewhere"
        )
    if "password authentication failed" in text or "does not exist" in text and "database" in text:
        return StoreError(
            f"the database server refused {where} ({text.splitlines()[0]}); check the user, password and database name"
        )
    if "no such table" in text or "no such column" in text:
        return StoreError(f"the database {where} has an old schema ({text}); run `python -m engine db upgrade`")
    if ("disk" in text and "full" in text) or "disk I/O error" in text:
        return StoreError(f"cannot write {where} ({text}): the disk is probably full; free space, then resume the run")
    return StoreError(f"database error on {where}: {text}")


def _run(r: Run, status: str | None = None, tags: list[str] | None = None) -> E.RunInfo:
    return E.RunInfo(
        r.id,
        r.name,
        status or r.status,
        r.created_at,
        r.finished_at,
        dict(r.config or {}),
        r.target,
        r.draft,
        r.progress_done,
        r.progress_total,
        r.error,
        r.worker_id,
        r.heartbeat_at,
        bool(r.cancel_requested),
        list(tags or []),
        r.note,
        bool(r.archived),
    )


def _tags(s: Session, run_ids: list[int]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    if run_ids:
        for run_id, tag in s.execute(
            select(RunTag.run_id, RunTag.tag).where(RunTag.run_id.in_(run_ids)).order_by(RunTag.tag)
        ):
            out.setdefault(run_id, []).append(tag)
    return out


def _positions_by_request(s: Session, ids: list[int]) -> dict[int, list[E.PositionCount]]:
    out: dict[int, list[E.PositionCount]] = {}
    for chunk in range(0, len(ids), 500):
        part = ids[chunk : chunk + 500]
        rows = s.scalars(
            select(RequestPosition).where(RequestPosition.request_id.in_(part)).order_by(RequestPosition.position)
        ).all()
        for p in rows:
            out.setdefault(p.request_id, []).append(E.PositionCount(p.position, p.proposed, p.accepted, p.reached))
    return out


def _request(r: Request, positions: list[E.PositionCount]) -> E.RequestRecord:
    cols = {
        c: getattr(r, c)
        for c in E.RequestRecord.__dataclass_fields__
        if c not in ("positions", "bandit", "prompt_text")
    }
    return E.RequestRecord(**cols, positions=positions)


def _bandit(b: BanditStep) -> E.BanditRecord:
    return E.BanditRecord(
        t=b.t,
        explored=b.explored,
        chosen_k=b.chosen_k,
        arm_means=dict(b.arm_means),
        arm_counts=dict(b.arm_counts),
        reward=b.reward,
        epsilon=b.epsilon,
        p_not_best=b.p_not_best,
        policy=b.policy or "epsilon_greedy",
        fallback=bool(b.fallback),
        arm=b.arm,
    )
