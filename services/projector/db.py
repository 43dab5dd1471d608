"""Engines and the schema. Alembic owns the schema: `migrate(url)` is `alembic upgrade head`.

The migration scripts live in deploy/migrations (found beside the source tree, as with an editable
install, or at GPULEDGER_MIGRATIONS_DIR). A PostgreSQL `schema` puts every table, alembic's own
version table included, in that schema: parallel test runs and side-by-side rebuilds don't collide.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url

MIGRATIONS_ENV = "GPULEDGER_MIGRATIONS_DIR"
_encode_json = msgspec.json.Encoder().encode
WRITER_OPTION = "gpuledger_writer"


class MigrationsNotFound(RuntimeError):
    pass


def migrations_dir() -> Path:
    """deploy/migrations of this source tree, or the folder named by GPULEDGER_MIGRATIONS_DIR."""
    override = os.environ.get(MIGRATIONS_ENV)
    candidates = [Path(override)] if override else []
    candidates.append(Path(__file__).resolve().parents[2] / "deploy" / "migrations")
    for folder in candidates:
        if (folder / "env.py").is_file():
            return folder
    raise MigrationsNotFound(f"alembic migrations not found (looked in {', '.join(map(str, candidates))});"
                             f" set {MIGRATIONS_ENV} to the deploy/migrations folder")


def make_engine(url: str, schema: str | None = None, **kwargs) -> Engine:
    """An engine for the read models: SQLite gets WAL; PostgreSQL gets `schema` as its search path."""
    parsed = make_url(url)
    kwargs.setdefault("json_serializer", _json)
    if parsed.get_backend_name() == "sqlite":
        _ensure_sqlite_folder(parsed.database)
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    engine = create_engine(url, pool_pre_ping=True, **kwargs)
    if schema:
        event.listen(engine, "connect", lambda conn, _rec: _set_search_path(conn, schema))
    return engine


def _json(value) -> str:
    return _encode_json(value).decode()


def _ensure_sqlite_folder(database: str | None) -> None:
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _sqlite_pragmas(conn, _record) -> None:
    # The driver's own transaction handling starts a transaction only at the first write, so a
    # read-check-write (the position fence) would not be atomic: we issue BEGIN ourselves.
    conn.isolation_level = None
    # WAL lets readers (the CLI, an API) read while the projector writes; NORMAL sync keeps every
    # commit atomic (rows and position together) and only risks the last commits on power loss,
    # which the projector re-derives from the log.
    cursor = conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def _sqlite_begin(conn) -> None:
    # A writer takes the write lock up front (IMMEDIATE): its position check and its writes are
    # one atomic step. Readers begin DEFERRED and, under WAL, never wait for the writer.
    immediate = conn.get_execution_options().get(WRITER_OPTION, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def writer(engine: Engine) -> Engine:
    """The engine to write a batch with (SQLite: BEGIN IMMEDIATE; PostgreSQL: unchanged)."""
    return engine.execution_options(**{WRITER_OPTION: True})


def _set_search_path(conn, schema: str) -> None:
    cursor = conn.cursor()
    cursor.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    cursor.execute(f'SET search_path TO "{schema}"')
    cursor.close()
    conn.commit()


def alembic_config(engine: Engine | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["engine"] = engine
    return config


def migrate(url: str | Engine, schema: str | None = None, revision: str = "head") -> None:
    """`alembic upgrade head` on this database: the only way the read-model schema is made."""
    engine = url if isinstance(url, Engine) else make_engine(url, schema)
    command.upgrade(alembic_config(engine), revision)


def drop_all(url: str | Engine, schema: str | None = None) -> None:
    """`alembic downgrade base`: every read-model table goes (for a rebuild)."""
    engine = url if isinstance(url, Engine) else make_engine(url, schema)
    command.downgrade(alembic_config(engine), "base")


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        try:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except Exception:
            return None
