"""An endpoint scaling down releases its workers where a client's release goes
(services/claim/releases.py): a worker allocated on a node and not bound yet is released on that
node's release subject, under the fence its node agent's bindings are conditioned on, so the
agent acting on a record from before the release is refused and starts no workload for it. The
autoscaler wrote its releases on the claim's own subject, which that fence no longer covers since
bindings are fenced per node: a binding could then be stored after the worker's release."""

from __future__ import annotations

import asyncio

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.grants import LiveClaim, NodeGrants
from schemas.types import ClaimSpec, Grant
from shared.eventlog import InMemoryEventLog
from ledger.follower import Follower
from services.claim.endpoints import Endpoints
from services.node_agent.binder import Binder
from tests.service.helpers import h100_node

GRANTS = [Grant(node="n0", uuid="GPU-n0-0", index=0)]


@pytest.fixture
async def endpoints():
    log = InMemoryEventLog()
    await log.append(subjects.node("n0"), h100_node("n0"))
    await log.append(subjects.claim("ep-w1"), ev.ClaimSubmitted(claim=ClaimSpec(claim_id="ep-w1", namespace="ns", gpus=1)))
    await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[
        ev.ClaimAllocated(claim_id="ep-w1", namespace="ns", node="n0", grants=GRANTS)]))
    follower = Follower(log, places=False)
    following = asyncio.ensure_future(follower.run())
    assert await follower.wait_for_seq(await log.last_seq(), timeout=10)
    yield log, Endpoints(log, follower, clock=lambda: 10.0)
    following.cancel()
    await asyncio.gather(following, return_exceptions=True)


async def test_a_worker_released_by_a_scale_down_refuses_its_binding(endpoints):
    log, scaler = endpoints
    record = NodeGrants(node="n0", through_seq=await log.last_seq(), fence=0,
                        claims=[LiveClaim(claim_id="ep-w1", namespace="ns", grants=GRANTS)])
    before = await log.last_seq()
    await scaler._release("ep-w1", "endpoint ep scaled down: idle")
    stored = [(s.subject, s.event) async for s in log.read(before + 1)]
    assert [subject for subject, _ in stored] == [subjects.node_releases("n0")]
    assert stored[0][1].by == "endpoint-autoscaler" and scaler.state.claims["ep-w1"].status == "released"
    devices = {d.uuid: d for d in h100_node("n0").devices}
    binder = Binder("n0", log, lambda: devices, clock=lambda: 11.0)
    await binder.apply(record)  # the agent acting on the record from before the release
    assert binder.appends == 0 and [s async for s in log.subject_after(subjects.node_bindings("n0"))] == []


async def test_a_worker_that_ended_meanwhile_is_not_released_again(endpoints):
    log, scaler = endpoints
    await scaler._release("ep-w1", "scaled down")
    last = await log.last_seq()
    await scaler._release("ep-w1", "scaled down again")
    assert await log.last_seq() == last
