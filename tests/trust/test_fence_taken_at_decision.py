"""The allocator's fence is the last decision its pass saw (issue 16, found by the two-allocator
quota race): while it appends a batch's `ClaimEnding` marks, its fold goes on, and a batch of
another allocator folded meanwhile must fence this one out. Read after the marks, the fence was
that other batch, and the same eviction (or expiry) was stored twice, decided on a state that
never saw the first. Driven deterministically on a real nats-server: another allocator's batch
ending the same claim lands, and is folded, while the marks are appended."""

from __future__ import annotations

import asyncio

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from services.allocator.loop import Allocator
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes
from tests.service.helpers import test_settings as settings_for


class OtherAllocatorDuringMarks(JetStreamEventLog):
    """When the first mark is appended, another allocator's batch ending `claim_id` is stored first,
    and this allocator's fold reaches it before the mark's append goes on."""

    allocator: Allocator | None = None
    claim_id = "c0"
    other_seq = 0

    async def append(self, subject, event, *args, **kwargs):
        if isinstance(event, ev.ClaimEnding) and not self.other_seq:
            fence = await self.last_subject_seq(subjects.DECISIONS)
            other = ev.DecisionBatch(allocator="other", decisions=[
                ev.AllocationExpired(claim_id=self.claim_id, last_renewed=0.0, at=event.at)])
            self.other_seq = (await super().append(subjects.DECISIONS, other,
                                                   expected_last_subject_seq=fence)).seq
            await self.allocator.wait_for_seq(self.other_seq)
        return await super().append(subject, event, *args, **kwargs)


@pytest.fixture
def log(fresh_client, fresh_nats):
    return OtherAllocatorDuringMarks(fresh_client), fresh_nats.url


async def test_a_batch_folded_while_the_marks_are_appended_fences_the_pass_out(log):
    log, url = log
    now = [1000.0]
    await register_nodes(log, h100_node("n0"))
    allocator = Allocator(log, settings_for(url), "alloc-test", clock=lambda: now[0])
    log.allocator = allocator
    following = asyncio.ensure_future(allocator.follow(await log.last_seq()))
    deciding = asyncio.ensure_future(allocator.decide_forever())
    try:
        spec = ClaimSpec(claim_id="c0", namespace="ns", gpus=1, lease_seconds=5)
        await log.append(subjects.claim("c0"), ev.ClaimSubmitted(claim=spec, at=now[0]))
        for _ in range(500):
            claim = allocator.state.claims.get("c0")
            if claim is not None and claim.status == "allocated":
                break
            await asyncio.sleep(0.02)
        assert allocator.state.claims["c0"].status == "allocated"
        now[0] += 60  # the lease ran out unrenewed (and the claim was never bound)
        for _ in range(500):
            if log.other_seq and "c0" not in allocator.state.claims and not allocator.own.holding:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)  # ticks: a stale pass would have appended by now
        expired = [d async for stored in log.read(1) if isinstance(stored.event, ev.DecisionBatch)
                   for d in stored.event.decisions if isinstance(d, ev.AllocationExpired)]
        assert len(expired) == 1, f"the lease of c0 expired {len(expired)} times in the log"
        assert allocator.conflicts >= 1
    finally:
        for task in (deciding, following):
            task.cancel()
        await asyncio.gather(deciding, following, return_exceptions=True)
