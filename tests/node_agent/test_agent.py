"""The agent against a real nats-server: registers, heartbeats, reports faults, recoveries and
processes; binds only what the allocator's fold says is live on its node (its node's record of
live claims), with the real claim service and allocator deciding."""

import asyncio
import json

import nats
import pytest

from schemas import subjects
from schemas.events import (
    ClaimAllocated, ClaimBound, DecisionBatch, DeviceHealthChanged, NodeConditionChanged,
    NodeHeartbeat, NodeRegistered, UsageObserved, flatten)
from schemas.types import Grant
from services.node_agent.app import build_simulated
from services.node_agent.simulation import FAULT_SUBJECT, PROCESS_SUBJECT
from shared.jetstream import JetStreamEventLog
from shared.service import start_service, stop_service
from shared.settings import Settings
from tests.service.helpers import request, running

FLEET = "1xH100x8:islands=2,1xA100x2:mig"
H100, A100 = "sim-h100-0", "sim-a100-0"
FAST = dict(watch_s=0.1, rescan_s=3600.0)


async def start_fleet(url: str):
    settings = Settings(nats_url=url, heartbeat_s=0.1)
    return await start_service("node-agent-test", settings, build_simulated(FLEET, settings, **FAST))


@pytest.fixture
async def client(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    yield nc, JetStreamEventLog(nc)
    await nc.close()


@pytest.fixture
async def fleet(fresh_nats, client):
    ctx = await start_fleet(fresh_nats.url)
    yield ctx
    await stop_service(ctx)


@pytest.fixture
async def deciding(fresh_nats, fleet):
    """The claim service and the allocator beside the fleet, in this process."""
    async with running(fresh_nats.url, "claim", "allocator") as contexts:
        yield contexts


async def events_on(log, subject, kind=None):
    found = []
    async for stored in log.read(subject=subject):
        found += [e for e in flatten(stored.event) if kind is None or isinstance(e, kind)]
    return found


async def wait_for(log, subject, kind, predicate=lambda e: True, count=1, timeout=20.0):
    """Poll the log until `count` matching events are there (a bound, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = [e for e in await events_on(log, subject, kind) if predicate(e)]
        if len(found) >= count or loop.time() > deadline:
            return found
        await asyncio.sleep(0.05)


async def registered(log, node) -> NodeRegistered:
    (event,) = (await wait_for(log, subjects.node(node), NodeRegistered))[:1]
    return event


async def all_bindings(log) -> list[ClaimBound]:
    """Every ClaimBound in the log, on whatever subject."""
    return [e async for stored in log.read() for e in flatten(stored.event) if isinstance(e, ClaimBound)]


async def bindings(log, node, claim_id, timeout=20.0):
    """The bindings of a claim by its node's agent, once there is one (wherever it is stored)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = [b for b in await all_bindings(log) if b.claim_id == claim_id and b.node == node]
        if found or loop.time() > deadline:
            return found
        await asyncio.sleep(0.05)


async def submit(nc, claim_id, wait=20.0, **spec):
    claim = {"claim_id": claim_id, "namespace": "team-a", **spec}
    reply = await request(nc, subjects.command("claim.submit"), {"claim": claim, "wait_seconds": wait},
                          timeout=wait + 5)
    assert reply["ok"], reply
    return reply["data"]


async def release(nc, claim_id):
    reply = await request(nc, subjects.command("claim.release"), {"claim_id": claim_id})
    assert reply["ok"], reply


async def test_the_fleet_registers_every_node_and_heartbeats(client, fleet):
    _, log = client
    h100 = await registered(log, H100)
    assert h100.simulated and len(h100.devices) == 8 and h100.cuda_version == "12.8"
    assert [d.island for d in h100.devices] == [0] * 4 + [1] * 4
    a100 = await registered(log, A100)
    assert sum(d.mig_index >= 0 for d in a100.devices) == 7 + 2
    beats = await wait_for(log, subjects.node(H100), NodeHeartbeat, count=3)
    assert len(beats) >= 3
    (ready,) = await wait_for(log, subjects.node(H100), NodeConditionChanged)
    assert ready.condition == "Ready"


async def test_an_allocated_claim_is_bound_on_its_node_with_cuda_visible_devices(client, deciding):
    nc, log = client
    placed = await submit(nc, "claim-cards", gpus=2, models=["H100"])
    (bound,) = await bindings(log, H100, "claim-cards")
    indices = sorted(d["index"] for d in placed["devices"])
    assert bound.node == H100 and bound.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, indices))
    assert bound.env["GPULEDGER_CLAIM_ID"] == "claim-cards"
    got = await request(nc, subjects.query("claim.get"), {"claim_id": "claim-cards"})
    assert got["data"]["status"] == "bound"


