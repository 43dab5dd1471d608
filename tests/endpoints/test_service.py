"""Endpoint handlers and the scaling loop against a real nats-server (register_endpoints alone)."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.commands import CreateEndpoint, DeleteEndpoint, GetClaim, GetEndpoint, ListEndpoints, ReportEndpointLoad
from schemas.types import DeviceInfo, EndpointSpec, Grant
from ledger.follower import StateFollower
from services.claim.endpoints import Endpoints, register_endpoints
from shared import rpc
from shared.jetstream import JetStreamEventLog, connect, ensure_streams
from shared.service import start_service, stop_service
from shared.settings import Settings
from tests.cli import run_cli


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


async def _start(url: str, tick: float):
    async def builder(ctx):
        await register_endpoints(ctx)

    return await start_service("claim", Settings(nats_url=url, endpoint_tick_s=tick), builder)


@pytest.fixture
async def service(fresh_nats):
    """The endpoint handlers with no scaling loop: the test drives `scale_all` and the clock."""
    ctx = await _start(fresh_nats.url, tick=0)
    ctx.clock = ctx.endpoints.clock = Clock()
    yield ctx
    await stop_service(ctx)


def endpoint(**fields) -> EndpointSpec:
    return EndpointSpec(**({"name": "chat", "namespace": "team-a", "workers_max": 3,
                            "idle_timeout_s": 30.0} | fields))


async def call(ctx, subject, command):
    return await rpc.call(ctx.nc, subject, command)


async def events_on(ctx, subject) -> list:
    return [s.event async for s in ctx.log.read(subject=subject)]


async def allocate(ctx, claim_id: str, at: float) -> None:
    """What the allocator would do: a node and a grant for the worker's claim."""
    node = f"node-{claim_id}"
    await ctx.log.append(subjects.node(node), ev.NodeRegistered(
        node=node, devices=[DeviceInfo(uuid=f"GPU-{node}", index=0, model="A40", memory_mib=49152)]))
    await ctx.log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[ev.ClaimAllocated(
        claim_id=claim_id, namespace="team-a", node=node, at=at,
        grants=[Grant(node=node, uuid=f"GPU-{node}", index=0)])]))


async def test_an_endpoint_is_created_listed_and_bad_input_is_named(service):
    created = await call(service, subjects.command("endpoint.create"), CreateEndpoint(endpoint=endpoint()))
    assert created.ok and created.data == {"endpoint": "chat", "created": True}
    again = await call(service, subjects.command("endpoint.create"), CreateEndpoint(endpoint=endpoint()))
    assert again.data["created"] is False
    other = await call(service, subjects.command("endpoint.create"),
                       CreateEndpoint(endpoint=endpoint(workers_max=5)))
    assert other.error.code == "conflict"
    bad = await call(service, subjects.command("endpoint.create"),
                     CreateEndpoint(endpoint=endpoint(name="x", gpu_groups=["GTX_1080"])))
    assert bad.error.code == "invalid" and bad.error.field == "endpoint.gpu_groups[0]"
    raw = await service.nc.request(subjects.command("endpoint.create"),
                                   b'{"endpoint": {"name": "x", "namespace": "n", "scaler_value": 0}}', timeout=5)
    assert json.loads(raw.data)["error"]["field"] == "endpoint.scaler_value"
    listed = await call(service, subjects.query("endpoint.list"), ListEndpoints(namespace="team-a"))
    assert [e["spec"]["name"] for e in listed.data] == ["chat"]
    unknown = await call(service, subjects.command("endpoint.load"), ReportEndpointLoad(name="nope", queued=1))
    assert unknown.error.code == "not-found"
    negative = await call(service, subjects.command("endpoint.load"), ReportEndpointLoad(name="chat", queued=-1))
    assert negative.error.field == "queued"


