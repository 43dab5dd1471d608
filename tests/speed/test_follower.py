"""The one follower every service folds the log with, on a real nats-server: catch-up in batches
then the live tail, hooks, the placement index only where it is used, ended claims dropped for
the allocator, and the garbage collector kept off the caught-up state."""

import asyncio
import gc

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec, Grant
from ledger.evolve import fold
from ledger.follower import Follower
from shared.jetstream import FAST_READ_MIN, JetStreamEventLog
from tests.service.helpers import h100_node


@pytest.fixture
def log(fresh_client):
    return JetStreamEventLog(fresh_client)


def submitted(claim_id):
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace="ns"))


def allocated(claim_id, card):
    return ev.ClaimAllocated(claim_id=claim_id, namespace="ns", node="n0",
                             grants=[Grant(node="n0", uuid=f"GPU-n0-{card}", index=card)])


async def write_history(log, claims=FAST_READ_MIN):
    """Enough stored to be read as a range: a node, claims, each allocated and most released."""
    await log.append(subjects.node("n0"), h100_node("n0"))
    for i in range(claims):
        await log.append(subjects.claim(f"c{i}"), submitted(f"c{i}"))
    await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[allocated(f"c{i}", i) for i in range(8)]))
    await log.append(subjects.INTAKE_BATCHES, ev.EventBatch(events=[ev.ClaimReleased(claim_id=f"c{i}")
                                                                     for i in range(6)]))


async def running(follower, until=None):
    task = asyncio.ensure_future(follower.run(until))
    await asyncio.wait_for(follower.caught_up.wait(), 30)
    return task


async def stop(task):
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_every_event_is_folded_and_told_once_in_order_and_the_live_ones_to_the_live_hooks(log):
    await write_history(log)
    follower, seen, live_before, live_after = Follower(log), [], [], []
    follower.listeners.append(lambda seq, subject, e: seen.append((seq, type(e).__name__)))
    follower.before_live.append(lambda seq, subject, e: live_before.append(seq))
    follower.after_live.append(lambda seq, subject, e: live_after.append((seq, subject)))
    task = await running(follower)
    try:
        stored_end = await log.last_seq()
        appended = await log.append(subjects.claim("late"), submitted("late"))
        assert await follower.wait_for_seq(appended.seq)
    finally:
        await stop(task)
    assert [s for s, _ in seen] == sorted(s for s, _ in seen) and seen[-1] == (appended.seq, "ClaimSubmitted")
    assert sum(1 for _, kind in seen if kind == "ClaimReleased") == 6, "an EventBatch is told member by member"
    assert live_before == [appended.seq] and live_after == [(appended.seq, subjects.claim("late"))]
    assert stored_end < appended.seq
    everything = fold([(s.seq, s.event) async for s in log.read()])
    assert follower.state.claims.keys() == everything.claims.keys() and follower.state.last_seq == appended.seq


async def test_a_service_that_never_places_never_builds_the_placement_index(log):
    await write_history(log, claims=10)
    placing, not_placing = Follower(log), Follower(log, places=False)
    tasks = [await running(placing), await running(not_placing)]
    try:
        appended = await log.append(subjects.node("n1"), h100_node("n1"))
        assert await placing.wait_for_seq(appended.seq) and await not_placing.wait_for_seq(appended.seq)
    finally:
        for task in tasks:
            await stop(task)
    assert placing.state.groups and placing.state.deferred is None
    assert not not_placing.state.groups and not_placing.state.deferred is not None
    assert not_placing.state.nodes.keys() == placing.state.nodes.keys() == {"n0", "n1"}
    assert not_placing.state.units.keys() == placing.state.units.keys()


async def test_for_the_allocator_ended_claims_leave_the_state_and_are_handed_over_to_free(log):
    await write_history(log)
    follower = Follower(log, keep_ended=False)
    task = await running(follower)
    try:
        assert sorted(c.claim_id for c in follower.dropped) == [f"c{i}" for i in range(6)]
        assert not {f"c{i}" for i in range(6)} & follower.state.claims.keys()
        assert {"c0", "c5"} <= follower.state.ended.keys()
        appended = await log.append(subjects.claim("c6"), ev.ClaimReleased(claim_id="c6"))
        assert await follower.wait_for_seq(appended.seq)
        assert "c6" not in follower.state.claims and "c7" in follower.state.claims
    finally:
        await stop(task)


async def test_the_allocator_catch_up_sheds_ended_claims_a_slice_at_a_time(log, monkeypatch):
    """With a slice of 4 claims, the catch-up sheds ended claims as it goes (not all at the end),
    and the state it reaches is the same: live claims kept, ended ones by id only."""
    import ledger.follower as follower_module

    await write_history(log)
    monkeypatch.setattr(follower_module, "SHED_SLICE", 4)
    held, shed = [], follower_module.shed_ended_claims

    def counting(state, aside=None):
        held.append(len(state.claims))
        return shed(state, aside)

    monkeypatch.setattr(follower_module, "shed_ended_claims", counting)
    follower = Follower(log, keep_ended=False)
    task = await running(follower)
    try:
        assert held, "no slice was shed during the catch-up"
        assert not {f"c{i}" for i in range(6)} & follower.state.claims.keys()
        assert {f"c{i}" for i in range(6)} <= follower.state.ended.keys()
        assert {"c6", "c7", f"c{FAST_READ_MIN - 1}"} <= follower.state.claims.keys()
    finally:
        await stop(task)


async def test_the_collector_is_paused_while_catching_up_and_the_state_frozen_after(log):
    await write_history(log)
    follower, during = Follower(log), []
    follower.listeners.append(lambda seq, subject, e: during.append(gc.isenabled()))
    was_on = gc.isenabled()
    gc.enable()
    try:
        task = await running(follower)
        await stop(task)
        assert during and not any(during), "no collection while catching up"
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        if not was_on:
            gc.disable()


async def test_waiting_for_a_sequence_not_reached_gives_up_at_its_timeout(log):
    await write_history(log, claims=3)
    follower = Follower(log)
    task = await running(follower)
    try:
        assert not await follower.wait_for_seq(follower.last_seq + 10, timeout=0.2)
        assert await follower.wait_for_seq(follower.last_seq, timeout=0.2)
    finally:
        await stop(task)
