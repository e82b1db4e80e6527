"""The database connection every part of the store shares (mlflow style): the URL, the SQLAlchemy engine
with its SQLite pragmas, one ``session_scope``, and errors as one line that says what to do.

SQLite gets WAL, foreign keys and a busy timeout on every connection, so the dashboard can read while a worker
writes. ``StoreBase`` is what each part of ``db.store.Store`` builds on.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pandas as pd
from sqlalchemy import and_, case, create_engine, event, select
from sqlalchemy.engine import CursorResult, Engine, make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, NoSuchModuleError
from sqlalchemy.orm import Session, sessionmaker

from db import entities as E
from db.entities import STALE_AFTER_S, StoreError  # noqa: F401  (re-exported: callers name them from here)
from db.models import Run, RunTag, utcnow

DEFAULT_DB = "data/phoenix.db"
BUSY_TIMEOUT_MS = int(os.environ.get("PHOENIX_BUSY_TIMEOUT_MS", "5000"))
RUN_STATUSES = ("queued", "running", "done", "failed", "cancelled", "interrupted")
HEARTBEAT_S = 2.0  # how often a worker beats for its running run


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
    """The URL with any password hidden, for messages, logs and stored config: a database URL, or any other
    (an MLflow tracking URI such as http://user:PASSWORD@host, or a bare `databricks`)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:  # not a URL SQLAlchemy parses: hide the password of whatever authority it has
        parts = urllib.parse.urlsplit(url)
        if not parts.password:
            return url
        netloc = f"{parts.username}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


class StoreBase:
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

    def _frame(self, stmt) -> pd.DataFrame:
        """A statement's rows as a DataFrame, its columns named as the statement names them."""
        with self.session_scope() as s:
            result = s.execute(stmt)
            return pd.DataFrame(result.all(), columns=list(result.keys()))

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


def rowcount(result) -> int:
    """Rows an UPDATE matched (a CursorResult's rowcount, which the generic Result type does not declare)."""
    return cast(CursorResult, result).rowcount


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
