"""Read-model fixtures: every projector test runs on SQLite and on PostgreSQL (when reachable).

PostgreSQL: 127.0.0.1:5432, user postgres, database test (override with GPULEDGER_TEST_PG_URL).
Each test gets a schema of its own (dropped afterwards), so parallel runs never collide.
"""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import create_engine, text

from services.projector.db import make_engine, migrate

PG_URL = os.environ.get("GPULEDGER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _postgres_problem() -> str | None:
    try:
        engine = create_engine(PG_URL, connect_args={"connect_timeout": 2})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as err:  # any failure means: no server to test against here
        return f"no PostgreSQL at {PG_URL} ({type(err).__name__}: {str(err).splitlines()[0][:120]})"
    return None


@pytest.fixture(scope="session")
def postgres_problem() -> str | None:
    return _postgres_problem()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request, tmp_path, postgres_problem):
    """(url, schema) of an empty database of the parametrized kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'readmodel.db'}", None
        return
    if postgres_problem:
        pytest.skip(f"PostgreSQL parameter skipped: {postgres_problem}")
    schema = f"rm_{uuid.uuid4().hex[:12]}"
    yield PG_URL, schema
    engine = create_engine(PG_URL)
    with engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    engine.dispose()


@pytest.fixture
def engine(database):
    """An engine on a migrated (alembic head) empty read-model database."""
    url, schema = database
    eng = make_engine(url, schema)
    migrate(eng)
    yield eng
    eng.dispose()
