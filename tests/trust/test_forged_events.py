"""Forged events on a real nats-server: the fold believes none of them (issue 16, item 1 and 2).

Each forgery is an event a real writer could append, but on a subject its type does not belong
to (schemas/authority.py). The claim service's and a fresh follower's fold must ignore it, and the
allocator's fence must not move.
"""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import Grant, QuotaSpec
from shared.jetstream import JetStreamEventLog
from ledger.follower import Follower
from tests.service.helpers import h100_node, register_nodes, request, running


@pytest.fixture
async def stack(fresh_nats):
    async with running(fresh_nats.url, "claim", "allocator", "quota") as contexts:
        nc = await nats.connect(fresh_nats.url)
        log = JetStreamEventLog(nc)
        await register_nodes(log, h100_node("n0"), h100_node("n1"))
        yield nc, log
        await nc.close()


async def submit(nc, claim_id: str, gpus: int, wait: float = 10.0, namespace: str = "team-a") -> dict:
    reply = await request(nc, subjects.command("claim.submit"), {
        "claim": {"claim_id": claim_id, "namespace": namespace, "gpus": gpus}, "wait_seconds": wait})
    assert reply["ok"], reply
    return reply["data"]


async def fold_all(log) -> Follower:
    follower = Follower(log, places=False)
    end = await log.last_seq()
    task = asyncio.create_task(follower.run(until=end))
    assert await follower.wait_for_seq(end, timeout=10)
    task.cancel()
    return follower


async def test_forged_decisions_elsewhere_are_not_believed(stack):
    nc, log = stack
    held = await submit(nc, "held", 8)
    assert held["status"] == "allocated"
    node = held["node"]
    waiting = await submit(nc, "waiting", 8, wait=0.5, namespace="team-b")
    waiting = await submit(nc, "waiting-too", 8, wait=0.5, namespace="team-b")
    assert waiting["status"] == "pending"
    forged = [
        # a forged eviction of a running claim, on that claim's subject
        (subjects.claim("held"), ev.DecisionBatch(decisions=[ev.ClaimEvicted(claim_id="held", rule="priority")])),
        # a forged NodeLost, on the node's own subject
        (subjects.node(node), ev.DecisionBatch(decisions=[ev.NodeLost(node=node, last_heartbeat=0.0,
                                                                       released=["held"])])),
        # an 8-GPU claim bound to 1 GPU with no memory, on the claim's subject
        (subjects.claim("waiting-too"), ev.DecisionBatch(decisions=[ev.ClaimAllocated(
            claim_id="waiting-too", namespace="team-b", node=node,
            grants=[Grant(node=node, uuid=f"GPU-{node}-0", index=0, milli=1000)], vram_mib=0)])),
    ]
    for subject, event in forged:
        await log.append(subject, event)
    folded = await fold_all(log)
    state = folded.state
    assert state.claims["held"].status == "allocated"
    assert state.claims["waiting-too"].status == "pending"
    assert not state.nodes[node].lost
    assert folded.admission.refused == len(forged)
    got = (await request(nc, subjects.query("claim.get"), {"claim_id": "held"}))["data"]
    assert got["status"] == "allocated"


async def test_forged_node_and_quota_events_are_not_believed(stack):
    nc, log = stack
    set_ = await request(nc, subjects.command("quota.set"), {"namespace": "team-a", "requests_vram": "100Gi"})
    assert set_["ok"], set_
    # a NodeRegistered with no devices for n0, from n1's subject
    await log.append(subjects.node("n1"), ev.NodeRegistered(node="n0", devices=[]))
    # a quota lifted from another namespace's subject, and from a claim subject
    await log.append(subjects.quota("team-z"), ev.QuotaSet(namespace="team-a", spec=QuotaSpec()))
    await log.append(subjects.claim("x"), ev.QuotaDeleted(namespace="team-a"))
    state = (await fold_all(log)).state
    assert len(state.nodes["n0"].units) == 8
    assert state.quotas["team-a"].total.requests.vram_mib == 100 * 1024


async def test_an_empty_decision_batch_elsewhere_cannot_move_the_allocators_fence(stack):
    nc, log = stack
    await log.append("gpu.evt.claim.x", ev.DecisionBatch(decisions=[]))
    first = await submit(nc, "after-forgery", 1, wait=10.0)
    assert first["status"] == "allocated"
    await log.append("gpu.evt.claim.y", ev.DecisionBatch(decisions=[], based_on_seq=1))
    second = await submit(nc, "after-second-forgery", 1, wait=10.0)
    assert second["status"] == "allocated"




async def test_garbage_on_the_decision_subject_moves_the_fence_and_is_skipped(stack):
    nc, log = stack
    await nc.jetstream().publish(subjects.DECISIONS, b'{"not": "an event"}')
    await nc.jetstream().publish(subjects.DECISIONS, b"\xff\xfe")
    first = await submit(nc, "after-garbage", 1, wait=10.0)
    assert first["status"] == "allocated"


async def test_a_binding_is_believed_only_from_its_own_nodes_binding_subject(stack):
    nc, log = stack
    held = await submit(nc, "to-bind", 1)
    node = held["node"]
    other = "n1" if node == "n0" else "n0"
    env = {"CUDA_VISIBLE_DEVICES": "7"}
    forged = [(subjects.node_bindings(other), ev.ClaimBound(claim_id="to-bind", node=node, env=env)),
              (subjects.node_bindings(other), ev.ClaimBound(claim_id="to-bind", node=other, env=env)),
              (subjects.claim("to-bind"), ev.ClaimBound(claim_id="to-bind", node=node, env=env)),
              (subjects.node(node), ev.ClaimBound(claim_id="to-bind", node=node, env=env))]
    for i, (subject, event) in enumerate(forged):  # the first with the id an old agent used
        await log.append(subject, event, msg_id="bound-to-bind" if i == 0 else None)
    assert (await fold_all(log)).state.claims["to-bind"].status == "allocated"
    real = ev.ClaimBound(claim_id="to-bind", node=node, env={"CUDA_VISIBLE_DEVICES": "0"})
    await log.append(subjects.node_bindings(node), real)
    state = (await fold_all(log)).state
    assert state.claims["to-bind"].status == "bound" and state.claims["to-bind"].env == real.env


async def test_a_catch_up_moves_the_fence_past_garbage_on_the_decision_subject(fresh_nats):
    from shared.jetstream import FAST_READ_MIN, ensure_streams

    nc = await nats.connect(fresh_nats.url)
    await ensure_streams(nc.jetstream())
    log = JetStreamEventLog(nc)
    for i in range(FAST_READ_MIN):  # enough stored to be caught up on as a range
        await log.append(subjects.node(f"n{i % 3}"), ev.NodeHeartbeat(node=f"n{i % 3}"))
    await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[]))
    garbage = (await nc.jetstream().publish(subjects.DECISIONS, b"\xff not an event")).seq
    await log.append("gpu.evt.claim.x", ev.DecisionBatch(decisions=[]))  # refused: not the fence
    follower = await fold_all(log)
    assert follower.state.last_decision_seq == garbage
    assert follower.admission.undecodable == 1 and follower.admission.refused == 1
    await nc.close()
