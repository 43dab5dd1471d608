"""No binding stored after its claim's release (issue 16), on a real nats-server: the agent's
append is conditional on the fence its record carries (the last sequence over the node's fence
subjects, `gpu.evt.fence.<node>.*`, as the allocator's fold saw it), so a release on the node
appended after the record (the claim service releases a claim allocated there and not bound on
`gpu.evt.fence.<node>.release`) makes JetStream refuse the record's bindings: nothing stored, no
workload started, and the released claim is not bound later either. The agent reads none of the
log to bind."""

from __future__ import annotations

from schemas import subjects
from schemas.events import ClaimBound, flatten, ClaimReleased, EventBatch, LeaseRenewed
from shared.jetstream import JetStreamEventLog

from tests.trust.binding_race import NODE, binder_on, fence_now, record
from tests.trust.binding_race import nc  # noqa: F401 (a fixture: the client these tests share)


async def bindings(log) -> list[str]:
    return [e.claim_id async for s in log.subject_after(subjects.node_bindings(NODE))
            for e in flatten(s.event) if isinstance(e, ClaimBound)]


async def test_a_release_after_the_record_refuses_the_binding(nc):
    """The record's message is refused; the agent reads its node's fence after the record's, and
    binds the others on condition of the release's sequence: never the released claim."""
    log = JetStreamEventLog(nc)
    through, fence = await log.last_seq(), await fence_now(log)
    released = await log.append(subjects.node_releases(NODE), ClaimReleased(claim_id="gone", at=2.0))
    binder, started = binder_on(log)
    await binder.apply(record(through, "gone", "kept", fence=fence))
    assert await bindings(log) == ["kept"] and started == ["kept"] and binder.refusals == 1
    await binder.apply(record(through, "gone", "kept", fence=fence))  # the run loop's next look
    assert await bindings(log) == ["kept"] and binder.appends == 1 and binder.gone == {"gone": released.seq}
    [stored] = [s async for s in log.subject_after(subjects.node_bindings(NODE))]
    assert stored.seq > released.seq


async def test_a_release_between_the_read_and_the_retry_refuses_the_retry(nc):
    """The retry is conditioned on the last sequence read: a release stored after the read (the
    race again) refuses it too, and is read in turn."""
    log = JetStreamEventLog(nc)
    through, fence = await log.last_seq(), await fence_now(log)
    await log.append(subjects.node_releases(NODE), ClaimReleased(claim_id="first", at=2.0))
    binder, started = binder_on(log)
    reads = binder._moved_since

    async def release_after_the_read(after):
        moved = await reads(after)
        if after == fence:  # the first read: then "second" is released before the retry
            await log.append(subjects.node_releases(NODE), ClaimReleased(claim_id="second", at=3.0))
        return moved

    binder._moved_since = release_after_the_read
    await binder.apply(record(through, "first", "second", "kept", fence=fence))
    assert await bindings(log) == ["kept"] and started == ["kept"] and binder.refusals == 2


async def test_a_batch_of_releases_refuses_every_binding_it_names(nc):
    """Releases of several claims on the node in one message (the claim service's batch)."""
    log = JetStreamEventLog(nc)
    through, fence = await log.last_seq(), await fence_now(log)
    await log.append(subjects.node_releases(NODE), EventBatch(events=[
        ClaimReleased(claim_id=c, at=2.0) for c in ("gone", "also-gone")], at=2.0))
    binder, started = binder_on(log)
    await binder.apply(record(through, "gone", "also-gone", "kept", fence=fence))
    assert await bindings(log) == ["kept"] and started == ["kept"]


async def test_a_renewal_after_the_record_no_longer_holds_the_binding(nc):
    """A renewal goes on the claim's own subject, outside the node's fence: it is no release."""
    log = JetStreamEventLog(nc)
    through, fence = await log.last_seq(), await fence_now(log)
    await log.append(subjects.claim("renewed"), LeaseRenewed(claim_id="renewed", at=1.0))
    binder, started = binder_on(log)
    await binder.apply(record(through, "renewed", fence=fence))
    assert await bindings(log) == ["renewed"] and started == ["renewed"]


async def test_a_record_without_the_fence_would_have_bound_the_released_claim(nc):
    """What the fence is for: the same append on condition of the release itself is stored."""
    log = JetStreamEventLog(nc)
    through = await log.last_seq()
    await log.append(subjects.node_releases(NODE), ClaimReleased(claim_id="gone", at=2.0))
    binder, started = binder_on(log)
    await binder.apply(record(through, "gone", fence=await fence_now(log)))
    assert await bindings(log) == ["gone"]