async def test_queue_delay_scales_up_step_by_step_and_idle_workers_go(service):
    clock, scaler = service.clock, service.endpoints
    await call(service, subjects.command("endpoint.create"), CreateEndpoint(endpoint=endpoint(workers_min=1)))
    [step] = await scaler.scale_all()
    assert (step.add, step.reason) == (1, "workers_min is 1")
    claim = service.endpoints.state.claims["chat-w1"].spec
    assert (claim.endpoint, claim.namespace, claim.gpu_groups[0]) == ("chat", "team-a", "AMPERE_48")

    await call(service, subjects.command("endpoint.load"),
               ReportEndpointLoad(name="chat", queued=8, oldest_wait_s=9.0))
    assert await scaler.scale_all() == []  # chat-w1 is still starting: no second step yet
    await allocate(service, "chat-w1", at=clock.now)
    [step] = await scaler.scale_all()
    assert step.add == 1 and "queue delay 9s > 4s" in step.reason
    assert service.endpoints.state.claims["chat-w2"].status == "pending"

    await allocate(service, "chat-w2", at=clock.now)
    await call(service, subjects.command("endpoint.load"), ReportEndpointLoad(name="chat", queued=0))
    assert await scaler.scale_all() == []  # idle, but not for idle_timeout_s yet
    clock.now += 31
    [step] = await scaler.scale_all()
    assert step.release == ("chat-w1",) and step.after == 1  # workers_min keeps one
    assert service.endpoints.state.claims["chat-w1"].status == "released"

    scaled = [e for e in await events_on(service, subjects.endpoint("chat")) if isinstance(e, ev.EndpointScaled)]
    assert [(e.workers_before, e.workers_after, e.added, e.released) for e in scaled] == [
        (0, 1, ["chat-w1"], []), (1, 2, ["chat-w2"], []), (2, 1, [], ["chat-w1"])]
    got = await call(service, subjects.query("endpoint.get"), GetEndpoint(name="chat"))
    assert [w["claim_id"] for w in got.data["workers"]] == ["chat-w2"]
    assert got.data["last_scaled"]["reason"].startswith("idle")


async def test_request_count_aims_at_requests_per_worker(service):
    await call(service, subjects.command("endpoint.create"), CreateEndpoint(
        endpoint=endpoint(scaler_type="REQUEST_COUNT", scaler_value=50, workers_max=10)))
    await call(service, subjects.command("endpoint.load"), ReportEndpointLoad(name="chat", queued=3,
                                                                              requests_per_min=120))
    [step] = await service.endpoints.scale_all()
    assert step.add == 3 and "= 3" in step.reason
    assert {c for c in service.endpoints.state.claims} == {"chat-w1", "chat-w2", "chat-w3"}


async def test_deleting_an_endpoint_releases_its_workers(service):
    await call(service, subjects.command("endpoint.create"), CreateEndpoint(endpoint=endpoint(workers_min=2)))
    await service.endpoints.scale_all()
    deleted = await call(service, subjects.command("endpoint.delete"), DeleteEndpoint(name="chat"))
    assert deleted.ok and deleted.data["released"] == ["chat-w1", "chat-w2"]
    assert {c.status for c in service.endpoints.state.claims.values()} == {"released"}
    gone = await call(service, subjects.query("endpoint.get"), GetEndpoint(name="chat"))
    assert gone.error.code == "not-found"
    assert await service.endpoints.scale_all() == []


async def test_two_replicas_scaling_at_once_add_each_worker_once(fresh_nats):
    nc = await connect(fresh_nats.url)
    await ensure_streams(nc.jetstream())
    log = JetStreamEventLog(nc)
    followers = [StateFollower(log) for _ in range(2)]
    replicas = [Endpoints(log, f, clock=Clock()) for f in followers]
    runs = [asyncio.create_task(f.run()) for f in followers]
    try:
        await replicas[0].create(CreateEndpoint(endpoint=endpoint(workers_min=3)))
        for _ in range(3):
            await asyncio.gather(*(r.scale_all() for r in replicas))
        await replicas[1].catch_up()
        workers = sorted(c for c in followers[1].state.claims)
        assert workers == ["chat-w1", "chat-w2", "chat-w3"]
        scaled = [e async for e in log.read(subject=subjects.endpoint("chat"))]
        assert sum(isinstance(e.event, ev.EndpointScaled) for e in scaled) == 1
    finally:
        for task in runs:
            task.cancel()
        await nc.close()


