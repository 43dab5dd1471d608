"""Releases answered a batch at a time: concurrent release commands are stored together (one
EventBatch on the claim service's batch subject), every request answered as before. On a real
nats-server."""

from __future__ import annotations

import asyncio

import msgspec
import nats
import pytest

from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes, request, running

RELEASE = subjects.command("claim.release")


@pytest.fixture
async def stack(fresh_nats):
    async with running(fresh_nats.url, "claim", "allocator") as contexts:
        nc = await nats.connect(fresh_nats.url)
        log = JetStreamEventLog(nc)
        await register_nodes(log, h100_node("node-a"), h100_node("node-b"))
        yield nc, log
        await nc.close()


async def _allocated(nc, count: int) -> list[str]:
    ids = [f"rb-{i}" for i in range(count)]
    replies = await asyncio.gather(*(request(nc, subjects.command("claim.submit"), {
        "claim": {"claim_id": claim_id, "namespace": "team-a", "gpus": 1}, "wait_seconds": 10})
        for claim_id in ids))
    assert all(r["ok"] and r["data"]["status"] == "allocated" for r in replies), replies
    return ids


async def _bound(nc, log, ids: list[str]) -> None:
    """Bind the claims as their node agents would, and wait until the claim service folded it:
    a claim allocated and not yet bound has its release on its own subject instead (where its
    agent's binding append is conditioned: tests/trust/test_release_before_binding.py)."""
    nodes = {d.claim_id: d.node async for s in log.read(subject=subjects.DECISIONS)
             for d in getattr(s.event, "decisions", []) if isinstance(d, ev.ClaimAllocated)}
    for claim_id in ids:
        await log.append(subjects.node_bindings(nodes[claim_id]),
                         ev.ClaimBound(claim_id=claim_id, node=nodes[claim_id], env={}))
    for claim_id in ids:
        for _ in range(500):
            reply = await request(nc, subjects.query("claim.get"), {"claim_id": claim_id})
            if reply["ok"] and reply["data"]["status"] == "bound":
                break
            await asyncio.sleep(0.01)


async def test_concurrent_releases_are_stored_together_and_each_answered(stack):
    nc, log = stack
    ids = await _allocated(nc, 12)
    await _bound(nc, log, ids)
    before = await log.last_seq()
    bad = nc.request(RELEASE, b'{"claim_id": 7}', timeout=10)  # malformed, in the same burst
    unknown = request(nc, RELEASE, {"claim_id": "no-such-claim"})
    twice = request(nc, RELEASE, {"claim_id": ids[0], "reason": "again"})
    answers = await asyncio.gather(*(request(nc, RELEASE, {"claim_id": c, "reason": "done"}) for c in ids),
                                   bad, unknown, twice)
    released, bad_reply, unknown_reply, twice_reply = answers[:len(ids)], *answers[len(ids):]
    assert all(r["ok"] and r["data"]["status"] == "released" for r in released), released
    assert twice_reply["ok"] and twice_reply["data"]["status"] == "released"
    bad_reply = msgspec.json.decode(bad_reply.data)
    assert not bad_reply["ok"] and bad_reply["error"]["field"] == "claim_id"
    assert not unknown_reply["ok"] and unknown_reply["error"]["code"] == "not-found"

    stored = [s async for s in log.read(before + 1) if not isinstance(s.event, ev.DecisionBatch)]
    releases = [(s, e) for s in stored for e in ev.flatten(s.event) if isinstance(e, ev.ClaimReleased)]
    assert sorted(e.claim_id for _s, e in releases) == sorted(ids)  # each once, none lost
    messages = {s.seq for s, _e in releases}
    assert len(messages) < len(ids)  # stored together, not one message per release
    assert any(s.subject == subjects.INTAKE_BATCHES and isinstance(s.event, ev.EventBatch) for s, _e in releases)


async def test_a_release_of_a_released_claim_says_already(stack):
    nc, _log = stack
    [claim_id] = await _allocated(nc, 1)
    first = await request(nc, RELEASE, {"claim_id": claim_id})
    again = await request(nc, RELEASE, {"claim_id": claim_id})
    assert first["ok"] and "already" not in first["data"]
    assert again["ok"] and again["data"]["already"] == "released"
