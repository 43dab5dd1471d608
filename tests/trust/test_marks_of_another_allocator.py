"""Every allocator respects ending marks it did not write (issue 16): a node's record of live
claims leaves out a claim another allocator marked as ending (`ClaimEnding`) until the first
decision batch after the mark's fence is folded. That batch either ends the claim (it never
comes back) or is not the marker's (the marker was fenced out): then the claim is listed again,
the record's node fence at the mark's sequence (or later), and its agent binds it. Before, only the allocator that
wrote a mark held its records; a second allocator listed the claim, its agent bound it, and the
marker's batch ended a claim it believed unbound. Driven deterministically on a real nats-server:
the other allocator's marks and batch are appended by the test."""

from __future__ import annotations

import asyncio

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.events import ClaimBound
from schemas.types import ClaimSpec
from shared.eventlog import AppendConflict
from shared.jetstream import JetStreamEventLog
from services.allocator.end_fence import mark_endings
from services.allocator.fence_lookup import resolve_fences
from services.allocator.loop import Allocator
from services.allocator.node_records import record_of
from services.node_agent.binder import Binder
from tests.service.helpers import h100_node, register_nodes
from tests.service.helpers import test_settings as settings_for
from tests.waiting import until


@pytest.fixture
async def allocated(fresh_client, fresh_nats):
    """This allocator follows and decides; claim c0 is allocated on n0 and not bound."""
    log = JetStreamEventLog(fresh_client)
    await register_nodes(log, h100_node("n0", gpus=1, islands=1))
    allocator = Allocator(log, settings_for(fresh_nats.url), "this", clock=lambda: 1000.0)
    tasks = [asyncio.ensure_future(allocator.follow(await log.last_seq())),
             asyncio.ensure_future(allocator.decide_forever())]
    try:
        await allocator.caught_up.wait()  # c0 is heard live (one folded before: tested below)
        await log.append(subjects.claim("c0"), ev.ClaimSubmitted(
            claim=ClaimSpec(claim_id="c0", namespace="ns", gpus=1), at=1000.0))
        assert await until(lambda: getattr(allocator.state.claims.get("c0"), "status", "") == "allocated"), "allocated"
        assert "c0" not in listed(allocator) and "n0" in allocator.fences.unknown  # n0's fence: asked once
        assert await resolve_fences(log.js, allocator) == 1
        yield log, allocator
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def listed(allocator: Allocator) -> dict[str, int]:
    """claim -> the node fence of this allocator's record of n0 that lists it."""
    record = record_of(allocator.state, "n0", allocator.fences)
    return {c.claim_id: record.fence for c in record.claims}


async def marked_by_the_other(log, allocator: Allocator) -> tuple[int, int]:
    """The other allocator marks c0 (its lease ran out there); (its fence, the mark's sequence)."""
    fence = await log.last_subject_seq(subjects.DECISIONS)
    await mark_endings(log, [("c0", "AllocationExpired", "n0")], fence, at=1001.0)
    mark = await log.last_subject_seq(subjects.node_endings("n0"))
    assert await until(lambda: allocator.state.last_seq >= mark), "the mark folded"
    return fence, mark


async def test_a_claim_another_allocator_is_ending_leaves_the_record_until_its_batch(allocated):
    log, allocator = allocated
    assert "c0" in listed(allocator)
    fence, _ = await marked_by_the_other(log, allocator)
    assert "c0" not in listed(allocator), "a claim another allocator is ending was listed as bindable"
    await log.append(subjects.DECISIONS, ev.DecisionBatch(allocator="other", decisions=[
        ev.AllocationExpired(claim_id="c0", last_renewed=0.0, at=1001.0)]), expected_last_subject_seq=fence)
    assert await until(lambda: "c0" not in allocator.state.claims), "the expiry folded"
    assert listed(allocator) == {} and allocator.fences.ending == {}