async def test_a_step_cut_off_before_its_claims_is_completed_on_the_next_pass(service):
    await call(service, subjects.command("endpoint.create"), CreateEndpoint(endpoint=endpoint()))
    # A replica recorded the step, then stopped before submitting chat-w1's claim.
    await service.log.append(subjects.endpoint("chat"), ev.EndpointScaled(
        name="chat", workers_before=0, workers_after=1, reason="cold start", added=["chat-w1"]))
    assert await service.endpoints.scale_all() == []  # nothing new to decide...
    assert service.endpoints.state.claims["chat-w1"].spec.endpoint == "chat"  # ...but w1 now exists


async def test_the_loop_scales_on_its_own(fresh_nats):
    ctx = await _start(fresh_nats.url, tick=0.05)
    try:
        await call(ctx, subjects.command("endpoint.create"), CreateEndpoint(endpoint=endpoint(workers_min=2)))
        state = ctx.endpoints.state
        assert await ctx.endpoints.follower.wait_until(lambda: len(state.claims) == 2, timeout=20)
        assert sorted(state.claims) == ["chat-w1", "chat-w2"]
    finally:
        await stop_service(ctx)


async def _cli(url: str, *args: str) -> subprocess.CompletedProcess:
    return await run_cli(*args, "--nats-url", url)


async def test_the_cli_drives_an_endpoint(service, fresh_nats):
    url = fresh_nats.url
    created = await _cli(url, "endpoint", "create", "chat", "-n", "team-a", "--gpus", "HOPPER_141,ADA_80_PRO",
                         "--cuda", "12.4", "--workers-max", "4", "--scaler", "REQUEST_COUNT",
                         "--scaler-value", "50")
    assert created.returncode == 0, created.stderr
    loaded = await _cli(url, "endpoint", "load", "chat", "--queued", "2", "--rpm", "90")
    assert loaded.returncode == 0, loaded.stderr
    await service.endpoints.scale_all()
    got = await _cli(url, "endpoint", "get", "chat", "--json")
    data = json.loads(got.stdout)
    assert [w["claim_id"] for w in data["workers"]] == ["chat-w1", "chat-w2"]
    shown = await _cli(url, "endpoint", "list")
    assert "HOPPER_141,ADA_80_PRO" in shown.stdout and "0 -> 2" in shown.stdout
    bad = await _cli(url, "endpoint", "create", "x", "--cuda", "10.2")
    assert bad.returncode == 1 and "cuda_versions[0]" in bad.stderr
    deleted = await _cli(url, "endpoint", "delete", "chat")
    assert deleted.returncode == 0 and "released 2 worker(s)" in deleted.stdout


async def test_the_claim_service_builder_serves_endpoints_on_its_own_fold(fresh_nats):
    from services.claim.app import build

    ctx = await start_service("claim", Settings(nats_url=fresh_nats.url, endpoint_tick_s=0.05), build)
    try:
        assert ctx.endpoints.follower is ctx.claims.follower  # one fold of the log, not two
        await call(ctx, subjects.command("endpoint.create"), CreateEndpoint(endpoint=endpoint(workers_min=1)))
        assert await ctx.claims.follower.wait_until(lambda: "chat-w1" in ctx.claims.state.claims, timeout=20)
        got = await rpc.call(ctx.nc, subjects.query("claim.get"), GetClaim(
            claim_id="chat-w1"))
        assert got.ok and got.data["claim_id"] == "chat-w1"
    finally:
        await stop_service(ctx)
