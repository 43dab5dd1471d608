"""Ending marks on a subject only the allocator writes (issue 16): a `ClaimEnding` goes on
`gpu.evt.ending.<claim>`; the claim service's user may write only `gpu.evt.claim.<claim>`, so it
cannot forge one there (nats-server refuses it), and one it writes on the claim's own subject
(where marks went before) is dropped by every fold (`schemas.authority`, which every fold reads
through): it neither moves the allocator's view of the claim nor makes it hold the claim's
binding. Old logs fold as before: no fold of the ledger ever changed state on a mark."""

from __future__ import annotations

import asyncio

import pytest

from ledger.digest import digest
from ledger.follower import Follower
from schemas import events as ev
from schemas import subjects
from schemas.authority import admits
from schemas.types import ClaimSpec
from shared.eventlog import InMemoryEventLog
from tests.trust_edge.conftest import auth_server  # noqa: F401 (the fixture)

MARK = ev.ClaimEnding(claim_id="c1", decision="ClaimEvicted", fence=0, node="n0", at=1.0)


async def test_only_the_allocator_may_write_an_ending_mark(auth_server):  # noqa: F811
    claim = await auth_server.connect("claim")
    allocator = await auth_server.connect("allocator")
    assert await claim.refused(subjects.ending("c1"))
    assert not await allocator.refused(subjects.ending("c1"))
    assert await allocator.refused(subjects.claim("c1"))  # nor does the allocator write claims
    for node in ("node-gpu-1", "quota", "pool-controller"):
        assert await (await auth_server.connect(node)).refused(subjects.ending("c1")), node


def test_a_mark_is_believed_only_on_the_ending_subject():
    assert admits(subjects.ending("c1"), MARK)
    assert not admits(subjects.claim("c1"), MARK)  # the claim service's subject: a forgery
    assert not admits(subjects.ending("c2"), MARK)  # another claim's
    assert not admits(subjects.DECISIONS, MARK)


async def fold(entries) -> Follower:
    log = InMemoryEventLog()
    for subject, event in entries:
        await log.append(subject, event)
    follower = Follower(log, places=False)
    task = asyncio.ensure_future(follower.run())
    assert await follower.wait_for_seq(len(entries), timeout=10)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return follower


async def test_a_forged_mark_is_dropped_and_an_old_log_folds_as_before():
    submit = (subjects.claim("c1"), ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c1", namespace="ns"), at=1.0))
    plain = await fold([submit])
    forged = await fold([submit, (subjects.claim("c1"), MARK)])
    assert forged.admission.refused == 1 and plain.admission.refused == 0
    assert digest(forged.state) == digest(plain.state)
    assert forged.state.claims["c1"].status == plain.state.claims["c1"].status == "pending"
    assert forged.state.claims["c1"].trail == plain.state.claims["c1"].trail


def test_the_allocator_does_not_hold_a_claim_for_a_forged_mark():
    from services.allocator.claim_fences import ClaimFences

    fences = ClaimFences()
    fences.heard(3, subjects.claim("c1"), ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c1", namespace="ns"), at=1.0))
    # the allocator's hooks hear only what admission believed: a forged mark never reaches them;
    # were one heard on the claim's subject, it moves the fence (as any event there) but ends nothing
    fences.heard(4, subjects.claim("c1"), MARK)
    assert fences.ending == {} and fences.fence_of("c1") == 4
    fences.heard(5, subjects.ending("c1"), MARK)
    assert fences.ending == {"c1": 0} and fences.fence_of("c1") is None
    fences.heard(6, subjects.DECISIONS, ev.DecisionBatch(decisions=[], at=1.0))
    assert fences.ending == {} and fences.fence_of("c1") == 5


@pytest.mark.parametrize("subject", [subjects.claim("c1"), subjects.ending("c1")])
async def test_the_binding_fence_covers_both_subjects(subject):
    """A release on the claim's subject and a mark on its ending subject both refuse a binding
    conditioned on what came before (the wildcard `gpu.evt.*.<claim>`)."""
    from shared.eventlog import AppendConflict

    log = InMemoryEventLog()
    before = (await log.append(subjects.claim("c1"), ev.LeaseRenewed(claim_id="c1", at=1.0))).seq
    await log.append(subject, MARK if subject.startswith("gpu.evt.ending") else ev.ClaimReleased(claim_id="c1", at=2.0))
    with pytest.raises(AppendConflict):
        await log.append(subjects.node_bindings("n0"), ev.ClaimBound(claim_id="c1", node="n0", env={}, at=3.0),
                         expected_last_subject_seq=before, expected_subject=subjects.claim_fence("c1"))
