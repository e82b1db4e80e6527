"""What several commands share: the database, Sentry, and reading a run by id."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from db.entities import RunInfo
from engine.bench.config import stored
from engine.config import add_options, given_values
from engine.errors import PhoenixError
from engine.observe.sentry import SentryConfig, Telemetry, init
from engine.provenance import git_sha

if TYPE_CHECKING:
    from db.store import Store


def add_db(p) -> None:
    p.add_argument("--db", default=None, help="SQLAlchemy URL or file path (default: $PHOENIX_DB or data/phoenix.db)")


RUN_ID_MAX = 2**63 - 1  # SQLite's and PostgreSQL's bigint ceiling


def run_id(text: str) -> int:
    """A run id argparse accepts: a whole number the database can hold."""
    value = int(text) if text.strip().isascii() and text.strip().lstrip("-").isdigit() else None
    if value is None or not 1 <= value <= RUN_ID_MAX:
        raise argparse.ArgumentTypeError(f"run ids are whole numbers from 1 to {RUN_ID_MAX}, got {text!r}")
    return value


def add_run_command(sub, name: str, help_text: str, func):
    """A command about one stored run: `NAME RUN [--db ...]`."""
    p = sub.add_parser(name, help=help_text)
    p.add_argument("run", type=run_id)
    add_db(p)
    p.set_defaults(func=func)
    return p


def add_sentry(p) -> None:
    add_options(p, SentryConfig, prefix="sentry")


def open_store(db: str | None, create_if_empty: bool = True) -> Store:
    from db.migrate import ensure_schema  # lazy: SQLAlchemy and pandas, kept off --help
    from db.store import Store, resolve_url  # lazy: as above

    url = resolve_url(db)
    ensure_schema(url, create_if_empty=create_if_empty)
    return Store(url, bench_parser=stored)


def open_existing_store(db: str | None) -> Store:
    """A store that must already exist (a judging command judges something): a SQLite path that is not there, or a
    database without Phoenix's schema, is one line, and nothing is created."""
    from db.store import resolve_url  # lazy: kept off --help

    url = resolve_url(db)
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.is_file() or path.stat().st_size == 0:
            raise PhoenixError(f"no Phoenix database at {path}: check --db (nothing was created)")
    return open_store(db, create_if_empty=False)


def start_telemetry(args) -> Telemetry:
    """Sentry from the environment, with any --sentry-* flag on top."""
    return init(SentryConfig.from_env(**given_values(SentryConfig, args, "sentry")), release=git_sha())


def get_run(store: Store, run_id: int) -> RunInfo:
    run = store.get_run(run_id)
    if run is None:
        raise PhoenixError(f"no run {run_id}: see `python -m engine runs`")
    return run
