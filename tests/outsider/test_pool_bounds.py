"""A pool's numbers, lists and strings are bounded. Found by the session-25 outsider: `gpuledger
pool create` (and `gpu.cmd.pool.create`) stored `maxDevicesPerNode: 10**23` (past what the
allocator's msgpack snapshot can write), a 100,000-character inventory id and 20,000 access
namespaces as they came."""

from __future__ import annotations

import nats
import pytest

from schemas import subjects
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import request, running


@pytest.mark.parametrize("fields, field, words", [
    ({"max_devices_per_node": 10**23}, "pool.max_devices_per_node", "<= 1024"),
    ({"include": {"inventory_ids": ["x" * 100_000]}}, "pool.include.inventory_ids[0]", "length <= 512"),
    ({"access_namespaces": [f"n{i}" for i in range(20_000)]}, "pool.access_namespaces", "length <= 1024"),
    ({"node_selector": {f"k{i}": "v" for i in range(100)}}, "pool.node_selector", "length <= 64"),
])
async def test_a_pool_past_its_bounds_is_refused_naming_the_field(fresh_nats, fields, field, words):
    async with running(fresh_nats.url, "pool-controller"):
        nc = await nats.connect(fresh_nats.url)
        reply = await request(nc, subjects.command("pool.create"), {"pool": {"name": "p1", **fields}})
        assert reply["ok"] is False and reply["error"]["code"] == "invalid", reply
        assert reply["error"]["field"] == field and words in reply["error"]["message"], reply
        assert [s async for s in JetStreamEventLog(nc).read()] == []
        await nc.close()
