"""No binding stored after its claim's release (issue 16), on a real nats-server: the agent's
append is conditional on the fence its record carries (the last sequence over the claim's
subjects, `gpu.evt.*.<token>`, as the allocator's fold saw it), so a release appended after the
record makes JetStream refuse the binding: nothing stored, no workload started, and the claim is
not bound later either. The agent reads none of the log to bind."""

from __future__ import annotations

from schemas import subjects
from schemas.events import ClaimBound, ClaimReleased, LeaseRenewed
from shared.jetstream import JetStreamEventLog

from tests.trust.binding_race import NODE, binder_on, fences_now, record
from tests.trust.binding_race import nc  # noqa: F401 (a fixture: the client these tests share)


async def bindings(log) -> list[str]:
    return [s.event.claim_id async for s in log.subject_after(subjects.node_bindings(NODE))
            if isinstance(s.event, ClaimBound)]


async def test_a_release_after_the_record_refuses_the_binding(nc):
    log = JetStreamEventLog(nc)
    through = await log.last_seq()
    fences = await fences_now(log, "gone", "kept")
    await log.append(subjects.claim("gone"), ClaimReleased(claim_id="gone", at=2.0))
    binder, started = binder_on(log)
    await binder.apply(record(through, "gone", "kept", fences=fences))
    assert await bindings(log) == ["kept"] and started == ["kept"]
    await binder.apply(record(through, "gone", "kept", fences=fences))  # the run loop's next look
    assert await bindings(log) == ["kept"] and started == ["kept"] and binder.appends == 1
    assert binder.stale == {"gone": fences["gone"]}


async def test_a_renewal_after_the_record_waits_for_the_record_that_saw_it(nc):
    log = JetStreamEventLog(nc)
    first = await log.append(subjects.claim("renewed"), LeaseRenewed(claim_id="renewed", at=1.0))
    await log.append(subjects.claim("gone"), ClaimReleased(claim_id="gone", at=2.0))
    again = await log.append(subjects.claim("renewed"), LeaseRenewed(claim_id="renewed", at=3.0))
    binder, started = binder_on(log)
    await binder.apply(record(first.seq, "gone", "renewed", fences={"renewed": first.seq}))
    assert await bindings(log) == [] and started == []
    await binder.apply(record(again.seq, "renewed", fences={"renewed": again.seq}))
    assert await bindings(log) == ["renewed"] and started == ["renewed"]


async def test_a_record_without_the_fence_would_have_bound_the_released_claim(nc):
    """What the fence is for: the same append on condition of the release itself is stored."""
    log = JetStreamEventLog(nc)
    through = await log.last_seq()
    await log.append(subjects.claim("gone"), ClaimReleased(claim_id="gone", at=2.0))
    binder, started = binder_on(log)
    await binder.apply(record(through, "gone", fences=await fences_now(log, "gone")))
    assert await bindings(log) == ["gone"]
