"""A node agent writes its own inventory into the log: the fold drops an impossible one whole
(ledger/inventory.py), the same in every fold, and a hostile agent over its real NATS user
cannot make the services fold numbers no machine has, nor take another node's device."""

from __future__ import annotations

import asyncio
import time

import msgspec
import nats
import pytest

from ledger.digest import digest
from ledger.evolve import fold
from ledger.follower import Follower
from ledger.snapshot import from_snapshot, to_snapshot
from ledger.state import State
from schemas import events as ev
from schemas import subjects
from schemas.types import DeviceInfo
from shared import nats_auth
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, request, running
from tests.trust_edge.conftest import auth_server  # noqa: F401 (the fixture)

HUGE = 10**30


def card(uuid: str, index: int = 0, **fields) -> DeviceInfo:
    return DeviceInfo(uuid=uuid, index=index, **{"model": "H100", "memory_mib": 81559, **fields})


def node(name: str, *devices: DeviceInfo, **fields) -> ev.NodeRegistered:
    base = {"cpu_milli": 64000, "memory_mib": 1 << 20}
    return ev.NodeRegistered(node=name, devices=list(devices) or [card(f"GPU-{name}-0")], **{**base, **fields})


BAD = {
    "cpu_milli": node("x", cpu_milli=HUGE),
    "negative cpu_milli": node("x", cpu_milli=-1),
    "memory_mib": node("x", memory_mib=HUGE),
    "a card's memory_mib": node("x", card("GPU-x-0", memory_mib=HUGE)),
    "a card's negative memory": node("x", card("GPU-x-0", memory_mib=-5)),
    "index": node("x", card("GPU-x-0", index=HUGE)),
    "island": node("x", card("GPU-x-0", island=-3)),
    "bandwidth_gbps": node("x", card("GPU-x-0", bandwidth_gbps=1e308)),
    "too many devices": node("x", *[card(f"GPU-x-{i}", i % 8) for i in range(1025)]),
    "a uuid twice": node("x", card("GPU-x-0", 0), card("GPU-x-0", 1)),
    "a long model name": node("x", card("GPU-x-0", model="H" * 257)),
    "a long uuid": node("x", card("GPU-" + "x" * 300)),
    "too many labels": node("x", labels={f"k{i}": "v" for i in range(1025)}),
    "a long label value": node("x", labels={"zone": "z" * 257}),
    "a long driver version": node("x", driver_version="5" * 257),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_an_impossible_inventory_is_dropped_whole_and_counted(case):
    state = fold([(1, node("x"))])  # the inventory it had stays
    before = digest(state)
    fold([(2, BAD[case])], state)
    assert digest(state) == before
    assert state.nodes["x"].cpu_free == 64000 and list(state.units) == ["GPU-x-0"]
    assert state.refused_inventories == 1
    unknown = fold([(1, BAD[case])])  # a node first seen that way stays unknown
    assert unknown.nodes == {} and unknown.units == {} and unknown.refused_inventories == 1


def test_the_bounds_keep_real_nodes_and_name_the_field(caplog):
    real = node("x", *[card(f"GPU-x-{i}", i, island=i // 4, bandwidth_gbps=1800.0) for i in range(8)],
                cpu_milli=1 << 30, memory_mib=1 << 40)
    assert fold([(1, real), (2, h100_node("y"))]).refused_inventories == 0
    with caplog.at_level("WARNING", logger="gpuledger"):
        fold([(9, BAD["cpu_milli"])])
    assert "node x at seq=9: cpu_milli 1000000000000000000000000000000 is outside 0..1073741824" in caplog.text


def test_a_device_of_another_node_is_not_taken():
    """Before: `state.units` pointed at the thief's unit, so the owner's claims were never freed
    there and nothing could be placed on it again."""
    state = fold([(1, node("a", card("GPU-a-0"))), (2, node("b", card("GPU-b-0")))])
    fold([(3, node("b", card("GPU-b-0"), card("GPU-a-0", 1)))], state)
    assert state.units["GPU-a-0"].node == "a" and len(state.nodes["b"].units) == 1
    assert state.refused_inventories == 1
    # once its node re-registers without it, a moved card registers on its new node
    fold([(4, node("a", card("GPU-a-1"))), (5, node("b", card("GPU-b-0"), card("GPU-a-0", 1)))], state)
    assert state.units["GPU-a-0"].node == "b" and state.refused_inventories == 1


def test_a_replay_from_a_snapshot_agrees():
    events = [(1, node("a")), (2, node("b", cpu_milli=HUGE)), (3, node("c", card("GPU-a-0")))]
    whole = fold(events + [(4, node("b"))])
    restored = from_snapshot(to_snapshot(fold(events)))
    assert digest(fold([(4, node("b"))], restored)) == digest(whole)
    assert "b" in whole.nodes and "c" not in whole.nodes


def raw_inventory(name: str, **fields) -> bytes:
    return msgspec.json.encode({"type": "NodeRegistered", "node": name, "at": time.time(), "cpu_milli": 64000,
                                "devices": [{"uuid": f"GPU-{name}-0", "index": 0, "model": "H100",
                                             "memory_mib": 81559}], **fields})


async def test_a_hostile_agent_over_its_own_user_changes_no_fold(auth_server):
    """node-gpu-1 may write gpu.evt.node.gpu-1: an inventory of 10^30 and one naming gpu-2's card
    are stored, and every fold (the services, a fresh replay) leaves them out."""
    ops = await nats.connect(auth_server.url(nats_auth.OPS))
    honest = await nats.connect(auth_server.url("node-gpu-2"), inbox_prefix=nats_auth.user_inbox("node-gpu-2"))
    hostile = await nats.connect(auth_server.url("node-gpu-1"), inbox_prefix=nats_auth.user_inbox("node-gpu-1"))
    try:
        await honest.jetstream().publish(subjects.node("gpu-2"), raw_inventory("gpu-2"))
        async with running(auth_server.url, "claim", "allocator", "quota") as contexts:
            js = hostile.jetstream()
            for payload in (raw_inventory("gpu-1", cpu_milli=HUGE, memory_mib=HUGE),
                            raw_inventory("gpu-1", devices=[{"uuid": "GPU-gpu-2-0", "index": 0, "model": "H100",
                                                             "memory_mib": 81559}])):
                ack = await js.publish(subjects.node("gpu-1"), payload)  # its user may: stored
                assert ack.seq
            reply = await request(ops, subjects.command("claim.submit"), {
                "claim": {"claim_id": "c1", "namespace": "team-a", "gpus": 1}, "wait_seconds": 10}, timeout=30)
            assert reply["ok"] and reply["data"]["status"] == "allocated", reply
            assert reply["data"]["node"] == "gpu-2" and reply["data"]["vram_mib"] == 81559
            allocator = next(c for c in contexts if c.name == "allocator")
            assert allocator.metrics.registry.get_sample_value("gpuledger_events_refused_total") == 2
            status = await request(ops, subjects.query("quota.status"), {})
            used = {q["namespace"]: q["used"] for q in status["data"]["quotas"]}
            assert used["team-a"]["requests_vram_mib"] == 81559
        replay = Follower(JetStreamEventLog(ops), places=False)
        end = await JetStreamEventLog(ops).last_seq()
        task = asyncio.create_task(replay.run(until=end))
        assert await replay.wait_for_seq(end, timeout=10)
        task.cancel()
        state = replay.state
        assert set(state.nodes) == {"gpu-2"} and state.units["GPU-gpu-2-0"].node == "gpu-2"
        assert state.refused_inventories == 2 and state.claims["c1"].node == "gpu-2"
    finally:
        for nc in (ops, honest, hostile):
            await nc.close()
