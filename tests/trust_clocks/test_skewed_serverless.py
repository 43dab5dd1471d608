"""The claim service's serverless verdicts compare times of its own clock (session 33,
services/claim/heard.py): an endpoint's idle worker, a stale model slot and a slot request whose
client died are judged by when this service heard the worker's allocation or the slot's requests,
never by the allocator's or another replica's time in the log. Before, an allocator an hour ahead
kept every worker from being idle for an hour, one an hour behind had a worker that waited for
its GPU released the moment it got it; a replica an hour behind had its requests timed out at once
and its slots taken for stale, one an hour ahead kept them an hour. Real nats-server; the claim
service in this process on a clock the test moves; the other writers' events appended with their
clocks' times, as they would write them."""

from __future__ import annotations

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.commands import CreateEndpoint, ReportEndpointLoad
from schemas.types import DeviceInfo, EndpointSpec, Grant
from services.claim.endpoints import register_endpoints
from shared import rpc
from shared.jetstream import JetStreamEventLog
from shared.service import start_service, stop_service
from shared.settings import Settings
from tests.serverless.test_slot_service import ask, models_file  # noqa: F401  (fixture)
from tests.service.helpers import h100_node, register_nodes, running

HOUR = 3600.0
IDLE_S = 30.0
SKEWS = pytest.mark.parametrize("skew_s", [-HOUR, +HOUR], ids=["an-hour-behind", "an-hour-ahead"])


class Clock:
    def __init__(self, now: float = 100_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def endpoints(fresh_nats):
    """The endpoint handlers, no scaling loop: the test drives `scale_all` and the clock."""
    async def builder(ctx):
        await register_endpoints(ctx)

    ctx = await start_service("claim", Settings(nats_url=fresh_nats.url, endpoint_tick_s=0), builder)
    ctx.endpoints.clock = Clock()
    yield ctx
    await stop_service(ctx)


async def _load(ctx, queued: int) -> None:
    reply = await rpc.call(ctx.nc, subjects.command("endpoint.load"), ReportEndpointLoad(name="chat", queued=queued))
    assert reply.ok, reply


async def _allocated_by(ctx, claim_id: str, allocator_at: float) -> None:
    """The allocator's decision for the worker, stamped with its clock."""
    node = "node-1"
    await ctx.log.append(subjects.node(node), ev.NodeRegistered(
        node=node, devices=[DeviceInfo(uuid="GPU-1", index=0, model="A40", memory_mib=49152)], at=allocator_at))
    await ctx.log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[ev.ClaimAllocated(
        claim_id=claim_id, namespace="team-a", node=node, at=allocator_at,
        grants=[Grant(node=node, uuid="GPU-1", index=0)])], at=allocator_at))


@SKEWS
async def test_a_worker_is_idle_by_when_this_service_heard_its_allocation(endpoints, skew_s):
    ctx, clock = endpoints, endpoints.endpoints.clock
    scaler = ctx.endpoints
    spec = EndpointSpec(name="chat", namespace="team-a", workers_max=2, idle_timeout_s=IDLE_S)
    assert (await rpc.call(ctx.nc, subjects.command("endpoint.create"), CreateEndpoint(endpoint=spec))).ok
    await _load(ctx, queued=1)
    [step] = await scaler.scale_all()  # cold start: chat-w1
    assert step.add == 1
    clock.now += 100  # it waited 100 s for a GPU (more than the idle timeout)
    assert await scaler.scale_all() == []
    await _allocated_by(ctx, "chat-w1", clock.now + skew_s)
    await _load(ctx, queued=0)
    clock.now += 1
    assert await scaler.scale_all() == []  # allocated a second ago: not idle
    clock.now += IDLE_S
    [step] = await scaler.scale_all()  # idle for the timeout since this service heard it
    assert step.release == ("chat-w1",)


@pytest.fixture
async def slots(fresh_nats, models_file):  # noqa: F811
    async with running(fresh_nats.url, "claim", "allocator", endpoint_tick_s=0, slot_tick_s=0,
                       slot_stale_s=60.0, slot_request_timeout_s=120.0, models_file=str(models_file)) as contexts:
        nc = await nats.connect(fresh_nats.url)
        await register_nodes(JetStreamEventLog(nc), h100_node("node-a"))
        contexts[0].slots.clock = Clock()
        yield nc, contexts[0].slots
        await nc.close()


async def _started_by_a_replica(slots, slot_id: str, request_id: str, replica_at: float) -> None:
    """Another claim-service replica took a request on the slot, stamped with its clock."""
    log = slots.claims.log
    stored = await log.append(subjects.slot(slot_id), ev.SlotRequestStarted(
        slot_id=slot_id, request_id=request_id, at=replica_at))
    await slots.claims.follower.wait_for_seq(stored.seq)


@SKEWS
async def test_a_request_another_replica_took_times_out_by_this_services_clock(slots, skew_s):
    nc, service = slots
    clock = service.clock
    first = await ask(nc, "acquire", model="chat-8b")
    await ask(nc, "finish", slot_id=first["slot_id"], request_id=first["request_id"])
    await _started_by_a_replica(service, first["slot_id"], "theirs", clock.now + skew_s)
    clock.now += 1
    assert await service.reap(3600.0) == []
    assert [e for e in await _slot_events(nc) if isinstance(e, ev.SlotRequestFinished) and e.reason == "timeout"] == []
    clock.now += 120  # running for the timeout since this service heard it start
    await service.reap(3600.0)
    timed_out = [e.request_id for e in await _slot_events(nc) if isinstance(e, ev.SlotRequestFinished) and e.reason == "timeout"]
    assert timed_out == ["theirs"]


@SKEWS
async def test_a_slot_is_stale_by_when_this_service_heard_its_last_request(slots, skew_s):
    nc, service = slots
    clock = service.clock
    first = await ask(nc, "acquire", model="chat-8b")
    await ask(nc, "finish", slot_id=first["slot_id"], request_id=first["request_id"])
    clock.now += 50
    await _started_by_a_replica(service, first["slot_id"], "theirs", clock.now + skew_s)
    stored = await service.claims.log.append(subjects.slot(first["slot_id"]), ev.SlotRequestFinished(
        slot_id=first["slot_id"], request_id="theirs", at=clock.now + skew_s + 1))
    await service.claims.follower.wait_for_seq(stored.seq)
    clock.now += 30  # 80 s after this service's own last request, 30 s after the replica's
    assert await service.reap(60.0) == []
    clock.now += 31
    assert await service.reap(60.0) == [first["slot_id"]]


async def _slot_events(nc) -> list:
    return [s.event async for s in JetStreamEventLog(nc).read(subject="gpu.evt.slot.>")]
