"""The fence a binding is appended on (`gpu.evt.*.<claim>`, services/allocator/claim_fences.py):
nats-server takes the wildcard in `Nats-Expected-Last-Subject-Sequence-Subject` on an R3 cluster
as on one server, so a release or an ending mark after the record refuses the binding there too;
and the allocator's fold counts what the server counts, an aggregate of another kind named like
the claim included, so its records carry the fence the server will check."""

from __future__ import annotations

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from services.allocator.claim_fences import ClaimFences
from shared.eventlog import AppendConflict, InMemoryEventLog
from shared.jetstream import JetStreamEventLog, connect, ensure_streams
from shared.retry import until_done

BOUND = ev.ClaimBound(claim_id="c1", node="n0", env={}, at=3.0)
MARK = ev.ClaimEnding(claim_id="c1", decision="ClaimEvicted", fence=0, node="n0", at=2.0)


@pytest.mark.timeout(120)
async def test_the_wildcard_fence_holds_on_a_three_server_cluster(nats_cluster):
    nc = await connect(nats_cluster.url)
    try:
        js = nc.jetstream()
        await until_done(lambda: ensure_streams(js, replicas=3), "create the streams")
        log = JetStreamEventLog(nc)
        fence = (await log.append(subjects.claim("c1"), ev.LeaseRenewed(claim_id="c1", at=1.0))).seq
        for subject, event in ((subjects.ending("c1"), MARK), (subjects.claim("c1"), ev.ClaimReleased(claim_id="c1", at=2.0))):
            await log.append(subject, event)
            with pytest.raises(AppendConflict):
                await log.append(subjects.node_bindings("n0"), BOUND, expected_last_subject_seq=fence,
                                 expected_subject=subjects.claim_fence("c1"))
            fence = await log.last_subject_seq(subjects.claim_fence("c1"))
        stored = await log.append(subjects.node_bindings("n0"), BOUND, expected_last_subject_seq=fence,
                                  expected_subject=subjects.claim_fence("c1"))
        assert stored.seq > fence
    finally:
        await nc.close()


async def test_the_fold_counts_what_the_server_counts_over_the_wildcard():
    """Claim `x` and node `x` share `gpu.evt.*.x`: a heartbeat of the node moves the claim's fence."""
    log, fences = InMemoryEventLog(), ClaimFences()
    entries = [
        (subjects.claim("x"), ev.ClaimSubmitted(claim=ClaimSpec(claim_id="x", namespace="ns"), at=1.0)),
        (subjects.node("x"), ev.NodeHeartbeat(node="x", at=2.0)),
        (subjects.node("y"), ev.NodeHeartbeat(node="y", at=2.0)),
        (subjects.ending("x"), ev.ClaimEnding(claim_id="x", decision="ClaimEvicted", fence=0, at=3.0)),
        (subjects.DECISIONS, ev.DecisionBatch(decisions=[], at=4.0)),
        (subjects.claim("x"), ev.LeaseRenewed(claim_id="x", at=5.0)),
    ]
    for subject, event in entries:
        seq = (await log.append(subject, event)).seq
        fences.heard(seq, subject, event)
        if subject != subjects.DECISIONS and "x" not in fences.ending:
            assert fences.fence_of("x") == await log.last_subject_seq(subjects.claim_fence("x")), subject
    assert fences.fence_of("x") == 6 and fences.ending == {}


def test_a_record_is_rewritten_when_an_unbound_claim_s_fence_moves_and_not_for_a_binding():
    """A renewal after the record refuses the binding; the next record must carry the renewal's
    fence (so the writer may not skip it as unchanged), while a binding alone rewrites nothing."""
    from schemas.grants import LiveClaim, NodeGrants

    def record(fence: int, bound: bool = False) -> NodeGrants:
        return NodeGrants(node="n0", through_seq=9, claims=[LiveClaim(claim_id="c1", namespace="ns", fence=fence,
                                                                      bound=bound)])

    assert record(5).same_claims(record(5))
    assert not record(7).same_claims(record(5))  # renewed: the agent needs fence 7
    assert record(0, bound=True).same_claims(record(5))  # bound since: nothing to rewrite
