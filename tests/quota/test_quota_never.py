"""A claim no quota could ever let in (even with nothing in use) is `never-satisfiable`, parked,
and let in when the quota changes; one that only waits for use to drop stays `quota-exceeded`."""

from __future__ import annotations

from schemas import events as ev
from schemas.reasons import never_satisfiable_here

from tests.quota.builders import claim, evolve, fleet, node, quota, step


def pending(decisions) -> dict[str, ev.ClaimPending]:
    return {d.claim_id: d for d in decisions if isinstance(d, ev.ClaimPending)}


def test_a_claim_above_its_namespaces_total_is_never_satisfiable_and_parked():
    state = fleet(node("n0"), quota("team-a", requests_vram="160Gi"), claim("big", gpus=4))
    why = pending(step(state))["big"]
    first = why.reasons[0]
    assert first.code == "never-satisfiable", why.reasons
    assert "even with nothing in use" in first.message and "limit 160Gi" in first.message
    assert never_satisfiable_here([r.code for r in why.reasons]) and "big" in state.parked


def test_raising_the_quota_lets_the_parked_claim_in():
    state = fleet(node("n0"), quota("team-a", requests_vram="160Gi"), claim("big", gpus=4))
    step(state)
    evolve(state, quota("team-a", requests_vram="400Gi"), 99)
    assert any(isinstance(d, ev.ClaimAllocated) and d.claim_id == "big" for d in step(state, now=11.0))


def test_a_claim_that_fits_the_total_once_use_drops_only_waits():
    state = fleet(node("n0"), quota("team-a", requests_vram="320Gi"), claim("first", gpus=3))
    step(state)
    evolve(state, claim("second", gpus=2), 50)
    why = pending(step(state, now=11.0))["second"]
    codes = [r.code for r in why.reasons]
    assert codes[0] == "quota-exceeded" and "never-satisfiable" not in codes, why.reasons
    assert "second" not in state.parked


def test_a_child_that_may_borrow_enough_from_its_cohort_only_waits_not_never():
    state = fleet(node("n0"), quota("org", requests_vram="640Gi"),
                  quota("team-a", requests_vram="160Gi", parent="org", borrowing_limit_vram="480Gi"),
                  claim("big", gpus=4))
    assert any(isinstance(d, ev.ClaimAllocated) for d in step(state))


def test_a_child_whose_borrowing_limit_can_never_cover_it_is_never_satisfiable():
    state = fleet(node("n0"), quota("org", requests_vram="640Gi"),
                  quota("team-a", requests_vram="160Gi", parent="org", borrowing_limit_vram="80Gi"),
                  claim("big", gpus=4))
    first = pending(step(state))["big"].reasons[0]
    assert first.code == "never-satisfiable" and "borrowing limit 80Gi" in first.message, first
