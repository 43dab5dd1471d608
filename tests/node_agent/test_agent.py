"""The agent against a real nats-server: registers, heartbeats, binds what the allocator decided
for its node (once, also across restarts), reports faults, recoveries and processes."""

import asyncio
import json

import nats
import pytest

from schemas import subjects
from schemas.events import (
    ClaimAllocated, ClaimBound, DecisionBatch, DeviceHealthChanged, NodeConditionChanged,
    NodeHeartbeat, NodeRegistered, UsageObserved)
from schemas.types import Grant
from services.node_agent.agent import durable_name, subject_events
from services.node_agent.app import build_simulated
from services.node_agent.simulation import FAULT_SUBJECT, PROCESS_SUBJECT
from shared.jetstream import JetStreamEventLog
from shared.service import start_service, stop_service
from shared.settings import Settings

FLEET = "1xH100x8:islands=2,1xA100x2:mig"
H100, A100 = "sim-h100-0", "sim-a100-0"
FAST = dict(watch_s=0.1, rescan_s=3600.0, fetch_timeout_s=0.2)


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


async def events_on(log, subject, kind=None):
    return [e async for e in subject_events(log.js, subject) if kind is None or isinstance(e, kind)]


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


async def allocate(log, node, claim_id, devices):
    decision = ClaimAllocated(claim_id=claim_id, namespace="team-a", node=node,
                              grants=[Grant(node=node, uuid=d.uuid, index=d.index, mig_index=d.mig_index)
                                      for d in devices])
    other = ClaimAllocated(claim_id=f"{claim_id}-elsewhere", namespace="team-a", node="some-other-node")
    await log.append(subjects.DECISIONS, DecisionBatch(decisions=[other, decision]))


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


async def test_an_allocation_on_its_node_is_bound_with_cuda_visible_devices(client, fleet):
    _, log = client
    cards = (await registered(log, H100)).devices
    await allocate(log, H100, "claim-cards", [cards[5], cards[4]])
    (bound,) = await wait_for(log, subjects.claim("claim-cards"), ClaimBound)
    assert bound.node == H100
    assert bound.env["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert bound.env["NVIDIA_VISIBLE_DEVICES"] == f"{cards[4].uuid},{cards[5].uuid}"
    assert bound.env["GPULEDGER_CLAIM_ID"] == "claim-cards"
    assert await events_on(log, subjects.claim("claim-cards-elsewhere")) == []


async def test_binding_goes_on_after_pulls_that_found_nothing(client, fleet):
    _, log = client
    cards = (await registered(log, H100)).devices
    await allocate(log, H100, "first", [cards[0]])
    await wait_for(log, subjects.claim("first"), ClaimBound)
    await asyncio.sleep(1.0)  # several empty pulls of 0.2 s (once, an empty pull ended the loop)
    await allocate(log, H100, "second", [cards[1]])
    assert await wait_for(log, subjects.claim("second"), ClaimBound)


async def test_a_mig_allocation_is_bound_by_mig_uuid_and_its_workload_shows_in_usage(client, fleet):
    _, log = client
    instance = [d for d in (await registered(log, A100)).devices if d.mig_index >= 0][3]
    await allocate(log, A100, "claim-mig", [instance])
    (bound,) = await wait_for(log, subjects.claim("claim-mig"), ClaimBound)
    assert bound.env["CUDA_VISIBLE_DEVICES"] == instance.uuid
    busy = await wait_for(log, subjects.node(A100), UsageObserved,
                          lambda e: any(u.uuid == instance.uuid and u.pids for u in e.devices))
    assert busy, "the simulated workload of a bound claim runs a process on its device"


async def test_a_restart_binds_what_was_allocated_while_down_and_nothing_twice(fresh_nats, client):
    nc, log = client
    ctx = await start_fleet(fresh_nats.url)
    cards = (await registered(log, H100)).devices
    await allocate(log, H100, "before", [cards[0]])
    await wait_for(log, subjects.claim("before"), ClaimBound)
    await stop_service(ctx)

    await allocate(log, H100, "while-down", [cards[1]])
    ctx = await start_fleet(fresh_nats.url)
    try:
        (late,) = await wait_for(log, subjects.claim("while-down"), ClaimBound)
        assert late.env["CUDA_VISIBLE_DEVICES"] == "1"
        await allocate(log, H100, "after", [cards[2]])
        await wait_for(log, subjects.claim("after"), ClaimBound)
    finally:
        await stop_service(ctx)
    for claim in ("before", "while-down", "after"):
        assert len(await events_on(log, subjects.claim(claim), ClaimBound)) == 1, claim


async def test_a_lost_consumer_position_does_not_bind_an_old_claim_again(fresh_nats, client):
    """Past the dedup window a repeated msg id is stored again; the claim's own subject is the check."""
    nc, log = client
    ctx = await start_fleet(fresh_nats.url)
    cards = (await registered(log, H100)).devices
    await stop_service(ctx)
    await log.append(subjects.claim("long-ago"), ClaimBound(claim_id="long-ago", node=H100, env={}))
    await allocate(log, H100, "long-ago", [cards[3]])
    await nc.jetstream().delete_consumer(subjects.STREAM, durable_name(H100))

    ctx = await start_fleet(fresh_nats.url)
    try:
        await allocate(log, H100, "marker", [cards[4]])
        await wait_for(log, subjects.claim("marker"), ClaimBound)  # it has read past "long-ago"
    finally:
        await stop_service(ctx)
    assert len(await events_on(log, subjects.claim("long-ago"), ClaimBound)) == 1


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