async def test_a_mig_allocation_is_bound_by_mig_uuid_and_its_workload_shows_in_usage(client, deciding):
    nc, log = client
    placed = await submit(nc, "claim-mig", mig_profile="3g.40gb")
    (bound,) = await bindings(log, A100, "claim-mig")
    (uuid,) = [d["uuid"] for d in placed["devices"]]
    assert bound.env["CUDA_VISIBLE_DEVICES"] == uuid
    busy = await wait_for(log, subjects.node(A100), UsageObserved,
                          lambda e: any(u.uuid == uuid and u.pids for u in e.devices))
    assert busy, "the simulated workload of a bound claim runs a process on its device"


async def test_a_released_claim_has_its_workload_stopped(client, deciding):
    nc, log = client
    placed = await submit(nc, "short", gpus=1, models=["H100"])
    await bindings(log, H100, "short")
    (uuid,) = [d["uuid"] for d in placed["devices"]]
    await wait_for(log, subjects.node(H100), UsageObserved, lambda e: any(u.uuid == uuid and u.pids for u in e.devices))
    await release(nc, "short")
    idle = await wait_for(log, subjects.node(H100), UsageObserved,
                          lambda e: any(u.uuid == uuid and not u.pids for u in e.devices))
    assert idle, "the workload of a released claim is stopped"


async def test_an_allocation_the_fold_voids_is_never_bound(client, deciding):
    """A grant written for a claim that does not exist (or whose devices are held) takes no
    effect in the fold, so it is in no node's record: the agent never binds it."""
    nc, log = client
    cards = (await registered(log, H100)).devices
    grants = [Grant(node=H100, uuid=cards[0].uuid, index=0)]
    await log.append(subjects.DECISIONS, DecisionBatch(decisions=[
        ClaimAllocated(claim_id="never-submitted", namespace="team-a", node=H100, grants=grants)]))
    await submit(nc, "marker", gpus=8, models=["H100"])  # the whole node: after the forged grant
    await bindings(log, H100, "marker")
    assert [b.claim_id for b in await all_bindings(log)] == ["marker"]


async def test_a_reused_message_id_cannot_shadow_a_binding(client, deciding):
    """Bindings carry no message id: whatever ids others publish with, the binding is stored."""
    nc, log = client
    for forged in ("bound-victim", "bound:victim", "bind-victim"):
        await log.append(subjects.claim("forger"), ClaimBound(claim_id="victim", node="forged", env={}),
                         msg_id=forged)
    await submit(nc, "victim", gpus=1, models=["H100"])
    (bound,) = await bindings(log, H100, "victim")
    assert bound.env["GPULEDGER_CLAIM_ID"] == "victim"


async def test_a_restart_binds_what_was_allocated_while_down_and_nothing_twice(fresh_nats, client):
    nc, log = client
    async with running(fresh_nats.url, "claim", "allocator"):
        ctx = await start_fleet(fresh_nats.url)
        await submit(nc, "before", gpus=1, models=["H100"])
        await bindings(log, H100, "before")
        await stop_service(ctx)

        await submit(nc, "while-down", gpus=1, models=["H100"])
        await submit(nc, "gone-while-down", gpus=1, models=["H100"])
        await release(nc, "gone-while-down")
        ctx = await start_fleet(fresh_nats.url)
        try:
            await bindings(log, H100, "while-down")
            await submit(nc, "after", gpus=1, models=["H100"])
            await bindings(log, H100, "after")
        finally:
            await stop_service(ctx)
    bound = [b.claim_id for b in await all_bindings(log)]
    assert sorted(bound) == ["after", "before", "while-down"], "each live claim bound once, the ended one never"


