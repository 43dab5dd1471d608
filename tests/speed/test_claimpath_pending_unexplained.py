"""A pending claim the allocator has not explained yet (no reasons) is not written `pending` after
`pending_after_s`, but once its reasons come (or after `unexplained_after_s` without them): at
saturation nearly every claim was written `pending` twice, first with no reasons, then with the
allocator's. Real claim service and nats-server; the writer's clock is the test's, so nothing
depends on how fast the machine is."""

from __future__ import annotations

import asyncio

import nats

from schemas import events as ev
from schemas import subjects
from schemas.types import Reason
from shared.jetstream import JetStreamEventLog
from tests.quota.builders import claim
from tests.service.helpers import running
from tests.speed.test_outcome_coalesce import _drained
from tests.waiting import until
from tests.speed.test_outcome_pending_held import _collect

HOLD_S = 100.0  # of the test's clock, which moves only when the test moves it
UNEXPLAINED_S = 1000.0
WHY = [Reason("no-room", "no node has 1 free GPU", count=3)]


async def _explain(log, service, claim_id: str, at: float):
    waiting = await log.append(subjects.DECISIONS, ev.DecisionBatch(
        decisions=[ev.ClaimPending(claim_id=claim_id, reasons=WHY, at=at)], at=at))
    await service.follower.wait_for_seq(waiting.seq)
    return waiting


async def test_a_claim_explained_after_the_hold_is_written_pending_once_with_its_reasons(fresh_nats):
    async with running(fresh_nats.url, "claim") as contexts:
        writer, service = contexts[0].claim_outcomes, contexts[0].claims
        now = [0.0]
        writer.pending_after_s, writer.unexplained_after_s, writer.clock = HOLD_S, UNEXPLAINED_S, lambda: now[0]
        nc = await nats.connect(fresh_nats.url)
        seen = await _collect(nc, "pu-1")
        log = JetStreamEventLog(nc)
        submitted = await log.append(subjects.claim("pu-1"), claim("pu-1", at=1.0))
        await service.follower.wait_for_seq(submitted.seq)
        assert await until(lambda: "pu-1" in writer.unexplained and not writer.dirty)
        now[0] += HOLD_S  # past the pending hold, not the unexplained one: still nothing
        writer.wake.set()
        assert await until(lambda: "pu-1" in writer.unexplained and not writer.dirty)
        await asyncio.sleep(0.2)  # a flush or two later
        assert seen == [] and writer.safe_checkpoint() < submitted.seq  # a restart writes it
        waiting = await _explain(log, service, "pu-1", at=2.0)
        assert await until(lambda: len(seen) == 1)  # due already (known for a hold): written at once
        assert seen[0].status == "pending" and [r.code for r in seen[0].reasons] == ["no-room"]
        assert seen[0].seq == waiting.seq and not writer.unexplained and not writer.held
        assert await until(lambda: _drained(writer, waiting.seq))
        writer._collect()
        assert writer.safe_checkpoint() >= waiting.seq
        await asyncio.sleep(0.2)
        assert len(seen) == 1  # one pending write, not two
        await nc.close()


async def test_a_claim_never_explained_is_written_pending_after_the_longer_hold(fresh_nats):
    async with running(fresh_nats.url, "claim") as contexts:
        writer, service = contexts[0].claim_outcomes, contexts[0].claims
        now = [0.0]
        writer.pending_after_s, writer.unexplained_after_s, writer.clock = HOLD_S, UNEXPLAINED_S, lambda: now[0]
        nc = await nats.connect(fresh_nats.url)
        seen = await _collect(nc, "pu-2")
        log = JetStreamEventLog(nc)
        submitted = await log.append(subjects.claim("pu-2"), claim("pu-2", at=1.0))
        await service.follower.wait_for_seq(submitted.seq)
        assert await until(lambda: "pu-2" in writer.unexplained and not writer.dirty)
        now[0] += UNEXPLAINED_S
        writer.wake.set()  # the writer's own wait would end at the due time of a real clock
        assert await until(lambda: len(seen) == 1)
        assert seen[0].status == "pending" and seen[0].reasons == [] and seen[0].seq == submitted.seq
        assert not writer.unexplained
        await nc.close()


async def test_a_claim_explained_within_the_hold_waits_only_the_hold(fresh_nats):
    async with running(fresh_nats.url, "claim") as contexts:
        writer, service = contexts[0].claim_outcomes, contexts[0].claims
        now = [0.0]
        writer.pending_after_s, writer.unexplained_after_s, writer.clock = HOLD_S, UNEXPLAINED_S, lambda: now[0]
        nc = await nats.connect(fresh_nats.url)
        seen = await _collect(nc, "pu-3")
        log = JetStreamEventLog(nc)
        submitted = await log.append(subjects.claim("pu-3"), claim("pu-3", at=1.0))
        await service.follower.wait_for_seq(submitted.seq)
        assert await until(lambda: "pu-3" in writer.unexplained)
        await _explain(log, service, "pu-3", at=2.0)
        # moved to the pending hold: due a hold after the claim was first noted
        assert await until(lambda: "pu-3" in writer.held and "pu-3" not in writer.unexplained and not writer.dirty)
        assert writer.held["pu-3"] == HOLD_S and seen == []
        now[0] += HOLD_S
        writer.wake.set()
        assert await until(lambda: len(seen) == 1)
        assert seen[0].status == "pending" and [r.code for r in seen[0].reasons] == ["no-room"]
        await nc.close()
