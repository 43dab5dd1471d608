"""Cohort trees of any depth: borrowing up the tree, borrowing and lending limits, reclaim that
walks the tree nearest cohort first, fair sharing among siblings. Each through decide and evolve."""

from __future__ import annotations

import pytest

from schemas import events as ev

from tests.quota.builders import add, claim, fleet, node, of_type, quota, step

UNLIMITED = "unlimited"


def allocated(decisions) -> list[str]:
    return [d.claim_id for d in of_type(decisions, ev.ClaimAllocated)]


def org_tree(**team_x):
    """org (400Gi) -> team-x (no total of its own) -> team-a (80Gi), team-b (80Gi); org -> team-y
    (160Gi). org keeps 80Gi unassigned. Two nodes of 8 x H100 (80Gi each)."""
    return fleet(node("n1", 8), node("n2", 8),
                 quota("org", requests_vram="400Gi"),
                 quota("team-x", parent="org", borrowing_limit_vram=team_x.get("borrow", UNLIMITED)),
                 quota("team-a", requests_vram="80Gi", parent="team-x", borrowing_limit_vram=UNLIMITED),
                 quota("team-b", requests_vram="80Gi", parent="team-x", borrowing_limit_vram=UNLIMITED),
                 quota("team-y", requests_vram="160Gi", parent="org", borrowing_limit_vram=UNLIMITED))


def test_a_namespace_borrows_from_its_sibling_first_then_up_the_tree_and_stops_at_the_root():
    state = org_tree()
    add(state, *(claim(f"a{i}", at=2.0 + i) for i in range(6)))
    decisions = step(state)
    assert allocated(decisions) == ["a0", "a1", "a2", "a3", "a4"]  # 80 own + 80 of b + 240 through org
    loans = {loan.claim_id: loan for loan in of_type(decisions, ev.QuotaBorrowed)}
    assert (loans["a1"].parent, loans["a1"].through, loans["a1"].lenders) == ("team-x", ["team-a"], ["team-b"])
    assert loans["a2"].through == ["team-a", "team-x"]
    assert loans["a2"].lenders == ["team-b", "team-y", "org"]  # org for the 80Gi it kept unassigned
    [pending] = of_type(decisions, ev.ClaimPending)
    assert pending.reasons[0].message == ("quota exceeded in namespace team-a for vram: requested 80Gi, "
                                          "limit 400Gi, in use 400Gi across parent org")


def test_a_cohort_borrowing_limit_caps_what_its_whole_subtree_borrows():
    state = org_tree(borrow="80Gi")
    add(state, *(claim(f"a{i}", at=2.0 + i) for i in range(4)))
    decisions = step(state)
    assert allocated(decisions) == ["a0", "a1", "a2"]  # team-x: 160Gi own + 80Gi from org
    message = of_type(decisions, ev.ClaimPending)[0].reasons[0].message
    assert message == ("quota exceeded in namespace team-a for vram: requested 80Gi, limit 160Gi, "
                       "in use 240Gi across parent team-x, borrowing limit 80Gi from org")


def test_reclaim_takes_back_from_the_nearest_borrower_first():
    state = org_tree()
    add(state, *(claim(f"a{i}", at=2.0 + i) for i in range(5)))
    assert len(allocated(step(state))) == 5  # team-a holds 400Gi, all of org
    add(state, claim("y1", namespace="team-y", at=10.0))
    decisions = step(state, now=11.0)
    [back] = of_type(decisions, ev.QuotaReclaimed)
    assert (back.claim_id, back.borrower, back.lender, back.parent, back.rule) == \
        ("a4", "team-a", "team-y", "org", "nominal")
    assert allocated(decisions) == ["y1"]
    add(state, claim("b1", namespace="team-b", at=20.0))  # team-b's own 80Gi, lent to its sibling
    decisions = step(state, now=21.0)
    [back] = of_type(decisions, ev.QuotaReclaimed)
    assert (back.claim_id, back.parent) == ("a3", "team-x")  # given back inside team-x, nearest
    assert allocated(decisions) == ["b1"]
    assert state.claims["y1"].holds_devices


def test_a_namespace_within_its_own_quota_is_never_a_victim():
    state = org_tree()
    add(state, quota("team-a", requests_vram="240Gi", parent="team-x"))  # room for three, own
    add(state, *(claim(f"a{i}", at=2.0 + i) for i in range(3)),
        claim("b0", namespace="team-b", priority=-5, at=6.0))
    assert len(allocated(step(state))) == 4
    add(state, quota("team-a", requests_vram="80Gi", parent="team-x"))  # lowered: now 160Gi over
    add(state, *(claim(f"y{i}", namespace="team-y", at=10.0 + i) for i in range(2)))
    decisions = step(state, now=20.0)
    evicted = [e.claim_id for e in of_type(decisions, ev.ClaimEvicted)]
    assert evicted == ["a2"]  # not b0, the lowest priority: team-b is within its own 80Gi
    assert allocated(decisions) == ["y0", "y1"] and state.claims["b0"].holds_devices