async def test_the_agents_ride_out_a_nats_server_outage(tmp_path):
    """Down longer than a publish waits for its ack (5 s): heartbeats fail, are retried, and go
    on when the server is back; no loop of the agent dies."""
    from shared.natsserver import start_nats_server

    server = start_nats_server(tmp_path / "nats")
    ctx = await start_fleet(server.url)
    try:
        nc = await nats.connect(server.url)
        log = JetStreamEventLog(nc)
        await wait_for(log, subjects.node(H100), NodeHeartbeat, count=2)
        await nc.close()
        server.stop()
        await asyncio.sleep(7.0)  # the outage: every heartbeat meanwhile times out
        server = start_nats_server(tmp_path / "nats", port=server.port)
        nc = await nats.connect(server.url)
        log = JetStreamEventLog(nc)
        before = len(await events_on(log, subjects.node(H100), NodeHeartbeat))
        after = await wait_for(log, subjects.node(H100), NodeHeartbeat, count=before + 3, timeout=30.0)
        await nc.close()
        assert len(after) >= before + 3, "heartbeats go on after the outage"
        assert not [t.get_name() for t in ctx.tasks if t.done()], "a loop of the agent died"
    finally:
        await stop_service(ctx)
        server.stop()


async def ask(nc, subject, body):
    reply = await nc.request(subject, json.dumps(body).encode(), timeout=5)
    return json.loads(reply.data)


async def test_a_simulated_fault_and_its_recovery_are_reported(client, fleet):
    nc, log = client
    cards = (await registered(log, H100)).devices
    answer = await ask(nc, FAULT_SUBJECT, {"node": H100, "index": 3, "health": "Faulted"})
    assert answer == {"ok": True, "node": H100, "uuid": cards[3].uuid, "health": "Faulted"}
    (faulted,) = await wait_for(log, subjects.node(H100), DeviceHealthChanged)
    assert (faulted.uuid, faulted.health) == (cards[3].uuid, "Faulted") and "ECC" in faulted.reason
    await wait_for(log, subjects.node(H100), NodeConditionChanged, lambda e: e.condition == "HasFaulted")

    await ask(nc, FAULT_SUBJECT, {"node": H100, "index": 3, "health": "Healthy"})
    changes = await wait_for(log, subjects.node(H100), DeviceHealthChanged, count=2)
    assert [(c.uuid, c.health) for c in changes] == [(cards[3].uuid, "Faulted"), (cards[3].uuid, "Healthy")]
    conditions = await wait_for(log, subjects.node(H100), NodeConditionChanged, count=3)
    assert [c.condition for c in conditions] == ["Ready", "HasFaulted", "Ready"]


async def test_an_xid_on_a_mig_card_faults_every_instance_on_it(client, fleet):
    nc, log = client
    devices = (await registered(log, A100)).devices
    await ask(nc, FAULT_SUBJECT, {"node": A100, "index": 1, "kind": "xid", "xid": 79})
    on_card = {d.uuid for d in devices if d.index == 1}
    changes = await wait_for(log, subjects.node(A100), DeviceHealthChanged, count=len(on_card))
    assert {c.uuid for c in changes} == on_card and {c.health for c in changes} == {"Faulted"}
    assert all("XID 79" in c.reason for c in changes)


async def test_a_fake_process_appears_in_usage(client, fleet):
    nc, log = client
    cards = (await registered(log, H100)).devices
    answer = await ask(nc, PROCESS_SUBJECT, {"node": H100, "index": 6, "pid": 4242, "used_mib": 2048,
                                             "utilization_percent": 70})
    assert answer["ok"] and answer["uuid"] == cards[6].uuid
    (seen,) = (await wait_for(log, subjects.node(H100), UsageObserved,
                              lambda e: any(4242 in u.pids for u in e.devices)))[:1]
    usage = next(u for u in seen.devices if u.uuid == cards[6].uuid)
    assert (usage.pids, usage.memory_used_mib, usage.utilization_percent) == ([4242], 2048, 70)


@pytest.mark.parametrize("subject, body, field", [
    (FAULT_SUBJECT, {"node": "nope", "index": 0}, "node"),
    (FAULT_SUBJECT, {"node": H100, "index": 99}, "index"),
    (FAULT_SUBJECT, {"node": H100, "index": 0, "health": "Ignored"}, "health"),
    (FAULT_SUBJECT, {"node": H100, "index": 0, "kind": "fire"}, "kind"),
    (FAULT_SUBJECT, {"node": H100}, "index"),
    (PROCESS_SUBJECT, {"node": A100, "index": 0, "pid": 1}, "mig_index"),
    (PROCESS_SUBJECT, {"node": H100, "index": 0, "pid": 1, "utilization_percent": 150}, "utilization_percent"),
])
async def test_a_bad_simulation_command_gets_an_error_naming_the_field(client, fleet, subject, body, field):
    nc, log = client
    await registered(log, H100)
    answer = await ask(nc, subject, body)
    assert answer["ok"] is False and field in answer["error"]
