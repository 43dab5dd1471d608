"""Ending marks on a subject only the allocator writes (issue 16): a `ClaimEnding` goes on
`gpu.evt.fence.<node>.ending` (sessions 21-24: `gpu.evt.ending.<claim>`, still believed); the claim
service's user may write `gpu.evt.claim.<claim>` and `gpu.evt.fence.<node>.release`, so it
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
    assert await claim.refused(subjects.node_endings("n0"))
    assert not await claim.refused(subjects.node_releases("n0"))  # its releases under the node's fence
    assert not await allocator.refused(subjects.ending("c1"))
    assert not await allocator.refused(subjects.node_endings("n0"))
    assert await allocator.refused(subjects.claim("c1"))  # nor does the allocator write claims
    assert await allocator.refused(subjects.node_releases("n0"))  # nor releases
    for node in ("node-gpu-1", "quota", "pool-controller"):
        user = await auth_server.connect(node)
        for subject in (subjects.ending("c1"), subjects.node_endings("n0"), subjects.node_releases("n0")):
            assert await user.refused(subject), (node, subject)


def test_a_mark_is_believed_only_on_the_ending_subject():
    assert admits(subjects.node_endings("n0"), MARK)
    assert not admits(subjects.node_endings("n1"), MARK)  # another node's
    assert not admits(subjects.node_releases("n0"), MARK)  # the claim service's subject: a forgery
    assert admits(subjects.ending("c1"), MARK)  # where marks went in sessions 21-24
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
    fences.resolved("n0", 0, 0, folded_seq=0, decided_seq=0)
    # the allocator's hooks hear only what admission believed: a forged mark never reaches them;
    # were one heard on the node's release subject, it moves the fence (as any message there) but
    # ends nothing; on the claim's own subject, nothing at all
    fences.heard(3, subjects.claim("c1"), MARK)
    assert fences.ending == {} and fences.fence_of("n0") == 0
    fences.heard(4, subjects.node_releases("n0"), MARK)
    assert fences.ending == {} and fences.fence_of("n0") == 4
    fences.heard(5, subjects.node_endings("n0"), MARK)
    assert fences.being_ended("c1") and fences.fence_of("n0") == 5
    fences.heard(6, subjects.DECISIONS, ev.DecisionBatch(decisions=[], at=1.0))
    assert fences.ending == {} and fences.fence_of("n0") == 5


@pytest.mark.parametrize("subject", [subjects.node_releases("n0"), subjects.node_endings("n0")])
async def test_the_binding_fence_covers_both_subjects(subject):
    """A release on the node's release subject and a mark on its ending subject both refuse a
    binding conditioned on what came before (the wildcard `gpu.evt.fence.<node>.*`)."""
    from shared.eventlog import AppendConflict

    log = InMemoryEventLog()
    before = (await log.append(subjects.node_releases("n0"), ev.ClaimReleased(claim_id="c0", at=1.0))).seq
    await log.append(subject, MARK if subject.endswith(".ending") else ev.ClaimReleased(claim_id="c1", at=2.0))
    with pytest.raises(AppendConflict):
        await log.append(subjects.node_bindings("n0"), ev.ClaimBound(claim_id="c2", node="n0", env={}, at=3.0),
                         expected_last_subject_seq=before, expected_subject=subjects.node_fence("n0"))
