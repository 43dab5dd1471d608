"""Alembic environment for the read models (services/projector/models.py)."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from services.projector.db import make_engine
from services.projector.models import Base
from shared.settings import Settings

config = context.config
if config.config_file_name is not None and config.attributes.get("engine") is None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _engine():
    # From code, migrate() hands over its engine (with its PostgreSQL schema); from the alembic
    # command line the URL comes from GPULEDGER_DB_URL or the default SQLite file.
    return config.attributes.get("engine") or make_engine(Settings().database_url)


def run_migrations_offline() -> None:
    context.configure(url=Settings().database_url, target_metadata=Base.metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    with _engine().connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