def test_a_lending_limit_keeps_part_of_the_quota_for_its_owner():
    state = fleet(node("n1", 8),
                  quota("team-a", requests_vram="80Gi", parent="team-x", borrowing_limit_vram=UNLIMITED),
                  quota("team-b", requests_vram="80Gi", parent="team-x", lending_limit_vram="40Gi"))
    add(state, *(claim(f"a{i}", gpu_memory_gib=40, at=2.0 + i) for i in range(4)))
    decisions = step(state)
    assert allocated(decisions) == ["a0", "a1", "a2"]  # 80Gi own + the 40Gi team-b lends
    message = of_type(decisions, ev.ClaimPending)[0].reasons[0].message
    assert message.endswith("in use 120Gi across parent team-x, 40Gi held back for others by lending limits")
    add(state, claim("b0", namespace="team-b", gpu_memory_gib=40, at=10.0))
    decisions = step(state, now=11.0)
    assert allocated(decisions) == ["b0"] and not of_type(decisions, ev.ClaimEvicted)


@pytest.mark.parametrize("gpus, borrow", [(1, "0Gi"), (2, "80Gi")])
def test_what_a_lending_limit_keeps_counts_against_the_cohorts_borrowing_limit(gpus, borrow):
    """org -> team-x (may borrow `borrow` from org) -> team-a (no quota of its own, may borrow
    160Gi), team-b (80Gi, lends none). team-x's 80Gi are all team-b's to keep, so team-a
    can only take what team-x may borrow from org: never team-b's guarantee (found by Hypothesis
    in tests/quota/test_tree_invariants.py; before, the held-back part was left out of what the
    cohort borrows, whether or not the claim fit its capacity without it)."""
    state = fleet(node("n1", 8), node("n2", 8),
                  quota("org", requests_vram="400Gi"),
                  quota("team-x", parent="org", borrowing_limit_vram=borrow),
                  quota("team-a", requests_vram="0Gi", parent="team-x", borrowing_limit_vram="160Gi"),
                  quota("team-b", requests_vram="80Gi", parent="team-x", borrowing_limit_vram="0Gi",
                        lending_limit_vram="0Gi"))
    add(state, claim("a0", gpus=gpus))
    decisions = step(state)
    assert allocated(decisions) == []
    assert "across parent team-x" in of_type(decisions, ev.ClaimPending)[0].reasons[0].message
    add(state, claim("b0", namespace="team-b", gpus=1, at=10.0))
    assert allocated(step(state, now=11.0)) == ["b0"]


def siblings(c_vram="160Gi", **weights):
    """team-a, team-b (80Gi each, unlimited borrowing) and team-c under team-x (their sum)."""
    return fleet(node("n1", 8),
                 quota("team-a", requests_vram="80Gi", parent="team-x", borrowing_limit_vram=UNLIMITED,
                       fair_sharing_weight=weights.get("a", 1.0)),
                 quota("team-b", requests_vram="80Gi", parent="team-x", borrowing_limit_vram=UNLIMITED,
                       fair_sharing_weight=weights.get("b", 1.0)),
                 quota("team-c", requests_vram=c_vram, parent="team-x"))


def test_fair_sharing_tries_the_namespace_that_borrows_least_first():
    state = siblings()
    add(state, claim("a0"), claim("a1", at=2.1), claim("b0", namespace="team-b", at=2.2))
    assert allocated(step(state)) == ["a0", "a1", "b0"]  # team-a borrows 80Gi, team-b nothing
    add(state, claim("a2", at=3.0), claim("b1", namespace="team-b", at=3.1))  # room for one more
    decisions = step(state, now=4.0)
    assert allocated(decisions) == ["b1"]  # younger, but its namespace borrows less
    assert of_type(decisions, ev.ClaimPending)[0].claim_id == "a2"


def test_fair_sharing_preempts_the_larger_borrower_and_then_holds_still():
    state = siblings()
    add(state, *(claim(f"a{i}", at=2.0 + i * 0.1) for i in range(3)), claim("b0", namespace="team-b", at=3.0))
    assert len(allocated(step(state))) == 4  # team-a borrows 160Gi (half of team-x), team-b none
    add(state, claim("b1", namespace="team-b", at=5.0))  # team-b would borrow 80Gi: a quarter
    decisions = step(state, now=6.0)
    [evicted] = of_type(decisions, ev.ClaimEvicted)
    assert (evicted.claim_id, evicted.rule, evicted.beneficiary) == ("a2", "fair-share", "b1")
    assert of_type(decisions, ev.QuotaReclaimed)[0].rule == "fair-share"
    assert allocated(decisions) == ["b1"]
    add(state, claim("a3", at=7.0))  # team-a at a quarter again would reach a half: no preemption
    decisions = step(state, now=8.0)
    assert not of_type(decisions, ev.ClaimEvicted) and not allocated(decisions)


@pytest.mark.parametrize("weight, preempts", [(1.0, False), (2.0, True)])
def test_a_larger_weight_earns_a_larger_share(weight, preempts):
    state = siblings(c_vram="320Gi", b=weight)  # team-x: 480Gi
    add(state, *(claim(f"a{i}", at=2.0 + i * 0.1) for i in range(3)),
        *(claim(f"b{i}", namespace="team-b", at=3.0 + i * 0.1) for i in range(2)),
        claim("c0", namespace="team-c", at=4.0))
    assert len(allocated(step(state))) == 6  # full: team-a borrows 160Gi (1/3), team-b 80Gi (1/6)
    add(state, claim("b2", namespace="team-b", at=5.0))  # team-b would borrow 160Gi: 1/3, or 1/6 at weight 2
    decisions = step(state, now=6.0)
    assert [e.claim_id for e in of_type(decisions, ev.ClaimEvicted)] == (["a2"] if preempts else [])
    assert allocated(decisions) == (["b2"] if preempts else [])
