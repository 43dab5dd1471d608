"""Stop and restart everything (nats-server included): claims keep their GPUs, none is granted twice."""

from __future__ import annotations


import nats
import pytest

from schemas import subjects
from services.allocator.snapshots import save_snapshot
from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.natsserver import start_nats_server
from tests.service.helpers import h100_node, register_nodes, request, running


async def submit(nc, claim_id: str, gpus: int, wait: float = 10.0) -> dict:
    reply = await request(nc, subjects.command("claim.submit"),
                          {"claim": {"claim_id": claim_id, "namespace": "a", "gpus": gpus}, "wait_seconds": wait})
    assert reply["ok"], reply
    return reply["data"]


@pytest.mark.parametrize("with_snapshot", [False, True])
async def test_claims_hold_the_same_gpus_after_a_full_restart(tmp_path, with_snapshot):
    store = tmp_path / "nats"
    server = start_nats_server(store)
    port = server.port
    try:
        nc = await nats.connect(server.url)
        await ensure_streams(nc.jetstream())
        await register_nodes(JetStreamEventLog(nc), h100_node("n0"), h100_node("n1"))
        async with running(server.url, "claim", "allocator") as contexts:
            before = {cid: await submit(nc, cid, g) for cid, g in (("a", 4), ("b", 8), ("c", 2))}
            if with_snapshot:
                allocator = contexts[1].allocator
                await save_snapshot(nc.jetstream(), allocator.state)
        await nc.close()
        server.stop()

        server = start_nats_server(store, port=port)
        nc = await nats.connect(server.url)
        async with running(server.url, "claim", "allocator") as contexts:
            for cid, data in before.items():
                got = (await request(nc, subjects.query("claim.get"), {"claim_id": cid}))["data"]
                assert got["status"] == "allocated" and got["devices"] == data["devices"]
            held = {d["uuid"] for data in before.values() for d in data["devices"]}
            late = await submit(nc, "d", 2)
            assert late["status"] == "allocated"
            assert not held & {d["uuid"] for d in late["devices"]}
            too_many = await submit(nc, "e", 8, wait=1.0)
            assert too_many["status"] == "pending"
            status = (await request(nc, subjects.query("allocator.status"), {}))["data"]
            if with_snapshot:
                assert status["last_seq"] >= 1
        await nc.close()
    finally:
        server.stop()
