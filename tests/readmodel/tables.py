"""Helpers for comparing read models: a whole database as plain, ordered Python values."""

from __future__ import annotations

import json

from sqlalchemy import select

from services.projector.models import TABLES, PositionRow


def dump(engine, with_position: bool = True) -> dict[str, list[tuple]]:
    tables = {}
    with engine.connect() as conn:
        for model in TABLES:
            if model is PositionRow and not with_position:
                continue
            columns = [c for c in model.__table__.columns if c.name != "updated_at"]
            rows = conn.execute(select(*columns)).all()
            tables[model.__tablename__] = sorted((tuple(_plain(v) for v in r) for r in rows), key=repr)
    return tables


def _plain(value):
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return value
