"""Writing one batch: every changed row and the new position in one transaction.

The position row is also the fence: a batch commits only on top of the position it was built
from. A batch already committed (a retry after a lost commit acknowledgement) is skipped; a
position moved by someone else (a second projector, a rebuild) raises `PositionMoved`.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import msgspec
from sqlalchemy import JSON, Connection, Engine, bindparam, delete, insert, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from services.projector.db import writer
from services.projector.models import (
    AllocationRow,
    ClaimEventRow,
    ClaimRow,
    DeviceRow,
    NodeRow,
    PoolRow,
    PositionRow,
    QuotaRow,
)

log = logging.getLogger("gpuledger.projector")

CHUNK = 500  # keys per DELETE ... IN (...): under every driver's parameter limit


class PositionMoved(RuntimeError):
    def __init__(self, name: str, expected: int, actual: int):
        super().__init__(f"projection {name!r} is at {actual}, this batch was built on {expected}")
        self.expected, self.actual = expected, actual


@dataclass
class Changes:
    """What one batch writes: rows replaced by key, rows deleted, index rows appended."""

    base_seq: int  # the position the batch was built on
    last_seq: int  # the position it reaches
    events: int = 0
    replace: dict[type, list[dict[str, Any]]] = field(default_factory=dict)
    remove: dict[type, set[str]] = field(default_factory=dict)
    # rows stored before, updated by key in the columns they carry (all rows of a table the same)
    update: dict[type, list[dict[str, Any]]] = field(default_factory=dict)
    allocations_of: set[str] = field(default_factory=set)  # claims whose grants are rewritten
    allocations: list[dict[str, Any]] = field(default_factory=list)
    all_pools: bool = False  # pools are few: the table is rewritten whole when one changes
    index: list[dict[str, Any]] = field(default_factory=list)


_KEYS = {ClaimRow: ClaimRow.id, NodeRow: NodeRow.name, DeviceRow: DeviceRow.uuid,
         PoolRow: PoolRow.name, QuotaRow: QuotaRow.namespace}


_INT_LIMITS = {"BIGINT": 2**63 - 1, "INTEGER": 2**31 - 1, "SMALLINT": 2**15 - 1}


def clamp_integers(changes: Changes) -> list[str]:
    """Set every integer past its column's range (PostgreSQL's INTEGER, BIGINT; SQLite's 64 bits)
    to the range's end, in place; returns `table.column: value` of each. A log may hold such a
    number for good (an endpoint's priority of 10^26 stored before bounds existed, folded as
    stored): without this one row made every commit fail and the read models stopped there."""
    tables = [(t, rows) for t, rows in (*changes.replace.items(), *changes.update.items())]
    tables += [(AllocationRow, changes.allocations), (ClaimEventRow, changes.index)]
    clamped = []
    for table, rows in tables:
        limits = {c.key: _INT_LIMITS[str(c.type)] for c in table.__table__.columns
                  if str(c.type) in _INT_LIMITS}
        for row in rows:
            for key, limit in limits.items():
                value = row.get(key)
                if isinstance(value, int) and not -limit - 1 <= value <= limit:
                    clamped.append(f"{table.__tablename__}.{key}: {value}")
                    row[key] = limit if value > 0 else -limit - 1
    return clamped


def read_position(engine: Engine, name: str) -> int:
    with engine.connect() as conn:
        return _position(conn, name, lock=False) or 0


def commit(engine: Engine, name: str, changes: Changes) -> bool:
    """Write the batch and its position atomically; False when it was already written."""
    try:
        return _commit(engine, name, changes)
    except Exception as err:
        clamped = clamp_integers(changes) if _out_of_range(err) else []
        if not clamped:
            raise
    log.error("commit of %d..%d: %d integers past their column's range written as its end (the "
              "log keeps them whole): %s", changes.base_seq + 1, changes.last_seq, len(clamped),
              "; ".join(clamped[:5]))
    return _commit(engine, name, changes)


def _out_of_range(err: Exception) -> bool:
    """SQLite's OverflowError ("Python int too large to convert to SQLite INTEGER"), PostgreSQL's
    "integer out of range" / "bigint out of range" (psycopg's NumericValueOutOfRange)."""
    return isinstance(err, OverflowError) or "out of range" in str(err) or "OverflowError" in str(err)


def _commit(engine: Engine, name: str, changes: Changes) -> bool:
    with writer(engine).begin() as conn:
        current = _position(conn, name, lock=True)
        if current == changes.last_seq > changes.base_seq:
            return False  # our own earlier attempt committed; its acknowledgement was lost
        if (current or 0) != changes.base_seq:
            raise PositionMoved(name, changes.base_seq, current or 0)
        _write_rows(conn, changes)
        _write_position(conn, name, changes.last_seq, exists=current is not None)
    return True


def _position(conn: Connection, name: str, lock: bool) -> int | None:
    query = select(PositionRow.last_seq).where(PositionRow.name == name)
    if lock:
        query = query.with_for_update()  # PostgreSQL: one writer per projection at a time
    return conn.execute(query).scalar()


def _write_rows(conn: Connection, changes: Changes) -> None:
    if changes.all_pools:
        conn.execute(delete(PoolRow))
    for table, keys in changes.remove.items():
        _delete_keys(conn, table, keys)
    for table, rows in changes.replace.items():
        if rows:
            _upsert(conn, table, rows)
    for table, rows in changes.update.items():
        if rows:
            _update(conn, table, rows)
    if changes.allocations_of:
        _delete_in(conn, AllocationRow, AllocationRow.claim_id, changes.allocations_of)
    if changes.allocations:
        _executemany(conn, lambda: insert(AllocationRow), AllocationRow, changes.allocations, "insert")
    if changes.index:
        _executemany(conn, lambda: insert(ClaimEventRow), ClaimEventRow, changes.index, "insert")


def _upsert(conn: Connection, table: type, rows: list[dict[str, Any]]) -> None:
    """Insert or replace by primary key: one statement per table and batch, in key order. A batch's
    rows come in the order their claims were touched, scattered over the table's b-tree, and each
    row's page was looked for anew (SQLite's page cache holds a few MB, a table of tens of thousands
    of claims more): in key order consecutive rows share pages (a claim row updated: 7.0 against
    12.9 us in a model of 25,000 updates of a 40,000-claim table). A batch holds each key once, so
    the order changes nothing else."""
    rows.sort(key=itemgetter(_KEYS[table].key))
    dialect_insert = _UPSERTS.get(conn.dialect.name)
    if dialect_insert is None:  # another database: delete and insert, in the same transaction
        _delete_keys(conn, table, {row[_KEYS[table].key] for row in rows})
        conn.execute(insert(table), rows)
        return
    def build():
        statement = dialect_insert(table)
        key = _KEYS[table].key
        updates = {c.name: statement.excluded[c.name] for c in table.__table__.columns if c.name != key}
        return statement.on_conflict_do_update(index_elements=[key], set_=updates)

    _executemany(conn, build, table, rows, "upsert")


UPDATE_KEY = "key_"  # the bound parameter of an update's key (a column's own name is its new value)


def _update(conn: Connection, table: type, rows: list[dict[str, Any]]) -> None:
    """Update stored rows by primary key in the columns the rows carry (every row the same)."""
    key = _KEYS[table].key
    # a retried commit gets the same rows back, each already carrying UPDATE_KEY: not a column
    columns = tuple(name for name in rows[0] if name not in (key, UPDATE_KEY))

    def build():
        return update(table).where(_KEYS[table] == bindparam(UPDATE_KEY)).values(
            {name: bindparam(name) for name in columns})

    for row in rows:
        row[UPDATE_KEY] = row[key]
    rows.sort(key=itemgetter(key))  # see `_upsert`
    _executemany(conn, build, table, rows, ("update", columns))


def _executemany(conn: Connection, build: Callable[[], Any], table: type, rows: list[dict[str, Any]],
                 kind: str | tuple) -> None:
    """The driver's executemany on SQLAlchemy's SQL: per-row parameter processing in SQLAlchemy
    costs more than the database's insert, and a batch has tens of thousands of rows."""
    sql, names = _compiled(conn, (kind, table), build)
    conn.exec_driver_sql(sql, _parameters(table, names, rows))


def _parameters(table: type, names: tuple[str, ...] | None, rows: list[dict[str, Any]]) -> list:
    """Each row's parameters as the driver takes them, JSON columns encoded: by name (`names` None),
    else a sequence in `names`' order, picked by one `itemgetter` (a generator over the names per
    row cost more than SQLite's insert of it)."""
    json_columns = _json_columns(table)
    if names is None:
        if not json_columns:
            return rows
        json_columns = [c for c in json_columns if c in rows[0]]  # an update carries some only
        return [{**row, **{c: _json(row[c]) for c in json_columns}} for row in rows]
    pick = itemgetter(*names)
    if len(names) == 1:
        return [(pick(row),) for row in rows]
    json_at = [i for i, name in enumerate(names) if name in json_columns]
    if not json_at:
        return list(map(pick, rows))
    out = []
    for row in rows:
        values = list(pick(row))
        for i in json_at:
            value = values[i]
            if value is not None:
                values[i] = _encode(value).decode()
        out.append(tuple(values))
    return out


# (dialect, driver, paramstyle, kind, table) -> (SQL, parameter names when positional)
_COMPILED: dict[tuple, tuple[str, tuple[str, ...] | None]] = {}


def _compiled(conn: Connection, key: tuple, build: Callable[[], Any]) -> tuple[str, tuple[str, ...] | None]:
    """A statement's SQL, built and compiled once per database driver: an upsert costs about 1.5 ms
    to build and compile, as much as a whole commit of a small batch (the projector commits up to
    ten times a second, whatever the rate)."""
    dialect = conn.dialect
    full_key = (dialect.name, dialect.driver, dialect.paramstyle, *key)
    found = _COMPILED.get(full_key)
    if found is None:
        compiled = build().compile(dialect=dialect)
        names = tuple(compiled.positiontup) if compiled.positional else None
        found = _COMPILED[full_key] = (str(compiled), names)
    return found


@functools.cache
def _json_columns(table: type) -> frozenset[str]:
    return frozenset(c.name for c in table.__table__.columns if isinstance(c.type, JSON))


def _json(value: Any) -> str | None:
    return None if value is None else _encode(value).decode()


_encode = msgspec.json.Encoder().encode


_UPSERTS = {"sqlite": sqlite_insert, "postgresql": postgresql_insert}


def _delete_keys(conn: Connection, table: type, keys: set[str]) -> None:
    _delete_in(conn, table, _KEYS[table], keys)


def _delete_in(conn: Connection, table: type, column, keys: set[str]) -> None:
    ordered = sorted(keys)
    for start in range(0, len(ordered), CHUNK):
        conn.execute(delete(table).where(column.in_(ordered[start:start + CHUNK])))


def _write_position(conn: Connection, name: str, seq: int, exists: bool) -> None:
    values = {"last_seq": seq, "updated_at": time.time()}
    if exists:
        conn.execute(update(PositionRow).where(PositionRow.name == name).values(**values))
    else:
        conn.execute(insert(PositionRow).values(name=name, **values))
