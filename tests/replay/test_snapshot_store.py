"""A snapshot of several object-store chunks comes back whole through the fast chunk read."""

from __future__ import annotations

from bench.workload import fleet
from ledger.digest import digest
from ledger.evolve import fold
from services.allocator.snapshots import load_snapshot, save_snapshot
from shared.jetstream import connect


async def test_a_multi_chunk_snapshot_loads_back_equal(fresh_nats):
    state = fold((seq, event) for seq, event in enumerate(fleet(400), start=1))
    nc = await connect(fresh_nats.url)
    try:
        js = nc.jetstream()
        size = await save_snapshot(js, state)
        assert size > 3 * 128 * 1024  # several chunks
        await save_snapshot(js, state)  # a second version replaces the first
        restored = await load_snapshot(js)
        assert restored is not None and digest(restored) == digest(state)
    finally:
        await nc.close()
