"""Schema versioning through Alembic, and the start-up check that names the fix."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.exc import DatabaseError

from db.store import StoreError, make_engine, operational_error, safe_url

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["url"] = url  # not via set_main_option: '%' in URLs breaks configparser
    return cfg


def head() -> str:
    rev = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert rev is not None, "migrations/ holds no revision"
    return rev


def current(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except DatabaseError as exc:
        raise operational_error(exc, url) from None
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head", allow_foreign_tables: bool = False) -> str | None:
    """Migrate to ``revision``; refuse a database at a revision this Phoenix does not know, and one that holds
    tables without a Phoenix schema version (another application's), unless explicitly allowed."""
    rev = current(url)
    if rev is not None and not _known(rev):
        raise StoreError(
            f"the database {safe_url(url)} is at schema {rev}, which this Phoenix does not know (head {head()}): "
            "upgrade Phoenix, or pass --db with a Phoenix database"
        )
    if rev is None and not allow_foreign_tables:
        tables = _tables(url)
        if tables:
            raise StoreError(
                f"the database {safe_url(url)} already holds tables Phoenix did not version ({', '.join(tables[:5])}); "
                "Phoenix adds its tables only to an empty database: pass --db with a new path, or "
                "--allow-foreign-tables to add them anyway"
            )
    try:
        command.upgrade(alembic_config(url), revision)
    except DatabaseError as exc:
        raise operational_error(exc, url) from None
    return current(url)


def _known(rev: str) -> bool:
    try:
        return ScriptDirectory.from_config(alembic_config("sqlite://")).get_revision(rev) is not None
    except Exception:  # alembic raises several kinds for an unknown id
        return False


def _tables(url: str) -> list[str]:
    engine = make_engine(url)
    try:
        return sorted(inspect(engine).get_table_names())
    except DatabaseError as exc:
        raise operational_error(exc, url) from None
    finally:
        engine.dispose()


def upgrade_command(url: str) -> str:
    return f"python -m engine db upgrade --db '{safe_url(url)}'"


def ensure_schema(url: str, create_if_empty: bool = True) -> None:
    """Upgrade a brand-new database; refuse (naming the fix) one that is behind or ahead."""
    rev = current(url)
    want = head()
    if rev == want:
        return
    if rev is None:
        if not _tables(url) and create_if_empty:
            upgrade(url)
            return
        raise StoreError(
            f"the database {safe_url(url)} has tables but no Phoenix schema version: it is another "
            f"application's, or predates versioning; pass --db with a new path, or run "
            f"`{upgrade_command(url)} --allow-foreign-tables`"
        )
    if not _known(rev):
        raise StoreError(
            f"the database {safe_url(url)} has schema {rev}, newer than this Phoenix knows (head {want}); "
            "upgrade Phoenix"
        )
    raise StoreError(f"the database {safe_url(url)} is at schema {rev}, behind {want}; run `{upgrade_command(url)}`")
