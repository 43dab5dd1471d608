"""Allocator snapshots in the NATS object store: load at start, save every N events."""

from __future__ import annotations

import base64
import gc
import hashlib
import io
import logging

from nats.js.api import ObjectStoreConfig
from nats.js.errors import NotFoundError, ObjectNotFoundError

from schemas import subjects
from shared.fastread import RangeReadError, open_range_reader
from shared.settings import Settings
from ledger.snapshot import from_snapshot, to_snapshot
from ledger.state import State

log = logging.getLogger("gpuledger.allocator")
SNAPSHOT_NAME = "allocator-state"


async def _bucket(js):
    try:
        return await js.object_store(subjects.SNAPSHOT_BUCKET)
    except (NotFoundError, Exception):
        # as many replicas as the streams: on a cluster a snapshot outlives one server's loss
        config = ObjectStoreConfig(bucket=subjects.SNAPSHOT_BUCKET, replicas=Settings().stream_replicas)
        return await js.create_object_store(subjects.SNAPSHOT_BUCKET, config=config)


async def load_snapshot(js) -> State | None:
    """The last snapshot, or None (then the whole log is replayed)."""
    store = await _bucket(js)
    try:
        data = await read_object(js, store, SNAPSHOT_NAME)
    except (ObjectNotFoundError, NotFoundError):
        return None
    except (ValueError, RangeReadError) as err:  # a damaged snapshot only costs a full replay
        log.warning("ignoring unreadable snapshot: %s", err)
        return None
    was_on = gc.isenabled()
    gc.disable()  # decoding builds the whole state at once: nothing for the cyclic collector yet
    try:
        return from_snapshot(data)
    except Exception as err:  # an unreadable snapshot only costs a full replay
        log.warning("ignoring unreadable snapshot: %s", err)
        return None
    finally:
        if was_on:
            gc.enable()


async def read_object(js, store, name: str) -> bytes:
    """The object's bytes, its chunks read through `shared.fastread` (a 200 MB snapshot in about a
    second instead of nats-py's per-chunk consumer), checked against the stored size and SHA-256."""
    info = await store.get_info(name)
    nc = getattr(js, "_nc", None)
    reader = None
    if nc is not None and info.size and info.nuid:
        stream = f"OBJ_{subjects.SNAPSHOT_BUCKET}"
        last = (await js.stream_info(stream)).state.last_seq
        reader = await open_range_reader(nc, stream, 1, last, f"$O.{subjects.SNAPSHOT_BUCKET}.C.{info.nuid}")
    if reader is None:
        buffer = io.BytesIO()  # nats-py appends chunks to a bytes object otherwise: quadratic in size
        await store.get(name, writeinto=buffer)
        return buffer.getvalue()
    data = b"".join([payload async for batch in reader.batches() for _, _, payload, _ in batch])
    digest = "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
    if len(data) != info.size or digest.rstrip("=") != (info.digest or "").rstrip("="):
        raise ValueError(f"object {name}: read {len(data)} bytes that do not match its size "
                         f"{info.size} or digest")
    return data


async def save_snapshot(js, state: State) -> int:
    store = await _bucket(js)
    data = to_snapshot(state, compact=True)
    await store.put(SNAPSHOT_NAME, data)
    return len(data)
