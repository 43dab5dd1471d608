"""Quota reclaim ranks its victims across the namespaces of a branch by fair share, and by priority
only within one namespace: a claim's priority is its publisher's word, and ranked across
namespaces it let a namespace make its loans unreclaimable (before session 31 the lender took
back team-b's one loan at priority 0 and left team-a's three at priority 100, though team-a
borrowed three times as much)."""

from __future__ import annotations

from schemas import events as ev
from tests.quota.builders import add, claim, fleet, node, of_type, quota, step


def _tree():
    """org: team-c (320Gi, lends) and dept, a cohort of team-a and team-b (80Gi each, both borrow)."""
    return fleet(node("n1", 8),
                 quota("team-c", requests_vram="320Gi", parent="org"),
                 quota("dept", parent="org", borrowing_limit_vram="unlimited"),
                 quota("team-a", requests_vram="80Gi", parent="dept", borrowing_limit_vram="unlimited"),
                 quota("team-b", requests_vram="80Gi", parent="dept", borrowing_limit_vram="unlimited"))


def _borrowing(state, a_priorities: list[int], b_priority: int) -> None:
    """team-b holds 2 cards (one borrowed), team-a 4 (three borrowed): dept borrows team-c's quota."""
    add(state, *(claim(f"b{i}", namespace="team-b", priority=b_priority, at=2.0 + i / 10) for i in range(2)))
    step(state)
    for i, priority in enumerate(a_priorities):  # allocated in this order
        add(state, claim(f"a{i}", namespace="team-a", priority=priority, at=3.0 + i))
        step(state, now=3.5 + i)
    assert {c.claim_id for c in state.claims.values() if c.holds_devices} == {"b0", "b1", "a0", "a1", "a2", "a3"}


def _reclaimed(state) -> list[str]:
    add(state, claim("c1", namespace="team-c", at=10.0))  # within team-c's own quota
    decisions = step(state, now=11.0)
    assert [d.claim_id for d in of_type(decisions, ev.ClaimAllocated)] == ["c1"]
    return [e.claim_id for e in of_type(decisions, ev.ClaimEvicted)]


def test_a_high_priority_does_not_shield_a_namespace_that_borrows_most():
    state = _tree()
    _borrowing(state, a_priorities=[100] * 4, b_priority=0)
    assert _reclaimed(state) == ["a3"]  # team-a's newest loan: it borrows the larger share


def test_priority_still_orders_the_claims_of_one_namespace():
    state = _tree()
    _borrowing(state, a_priorities=[0, 0, 0, 50], b_priority=0)
    assert _reclaimed(state) == ["a2"]  # team-a's newest loan but the one its priority keeps
