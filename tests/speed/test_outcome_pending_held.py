"""The outcome writer holds a claim's `pending` outcome back until the claim has been known for
`pending_after_s`: a claim allocated sooner is first written `allocated` (one write fewer), and
one that waits longer shows `pending` with its reasons, as before. Real claim service and
nats-server; the writer's clock is the test's, so nothing depends on how fast the machine is."""

from __future__ import annotations

import asyncio

import nats

from schemas import events as ev
from schemas import subjects
from schemas.outcomes import decode_outcome
from schemas.types import Grant, Reason
from shared.jetstream import JetStreamEventLog
from tests.quota.builders import claim, node
from tests.service.helpers import running
from tests.speed.test_outcome_coalesce import _drained
from tests.waiting import until

HOLD_S = 3600.0  # of the test's clock, which moves only when the test moves it


async def test_a_claim_allocated_within_the_hold_is_never_written_pending(fresh_nats):
    async with running(fresh_nats.url, "claim") as contexts:
        writer, service = contexts[0].claim_outcomes, contexts[0].claims
        writer.pending_after_s, writer.clock = HOLD_S, lambda: 0.0
        nc = await nats.connect(fresh_nats.url)
        seen = await _collect(nc, "ph-1")
        log = JetStreamEventLog(nc)
        await log.append(subjects.node("n1"), node("n1", 2))
        submitted = await log.append(subjects.claim("ph-1"), claim("ph-1", at=1.0))
        await service.follower.wait_for_seq(submitted.seq)
        # built, found pending, held back (not explained by the allocator: until it is, or longer)
        assert await until(lambda: "ph-1" in writer.unexplained)
        assert writer.safe_checkpoint() < submitted.seq  # its outcome is not stored yet
        allocated = await log.append(subjects.DECISIONS, _allocation("ph-1", at=2.0))
        await service.follower.wait_for_seq(allocated.seq)
        assert await until(lambda: seen and seen[-1].status == "allocated")
        assert "ph-1" not in writer.held and "ph-1" not in writer.unexplained
        released = await log.append(subjects.claim("ph-1"), ev.ClaimReleased(claim_id="ph-1", at=3.0))
        await service.follower.wait_for_seq(released.seq)
        assert await until(lambda: _drained(writer, released.seq) and seen[-1].final)
        assert [o.status for o in seen] == ["allocated", "released"]
        writer._collect()  # a flush's own settling cannot count itself: the next one (or a stop) does
        assert writer.safe_checkpoint() >= released.seq
        await nc.close()


async def test_a_claim_still_pending_after_the_hold_is_written_with_its_reasons(fresh_nats):
    async with running(fresh_nats.url, "claim") as contexts:
        writer, service = contexts[0].claim_outcomes, contexts[0].claims
        now = [0.0]
        writer.pending_after_s, writer.clock = HOLD_S, lambda: now[0]
        nc = await nats.connect(fresh_nats.url)
        seen = await _collect(nc, "ph-2")
        log = JetStreamEventLog(nc)
        submitted = await log.append(subjects.claim("ph-2"), claim("ph-2", at=1.0))
        await service.follower.wait_for_seq(submitted.seq)
        why = [Reason("no-room", "no node has 1 free GPU", count=3)]
        waiting = await log.append(subjects.DECISIONS, ev.DecisionBatch(
            decisions=[ev.ClaimPending(claim_id="ph-2", reasons=why, at=2.0)], at=2.0))
        await service.follower.wait_for_seq(waiting.seq)
        assert await until(lambda: "ph-2" in writer.held and not writer.dirty)
        await asyncio.sleep(0.2)  # a flush or two later: still nothing written
        # the checkpoint stays below its latest change: a restart writes its outcome
        assert seen == [] and writer.safe_checkpoint() < waiting.seq
        now[0] += HOLD_S  # the hold has passed
        writer.wake.set()
        assert await until(lambda: len(seen) == 1)
        assert seen[0].status == "pending" and [r.code for r in seen[0].reasons] == ["no-room"]
        assert seen[0].seq == waiting.seq and not writer.held
        assert await until(lambda: _drained(writer, waiting.seq))
        writer._collect()
        assert writer.safe_checkpoint() >= waiting.seq
        await nc.close()


async def _collect(nc, claim_id: str) -> list:
    seen: list = []

    async def note(msg) -> None:
        seen.append(decode_outcome(msg.data))

    await nc.subscribe(subjects.outcome(claim_id), cb=note)
    return seen


def _allocation(claim_id: str, at: float) -> ev.DecisionBatch:
    grant = Grant(node="n1", uuid="n1-gpu0", index=0, memory_mib=1024)
    return ev.DecisionBatch(decisions=[ev.ClaimAllocated(
        claim_id=claim_id, namespace="team-a", node="n1", grants=[grant], at=at)], at=at)


async def test_a_pending_claims_reasons_are_written_at_most_once_per_hold(fresh_nats):
    async with running(fresh_nats.url, "claim") as contexts:
        writer, service = contexts[0].claim_outcomes, contexts[0].claims
        now = [0.0]
        writer.pending_after_s, writer.clock = HOLD_S, lambda: now[0]
        nc = await nats.connect(fresh_nats.url)
        seen = await _collect(nc, "ph-3")
        log = JetStreamEventLog(nc)
        submitted = await log.append(subjects.claim("ph-3"), claim("ph-3", at=1.0))
        await service.follower.wait_for_seq(submitted.seq)
        assert await until(lambda: "ph-3" in writer.unexplained)
        now[0] += HOLD_S  # past the hold for claims with no reasons yet (shorter than HOLD_S) too
        writer.wake.set()
        assert await until(lambda: len(seen) == 1)  # pending, no reasons yet
        assert seen[0].status == "pending" and seen[0].reasons == []
        why = [Reason("no-room", "no node has 1 free GPU", count=3)]
        waiting = await log.append(subjects.DECISIONS, ev.DecisionBatch(
            decisions=[ev.ClaimPending(claim_id="ph-3", reasons=why, at=2.0)], at=2.0))
        await service.follower.wait_for_seq(waiting.seq)
        assert await until(lambda: "ph-3" in writer.held and not writer.dirty)
        await asyncio.sleep(0.2)
        assert len(seen) == 1  # within a hold of the last pending outcome: not yet
        now[0] += HOLD_S
        writer.wake.set()
        assert await until(lambda: len(seen) == 2)
        assert seen[1].status == "pending" and [r.code for r in seen[1].reasons] == ["no-room"]
        await nc.close()
