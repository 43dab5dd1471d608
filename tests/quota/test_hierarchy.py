"""Hierarchical quotas: children borrow a cohort's unused quota up to a limit; lenders reclaim it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import events as ev

from ledger.cohorts import Subtrees
from ledger.quota import DIMS, children_of
from tests.quota.builders import add, claim, fleet, node, of_type, quota, step


def cohort(borrow_a="unlimited", parent_quota=None):
    """team-a (80Gi) and team-b (160Gi) under team-x; one node of 8 x H100 (80Gi each)."""
    events = [node("n1", 8),
              quota("team-a", requests_vram="80Gi", parent="team-x", borrowing_limit_vram=borrow_a),
              quota("team-b", requests_vram="160Gi", parent="team-x")]
    if parent_quota:
        events.insert(1, quota("team-x", requests_vram=parent_quota))
    return fleet(*events)


def allocated(decisions) -> list[str]:
    return [d.claim_id for d in of_type(decisions, ev.ClaimAllocated)]


def test_a_child_borrows_its_siblings_unused_quota_and_the_log_names_the_lender():
    state = cohort()
    add(state, claim("a1"), claim("a2", at=3.0))
    decisions = step(state)
    assert allocated(decisions) == ["a1", "a2"]
    own, borrowed = of_type(decisions, ev.ClaimAllocated)
    assert own.borrowed_from == "" and borrowed.borrowed_from == "team-x"
    [loan] = of_type(decisions, ev.QuotaBorrowed)
    assert (loan.claim_id, loan.namespace, loan.parent, loan.lenders) == ("a2", "team-a", "team-x", ["team-b"])
    assert loan.vram_mib == 80 * 1024
    assert decisions.index(loan) == decisions.index(borrowed) + 1  # same batch, right after the grant
    assert state.claims["a2"].borrowed_from == "team-x"


def test_borrowing_stops_at_the_cohort_capacity():
    state = cohort()
    add(state, *(claim(f"a{i}", at=2.0 + i) for i in range(4)))
    decisions = step(state)
    assert allocated(decisions) == ["a0", "a1", "a2"]  # 80Gi own + 160Gi of team-b's
    [pending] = of_type(decisions, ev.ClaimPending)
    assert pending.reasons[0].message == ("quota exceeded in namespace team-a for vram: requested 80Gi, "
                                          "limit 240Gi, in use 240Gi across parent team-x")


def test_borrowing_stops_at_the_borrowing_limit():
    state = cohort(borrow_a="80Gi")
    add(state, *(claim(f"a{i}", at=2.0 + i) for i in range(3)))
    decisions = step(state)
    assert allocated(decisions) == ["a0", "a1"]
    message = of_type(decisions, ev.ClaimPending)[0].reasons[0].message
    assert message == ("quota exceeded in namespace team-a for vram: requested 80Gi, limit 80Gi, in use 160Gi, "
                       "borrowing limit 80Gi from team-x")


def test_a_child_without_a_borrowing_limit_borrows_nothing():
    state = fleet(node("n1", 8), quota("team-a", requests_vram="80Gi", parent="team-x"),
                  quota("team-b", requests_vram="160Gi", parent="team-x"))
    add(state, claim("a1"), claim("a2", at=3.0))
    assert allocated(step(state)) == ["a1"]


def test_a_parent_total_caps_the_cohort_and_lends_its_unassigned_share():
    state = cohort(parent_quota="320Gi")  # 80Gi more than the children's 240Gi
    add(state, *(claim(f"a{i}", at=2.0 + i) for i in range(5)))
    decisions = step(state)
    assert allocated(decisions) == ["a0", "a1", "a2", "a3"]
    assert of_type(decisions, ev.QuotaBorrowed)[0].lenders == ["team-b", "team-x"]
    assert "limit 320Gi, in use 320Gi across parent team-x" in of_type(decisions, ev.ClaimPending)[0].reasons[0].message


def test_the_lender_reclaims_by_evicting_the_newest_borrowed_claims_only_as_far_as_needed():
    state = cohort()
    add(state, *(claim(f"a{i}", at=2.0 + i) for i in range(3)))
    assert allocated(step(state)) == ["a0", "a1", "a2"]
    add(state, claim("b1", namespace="team-b", at=10.0))
    decisions = step(state, now=11.0)
    evicted = of_type(decisions, ev.ClaimEvicted)
    assert [(e.claim_id, e.rule, e.beneficiary) for e in evicted] == [("a2", "quota-reclaim", "b1")]
    [back] = of_type(decisions, ev.QuotaReclaimed)
    assert (back.claim_id, back.borrower, back.lender, back.parent, back.beneficiary) == \
        ("a2", "team-a", "team-b", "team-x", "b1")
    assert allocated(decisions) == ["b1"]
    assert state.claims["a2"].status == "evicted" and state.claims["a1"].holds_devices


def test_a_borrower_within_its_own_quota_is_never_evicted():
    state = cohort()
    add(state, claim("a0"), claim("b0", namespace="team-b", gpus=2, at=3.0))
    assert allocated(step(state)) == ["a0", "b0"]
    add(state, claim("b1", namespace="team-b", at=10.0))  # team-b above its own 160Gi: borrowing
    decisions = step(state, now=11.0)
    assert not of_type(decisions, ev.ClaimEvicted)
    assert of_type(decisions, ev.ClaimPending)[0].claim_id == "b1"


def test_a_borrowing_claim_does_not_reclaim_from_other_borrowers():
    state = cohort()
    add(state, *(claim(f"a{i}", at=2.0 + i) for i in range(3)))
    step(state)
    add(state, claim("b1", namespace="team-b", gpus=2, at=10.0))  # needs 160Gi: only 80Gi is its own
    decisions = step(state, now=11.0)
    evicted = [e.claim_id for e in of_type(decisions, ev.ClaimEvicted)]
    assert evicted == ["a2", "a1"]  # within b's nominal 160Gi: both loans come back
    assert allocated(decisions) == ["b1"]
    add(state, claim("b2", namespace="team-b", at=20.0))  # now b itself would borrow: no reclaim
    decisions = step(state, now=21.0)
    assert not of_type(decisions, ev.ClaimEvicted)


def test_reclaim_leaves_nothing_behind_when_the_gpus_still_do_not_fit():
    state = fleet(node("n1", 3),
                  quota("team-a", requests_vram="80Gi", parent="team-x", borrowing_limit_vram="unlimited"),
                  quota("team-b", requests_vram="160Gi", parent="team-x"))
    add(state, *(claim(f"a{i}", at=2.0 + i) for i in range(3)))
    assert len(allocated(step(state))) == 3
    add(state, claim("b1", namespace="team-b", gpus=4, at=10.0))  # four GPUs: the node has three
    decisions = step(state, now=11.0)
    assert not of_type(decisions, ev.ClaimEvicted) and not of_type(decisions, ev.QuotaReclaimed)
    assert all(state.claims[f"a{i}"].holds_devices for i in range(3))


# --- invariant ---------------------------------------------------------------------------------------

NAMESPACES = ("team-a", "team-b", "team-c")
actions = st.lists(st.one_of(
    st.tuples(st.just("claim"), st.sampled_from(NAMESPACES), st.integers(1, 3), st.sampled_from([1000, 500])),
    st.tuples(st.just("release"), st.integers(0, 40)),
), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(actions=actions, parent_cap=st.sampled_from([None, "400Gi", "600Gi"]))
def test_no_namespace_or_cohort_ever_exceeds_its_quota(actions, parent_cap):
    events = [node("n1", 8), node("n2", 8),
              quota("team-a", requests_vram="160Gi", parent="team-x", borrowing_limit_vram="160Gi"),
              quota("team-b", requests_vram="240Gi", parent="team-x", borrowing_limit_vram="unlimited"),
              quota("team-c", requests_vram="80Gi", parent="team-x", max_workers=3)]
    if parent_cap:
        events.append(quota("team-x", requests_vram=parent_cap))
    state = fleet(*events)
    ids: list[str] = []
    for i, action in enumerate(actions):
        if action[0] == "claim":
            _, ns, gpus, milli = action
            ids.append(f"c{i}")
            add(state, claim(f"c{i}", namespace=ns, gpus=gpus if milli == 1000 else 1, gpu_milli=milli,
                             at=float(i)))
        elif ids:
            add(state, ev.ClaimReleased(claim_id=ids[action[1] % len(ids)], at=float(i)))
        step(state, now=float(i) + 0.5)
        _assert_within_quota(state)


def _assert_within_quota(state):
    vram = DIMS[1]
    children = children_of(state, "team-x")
    books = Subtrees(state)
    assert books.used("team-x", vram) <= books.capacity("team-x", vram)
    for ns in children:
        spec, usage = state.quotas[ns], state.usage.get(ns)
        if usage is None:
            continue
        limit = spec.borrowing_limit.vram_mib
        if limit is not None:
            assert usage.vram_mib <= spec.total.requests.vram_mib + limit
        if spec.total.max_workers is not None:
            assert usage.workers <= spec.total.max_workers
        held = sum(c.vram_mib for c in state.claims.values() if c.holds_devices and c.spec.namespace == ns)
        assert held == usage.vram_mib  # use is the fold of the allocations, nothing else
