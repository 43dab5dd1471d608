"""The fence a node's bindings are appended on (`gpu.evt.fence.<node>.*`,
services/allocator/claim_fences.py): nats-server takes the wildcard in
`Nats-Expected-Last-Subject-Sequence-Subject` on an R3 cluster as on one server, so a release or an
ending mark on the node after the record refuses the bindings there too; and the allocator's fold
counts what the server counts over the wildcard (and nothing else: another node's, a node named
like a prefix, the claim's own subject), so its records carry the fence the server will check."""

from __future__ import annotations

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from services.allocator.claim_fences import ClaimFences
from shared.eventlog import AppendConflict, InMemoryEventLog
from shared.jetstream import JetStreamEventLog, connect, ensure_streams
from shared.retry import until_done

BOUND = ev.EventBatch(events=[ev.ClaimBound(claim_id=c, node="n0", env={}, at=3.0) for c in ("c1", "c2")], at=3.0)
MARK = ev.ClaimEnding(claim_id="c1", decision="ClaimEvicted", fence=0, node="n0", at=2.0)


@pytest.mark.timeout(120)
async def test_the_node_fence_holds_on_a_three_server_cluster(nats_cluster):
    nc = await connect(nats_cluster.url)
    try:
        js = nc.jetstream()
        await until_done(lambda: ensure_streams(js, replicas=3), "create the streams")
        log = JetStreamEventLog(nc)
        fence = (await log.append(subjects.node_releases("n0"), ev.ClaimReleased(claim_id="c0", at=1.0))).seq
        for subject, event in ((subjects.node_endings("n0"), MARK),
                               (subjects.node_releases("n0"), ev.ClaimReleased(claim_id="c3", at=2.0))):
            await log.append(subject, event)
            with pytest.raises(AppendConflict):
                await log.append(subjects.node_bindings("n0"), BOUND, expected_last_subject_seq=fence,
                                 expected_subject=subjects.node_fence("n0"))
            fence = await log.last_subject_seq(subjects.node_fence("n0"))
        await log.append(subjects.node_releases("n01"), ev.ClaimReleased(claim_id="c4", at=2.0))  # another node
        await log.append(subjects.claim("c1"), ev.LeaseRenewed(claim_id="c1", at=2.0))  # the claim's own
        stored = await log.append(subjects.node_bindings("n0"), BOUND, expected_last_subject_seq=fence,
                                  expected_subject=subjects.node_fence("n0"))
        assert stored.seq > fence
    finally:
        await nc.close()


async def test_the_fold_counts_what_the_server_counts_over_the_wildcard():
    log, fences = InMemoryEventLog(), ClaimFences()
    fences.resolved("x", 0, 0, folded_seq=0, decided_seq=0)  # looked up: nothing there yet
    entries = [
        (subjects.claim("x"), ev.ClaimSubmitted(claim=ClaimSpec(claim_id="x", namespace="ns"), at=1.0)),
        (subjects.node("x"), ev.NodeHeartbeat(node="x", at=2.0)),
        (subjects.node_releases("x"), ev.ClaimReleased(claim_id="a", at=2.0)),
        (subjects.node_releases("xy"), ev.ClaimReleased(claim_id="b", at=2.0)),
        (subjects.node_bindings("x"), ev.ClaimBound(claim_id="c", node="x", env={}, at=2.0)),
        (subjects.node_endings("x"), ev.ClaimEnding(claim_id="c", decision="ClaimEvicted", fence=0, node="x", at=3.0)),
        (subjects.DECISIONS, ev.DecisionBatch(decisions=[], at=4.0)),
        (subjects.claim("x"), ev.LeaseRenewed(claim_id="x", at=5.0)),
    ]
    for subject, event in entries:
        seq = (await log.append(subject, event)).seq
        fences.heard(seq, subject, event)
        assert fences.fence_of("x") == await log.last_subject_seq(subjects.node_fence("x")), subject
    assert fences.fence_of("x") == 6 and fences.ending == {}


def test_an_unknown_node_is_asked_for_once_needed_and_a_late_answer_is_not_believed():
    fences = ClaimFences()
    assert fences.fence_of("n0", needed=False) is None and fences.unknown == {}
    assert fences.fence_of("n0") is None and list(fences.unknown) == ["n0"]
    assert not fences.resolved("n0", 12, 0, folded_seq=10, decided_seq=5)  # the fold has not read it
    assert fences.resolved("n0", 9, 0, folded_seq=10, decided_seq=5)
    assert fences.fence_of("n0") == 9 and fences.unknown == {}


def test_a_mark_found_after_the_last_decision_holds_the_node_until_the_next_batch():
    fences = ClaimFences()
    assert fences.resolved("n0", 9, 9, folded_seq=10, decided_seq=7)
    assert fences.fence_of("n0") is None  # the mark may be unsettled
    assert fences.heard(11, subjects.DECISIONS, ev.DecisionBatch(decisions=[], at=1.0)) == ["n0"]
    assert fences.fence_of("n0") == 9


def test_a_record_is_rewritten_when_the_node_fence_moves_and_not_for_a_binding():
    """A release on the node after the record refuses its bindings; the next record must carry
    the new fence (so the writer may not skip it as unchanged), while a binding alone rewrites
    nothing."""
    from schemas.grants import LiveClaim, NodeGrants

    def record(fence: int, bound: bool = False) -> NodeGrants:
        return NodeGrants(node="n0", through_seq=9, fence=fence,
                          claims=[LiveClaim(claim_id="c1", namespace="ns", bound=bound)])

    assert record(5).same_claims(record(5))
    assert not record(7).same_claims(record(5))  # released another claim there: the agent needs 7
    assert record(5, bound=True).same_claims(record(5))  # bound since: nothing to rewrite


def test_a_node_heard_live_is_known_once_a_decision_batch_was_heard_too():
    """Under churn a look-up is seldom believed (the node's last message is past the fold when
    the server answers); a message heard live is the last as of the fold, and the first decision
    batch heard live settles any mark stored before the allocator went live."""
    fences = ClaimFences()
    fences.heard(5, subjects.node_releases("n0"), ev.ClaimReleased(claim_id="a", at=1.0))
    assert fences.fence_of("n0") is None and list(fences.unknown) == ["n0"]
    fences.heard(6, subjects.DECISIONS, ev.DecisionBatch(decisions=[], at=1.0))
    assert fences.fence_of("n0") == 5
    assert fences.fence_of("n1") is None  # never heard: asked for
