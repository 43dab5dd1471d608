"""Releases batched for speed must not open the release-versus-binding race again (issue 16):
a claim allocated and not yet bound has its release stored on its node's release subject, under
the fence its node agent's binding append is conditioned on (tests/trust/test_bind_after_release.py),
even when many releases arrive at once (several per message, one message per node and batch:
tests/speed/test_release_node_batch.py); bound claims' releases stay batched
(tests/speed/test_release_batch.py). On a real nats-server, claim service and allocator running."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes, request, running

RELEASE = subjects.command("claim.release")


@pytest.fixture
async def stack(fresh_nats):
    async with running(fresh_nats.url, "claim", "allocator"):
        nc = await nats.connect(fresh_nats.url)
        log = JetStreamEventLog(nc)
        await register_nodes(log, h100_node("node-a"), h100_node("node-b"))
        yield nc, log
        await nc.close()


async def test_concurrent_releases_of_unbound_claims_go_on_their_node_s_release_subject(stack):
    nc, log = stack
    ids = [f"ub-{i}" for i in range(10)]
    replies = await asyncio.gather(*(request(nc, subjects.command("claim.submit"), {
        "claim": {"claim_id": c, "namespace": "team-a", "gpus": 1}, "wait_seconds": 10}) for c in ids))
    assert all(r["ok"] and r["data"]["status"] == "allocated" for r in replies), replies
    nodes = {r["data"]["claim_id"]: r["data"]["node"] for r in replies}
    before = await log.last_seq()
    answers = await asyncio.gather(*(request(nc, RELEASE, {"claim_id": c, "reason": "done"}) for c in ids))
    assert all(a["ok"] and a["data"]["status"] == "released" for a in answers), answers
    stored = [s async for s in log.read(before + 1) if not isinstance(s.event, ev.DecisionBatch)]
    where = {e.claim_id: s.subject for s in stored for e in ev.flatten(s.event) if isinstance(e, ev.ClaimReleased)}
    assert where == {c: subjects.node_releases(nodes[c]) for c in ids}
    assert len([s for s in stored if s.subject.startswith("gpu.evt.fence.")]) <= len(ids)
