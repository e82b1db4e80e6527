"""Schema versioning through Alembic, and the start-up check that names the fix."""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.exc import OperationalError

from db.store import StoreError, make_engine, operational_error, safe_url

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"

def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["url"] = url  # not via set_main_option: '%' in URLs breaks configparser
    return cfg

def head() -> str:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()

def current(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except OperationalError as exc:
        raise operational_error(exc, url) from None
    finally:
        engine.dispose()

def upgrade(url: str, revision: str = "head") -> str:
    command.upgrade(alembic_config(url), revision)
    return current(url)

def upgrade_command(url: str) -> str:
    return f"python -m engine db upgrade --db '{safe_url(url)}'"

def ensure_schema(url: str, create_if_empty: bool = True) -> None:
    """Upgrade a brand-new database; refuse (naming the fix) one that is behind or ahead."""
    rev = current(url)
    want = head()
    if rev == want:
        return
    script = ScriptDirectory.from_config(alembic_config(url))
    if rev is None:
        engine = make_engine(url)
        try:
            empty = not inspect(engine).get_table_names()
        finally:
            engine.dispose()
        if empty and create_if_empty:
            upgrade(url)
            return
        raise StoreError(f"the database {safe_url(url)} has no Phoenix schema version; run `{upgrade_command(url)}`")
    try:
        script.get_revision(rev)
    except Exception:
        raise StoreError(f"the database {safe_url(url)} has schema {rev}, newer than this Phoenix knows (head {want}); upgrade Phoenix") from None
    raise StoreError(f"the database {safe_url(url)} is at schema {rev}, behind {want}; run `{upgrade_command(url)}`")
