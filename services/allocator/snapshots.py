"""Allocator snapshots in the NATS object store: load at start, save every N events."""

from __future__ import annotations

import gc
import io
import logging

from nats.js.errors import NotFoundError, ObjectNotFoundError

from schemas import subjects
from services.allocator.core.snapshot import from_snapshot, to_snapshot
from services.allocator.core.state import State

log = logging.getLogger("gpuledger.allocator")
SNAPSHOT_NAME = "allocator-state"


async def _bucket(js):
    try:
        return await js.object_store(subjects.SNAPSHOT_BUCKET)
    except (NotFoundError, Exception):
        return await js.create_object_store(subjects.SNAPSHOT_BUCKET)


async def load_snapshot(js) -> State | None:
    """The last snapshot, or None (then the whole log is replayed)."""
    store = await _bucket(js)
    buffer = io.BytesIO()  # nats-py appends chunks to a bytes object otherwise: quadratic in size
    try:
        await store.get(SNAPSHOT_NAME, writeinto=buffer)
    except (ObjectNotFoundError, NotFoundError):
        return None
    was_on = gc.isenabled()
    gc.disable()  # decoding builds the whole state at once: nothing for the cyclic collector yet
    try:
        return from_snapshot(buffer.getvalue())
    except Exception as err:  # an unreadable snapshot only costs a full replay
        log.warning("ignoring unreadable snapshot: %s", err)
        return None
    finally:
        if was_on:
            gc.enable()


async def save_snapshot(js, state: State) -> int:
    store = await _bucket(js)
    data = to_snapshot(state)
    await store.put(SNAPSHOT_NAME, data)
    return len(data)
