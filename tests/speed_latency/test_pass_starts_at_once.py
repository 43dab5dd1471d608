"""A decision pass that is due when the last one ends starts at once, without first yielding to
the event loop (services/allocator/loop.py `decide_forever`): on a busy machine one loop iteration
was a millisecond or more before every such pass. Real nats-server."""

from __future__ import annotations

import asyncio
import time

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from ledger.digest import compact_digest
from ledger.evolve import drop_ended_claims, evolve
from ledger.state import State
from services.allocator.loop import Allocator
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes
from tests.service.helpers import test_settings as settings_for
from tests.waiting import until


@pytest.fixture
def log(fresh_client, fresh_nats):
    return JetStreamEventLog(fresh_client), fresh_nats.url


def claim(claim_id: str) -> ev.ClaimSubmitted:
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace="ns", gpus=1), at=time.time())


async def fresh_fold(log) -> State:
    state = drop_ended_claims(State())
    async for stored in log.read(1):
        evolve(state, stored.event, stored.seq)
    drop_ended_claims(state)
    return state


async def test_a_pass_due_at_the_end_of_the_last_starts_without_a_loop_iteration(log):
    log, url = log
    await register_nodes(log, h100_node("n0"), h100_node("n1"))
    allocator = Allocator(log, settings_for(url, tick_s=3600.0), "alloc-test")
    loop = asyncio.get_running_loop()
    # each batch is appended after one more claim is stored: that claim is folded while the
    # batch waits for its ack, so the next pass is due when this one ends
    more = [f"c{i}" for i in range(1, 6)]
    append_batch = allocator._append_batch

    async def claim_then_append(batch, payload, fence):
        if more:
            claim_id = more.pop(0)
            await log.append(subjects.claim(claim_id), claim(claim_id))
        return await append_batch(batch, payload, fence)

    allocator._append_batch = claim_then_append
    # at the end of each pass that leaves another due, a callback is queued on the loop; the next
    # pass must begin before the loop has run it
    decide_once = allocator.decide_once
    queued: list[list] = []
    back_to_back, yielded_first = [], []

    async def observed(timers=True):
        if queued and queued[-1][0]:  # the last pass ended with this one due
            back_to_back.append(1)
            if queued[-1][1]:
                yielded_first.append(len(back_to_back))
        decided = await decide_once(timers)
        mark = [allocator.dirty.is_set() and bool(allocator.state.queue), False]
        queued.append(mark)
        loop.call_soon(mark.__setitem__, 1, True)
        return decided

    allocator.decide_once = observed
    following = asyncio.ensure_future(allocator.follow(await log.last_seq()))
    deciding = asyncio.ensure_future(allocator.decide_forever())
    try:
        await log.append(subjects.claim("c0"), claim("c0"))
        ids = [f"c{i}" for i in range(6)]
        assert await until(lambda: all(allocator.state.claims.get(c) is not None
                                       and allocator.state.claims[c].status == "allocated" for c in ids)
                           and not allocator.own.holding)
        assert len(back_to_back) >= 3, f"only {len(back_to_back)} passes were due as the last ended"
        assert not yielded_first, f"passes {yielded_first} ran after a loop iteration"
        fresh = await fresh_fold(log)  # deciding at once leaves the state exactly the log's fold
        assert allocator.state.last_seq == fresh.last_seq
        assert compact_digest(allocator.state) == compact_digest(fresh)
    finally:
        for task in (deciding, following):
            task.cancel()
        await asyncio.gather(deciding, following, return_exceptions=True)


class SlowDecisions(JetStreamEventLog):
    """The log whose decision batches reach the follower late (a busy loop, a slow delivery)."""

    def __init__(self, nc, delay_s: float):
        super().__init__(nc)
        self.delay_s = delay_s
        self.delivered: list[int] = []  # decision batches handed to the follower, by sequence

    async def follow_raw(self, from_seq=1, subject=None, stop_at=None, **kwargs):
        async for batch in super().follow_raw(from_seq, subject, stop_at, **kwargs):
            decisions = [seq for seq, subj, _data, _headers in batch if subj == subjects.DECISIONS]
            if decisions:
                await asyncio.sleep(self.delay_s)
                self.delivered += decisions
            yield batch


async def test_a_batch_acked_with_the_fold_right_before_it_is_settled_at_the_ack(fresh_client, fresh_nats):
    """The next pass does not wait for the batch to come back through the log; when it comes, it
    is skipped (never folded twice), and the state is the log's fold."""
    log = SlowDecisions(fresh_client, delay_s=0.2)
    await register_nodes(log, h100_node("n0"), h100_node("n1"))
    allocator = Allocator(log, settings_for(fresh_nats.url, tick_s=3600.0), "alloc-test")
    more = [f"c{i}" for i in range(1, 5)]
    append_batch = allocator._append_batch
    appended: list[int] = []

    async def claim_then_append(batch, payload, fence):
        if more:  # one more claim stored and folded first: the fold is right before the batch
            claim_id = more.pop(0)
            stored = await log.append(subjects.claim(claim_id), claim(claim_id))
            await allocator.follower.wait_for_seq(stored.seq)
        done = await append_batch(batch, payload, fence)
        appended.append(done.seq)
        return done

    allocator._append_batch = claim_then_append
    decide_once = allocator.decide_once
    ahead_of_delivery = []

    async def observed(timers=True):
        if appended and appended[-1] not in log.delivered:  # the last batch has not come back yet
            ahead_of_delivery.append(appended[-1])
        return await decide_once(timers)

    allocator.decide_once = observed
    following = asyncio.ensure_future(allocator.follow(await log.last_seq()))
    deciding = asyncio.ensure_future(allocator.decide_forever())
    try:
        await log.append(subjects.claim("c0"), claim("c0"))
        ids = [f"c{i}" for i in range(5)]
        assert await until(lambda: all(allocator.state.claims.get(c) is not None
                                       and allocator.state.claims[c].status == "allocated" for c in ids)
                           and appended and all(seq in log.delivered for seq in appended))
        await asyncio.sleep(0.3)
        assert ahead_of_delivery, "every pass waited for the last batch to come back through the log"
        assert allocator.own.settled_at_ack >= 3
        assert allocator.own.kept == len(appended) and not allocator.own.undone
        assert allocator.own.ahead is None  # each one settled at its ack was skipped when it came
        fresh = await fresh_fold(log)
        assert allocator.state.last_seq == fresh.last_seq
        assert allocator.state.last_decision_seq == fresh.last_decision_seq == appended[-1]
        assert compact_digest(allocator.state) == compact_digest(fresh)
    finally:
        for task in (deciding, following):
            task.cancel()
        await asyncio.gather(deciding, following, return_exceptions=True)