async def test_a_mark_whose_batch_was_fenced_out_lets_the_claim_be_bound(allocated):
    log, allocator = allocated
    fence, mark = await marked_by_the_other(log, allocator)
    assert "c0" not in listed(allocator)
    # a third allocator's batch takes the fence first: the marker's batch is fenced out
    await log.append(subjects.DECISIONS, ev.DecisionBatch(allocator="third", decisions=[]),
                     expected_last_subject_seq=fence)
    with pytest.raises(AppendConflict):
        await log.append(subjects.DECISIONS, ev.DecisionBatch(allocator="other", decisions=[
            ev.AllocationExpired(claim_id="c0", last_renewed=0.0, at=1001.0)]), expected_last_subject_seq=fence)
    assert await until(lambda: "c0" in listed(allocator)), "listed again once the fence moved on"
    assert listed(allocator) == {"c0": mark}
    devices = {d.uuid: d for d in h100_node("n0", gpus=1, islands=1).devices}
    binder = Binder("n0", log, lambda: devices, clock=lambda: 1002.0)
    await binder.apply(record_of(allocator.state, "n0", allocator.fences))
    stored = [e for s in [s async for s in log.subject_after(subjects.node_bindings("n0"))] for e in ev.flatten(s.event)]
    assert [e.claim_id for e in stored if isinstance(e, ClaimBound)] == ["c0"]


async def test_an_allocator_started_after_the_mark_looks_it_up_and_respects_it(allocated, fresh_nats):
    """A node whose fence subjects this allocator has not heard since it went live (snapshot,
    catch-up): its record leaves the unbound claims out and the allocator asks the server
    (fence_lookup.py); a mark there after the last decision batch holds them until the next."""
    log, _ = allocated
    fence = await log.last_subject_seq(subjects.DECISIONS)
    await mark_endings(log, [("c0", "AllocationExpired", "n0")], fence, at=1001.0)
    mark = await log.last_subject_seq(subjects.node_endings("n0"))
    late = Allocator(log, settings_for(fresh_nats.url), "late", clock=lambda: 1000.0)
    following = asyncio.ensure_future(late.follow(await log.last_seq()))
    try:
        await late.caught_up.wait()
        assert "c0" not in listed(late) and "n0" in late.fences.unknown
        assert await resolve_fences(log.js, late) == 1
        assert late.fences.ending_nodes == {"n0": fence} and "c0" not in listed(late)
        await log.append(subjects.DECISIONS, ev.DecisionBatch(allocator="third", decisions=[]),
                         expected_last_subject_seq=fence)
        assert await until(lambda: "c0" in listed(late)), "listed again once the fence moved on"
        assert listed(late) == {"c0": mark}
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)


async def test_a_renewal_leaves_the_fence_and_a_release_on_the_node_moves_it(allocated):
    """A renewal (the claim's own subject) is outside the node's fence: the record is unchanged.
    A release of another claim on the node moves the fence: the record carries the new one, so
    the agent binds c0 on it (its binding on the old fence is refused by the server)."""
    log, allocator = allocated
    before = listed(allocator)
    renewed = await log.append(subjects.claim("c0"), ev.LeaseRenewed(claim_id="c0", at=1000.5))
    assert await until(lambda: allocator.state.last_seq >= renewed.seq), "the renewal folded"
    assert listed(allocator) == before
    released = await log.append(subjects.node_releases("n0"), ev.ClaimReleased(claim_id="other", at=1000.6))
    assert await until(lambda: allocator.state.last_seq >= released.seq), "the release folded"
    assert listed(allocator) == {"c0": released.seq}
    assert allocator.nodes_of(["n0"]) == ["n0"]  # its node's record is written again


async def test_a_forged_mark_on_the_node_s_release_subject_is_dropped_yet_moves_the_fence(allocated):
    """The claim service's user may write a node's release subject: a `ClaimEnding` it forges
    there is believed by no fold (the claim is not held as ending), but nats-server counts the
    message in the binding's check, so the record's fence follows it: the claim stays bindable.
    On the claim's own subject a forgery is outside the node's fence and changes nothing."""
    log, allocator = allocated
    before = listed(allocator)
    mark = ev.ClaimEnding(claim_id="c0", decision="ClaimEvicted", fence=0, node="n0", at=1000.5)
    forged = await log.append(subjects.claim("c0"), mark)
    assert await until(lambda: allocator.state.last_seq >= forged.seq), "the forgery read"
    assert allocator.fences.ending == {} and listed(allocator) == before
    forged = await log.append(subjects.node_releases("n0"), mark)
    assert await until(lambda: allocator.state.last_seq >= forged.seq), "the forgery read"
    assert allocator.fences.ending == {} and listed(allocator) == {"c0": forged.seq}
    assert allocator.follower.admission.refused >= 2
