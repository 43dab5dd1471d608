"""Priority is the publisher's word: it orders and preempts within the claim's namespace only,
unless an admin sets `preempt_other_namespaces` in the namespace's quota
(services/allocator/core/priority_scope.py)."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import QuotaSpec
from services.allocator.core.priority_scope import queue_slots
from services.allocator.core.queue import queue_order
from tests.fleet import Ledger, claim, h100_node


def _kinds(decisions) -> list[tuple[str, str]]:
    return [(type(d).__name__, d.claim_id) for d in decisions]


def _full_of(namespace: str) -> Ledger:
    """Two H100 nodes, every card held by a priority-0 claim of `namespace`."""
    ledger = Ledger()
    ledger.append(h100_node("h0"), h100_node("h1"))
    ledger.append(*[claim(f"{namespace}-{i}", namespace=namespace, gpus=8, models=["H100"]) for i in range(2)])
    ledger.decide(1.0)
    return ledger


def test_a_high_priority_claim_does_not_evict_another_namespace():
    ledger = _full_of("team-a")
    ledger.append(claim("urgent", namespace="team-b", gpus=8, models=["H100"], priority=1000, at=2.0))
    decisions = ledger.decide(2.0)
    assert _kinds(decisions) == [("ClaimPending", "urgent")]
    assert {c.status for c in ledger.state.claims.values() if c.spec.namespace == "team-a"} == {"allocated"}


def test_a_high_priority_claim_evicts_its_own_namespace_lower_priority_claims():
    ledger = _full_of("team-b")
    ledger.append(claim("urgent", namespace="team-b", gpus=8, models=["H100"], priority=1000, at=2.0))
    decisions = ledger.decide(2.0)
    [evicted] = [d for d in decisions if isinstance(d, ev.ClaimEvicted)]
    assert (evicted.rule, evicted.beneficiary, evicted.detail) == ("priority", "urgent", "priority 0 < 1000")
    assert ledger.state.claims["urgent"].status == "allocated"


def test_an_admin_lets_a_namespace_preempt_across_namespaces_in_its_quota():
    ledger = _full_of("team-a")
    ledger.append(ev.QuotaSet(namespace="team-b", spec=QuotaSpec(preempt_other_namespaces=True), at=1.5))
    ledger.append(claim("urgent", namespace="team-b", gpus=8, models=["H100"], priority=1000, at=2.0))
    decisions = ledger.decide(2.0)
    [evicted] = [d for d in decisions if isinstance(d, ev.ClaimEvicted)]
    assert evicted.rule == "priority" and evicted.claim_id.startswith("team-a-")
    assert "may preempt across namespaces" in evicted.detail
    assert ledger.state.claims["urgent"].status == "allocated"


def test_stale_allocations_of_another_namespace_are_still_evicted():
    ledger = _full_of("team-a")
    ledger.append(claim("new", namespace="team-b", gpus=8, models=["H100"], priority=-5, at=1000.0))
    decisions = ledger.decide(1000.0, stale_after_s=600, check_timers=True, node_timeout_s=1e9)
    evicted = [(d.rule, d.beneficiary) for d in decisions if isinstance(d, ev.ClaimEvicted)]
    assert evicted == [("stale", "new")]  # a rule of its own, whatever the priorities say


def test_the_queue_orders_namespaces_by_age_and_each_namespace_by_its_priority():
    ledger = Ledger()
    ledger.append(h100_node("h0", gpus=8))
    ledger.append(claim("a-old", namespace="team-a", gpus=9, at=0.0),  # 9 GPUs: never placed
                  claim("b-old", namespace="team-b", gpus=9, at=1.0),
                  claim("a-mid", namespace="team-a", gpus=9, at=2.0),
                  claim("b-urgent", namespace="team-b", gpus=9, priority=1000, at=3.0),
                  claim("a-new", namespace="team-a", gpus=9, priority=5, at=4.0))
    # team-b's urgent claim takes team-b's oldest place (before b-old), never team-a's
    assert [c.claim_id for c in queue_order(ledger.state)] == ["a-new", "b-urgent", "a-old", "b-old", "a-mid"]


def test_a_later_high_priority_claim_of_another_namespace_does_not_go_first():
    ledger = Ledger()
    ledger.append(h100_node("h0"))
    ledger.append(claim("fill", namespace="team-a", gpus=8, models=["H100"], at=0.0))
    ledger.decide(0.5)
    ledger.append(claim("a-waits", namespace="team-a", gpus=8, models=["H100"], at=1.0),
                  claim("b-jumps", namespace="team-b", gpus=8, models=["H100"], priority=1000, at=2.0))
    ledger.decide(2.5)
    ledger.append(ev.ClaimReleased(claim_id="fill", at=3.0))
    decisions = ledger.decide(3.0)
    assert [d.claim_id for d in decisions if isinstance(d, ev.ClaimAllocated)] == ["a-waits"]


def test_a_node_held_for_another_namespace_starving_claim_stays_held_whatever_the_priority():
    ledger = Ledger()
    ledger.append(h100_node("h0"), h100_node("h1"))
    ledger.append(claim("fill", namespace="team-a", gpus=8, models=["H100"], at=0.0),
                  claim("fill2", namespace="team-a", gpus=5, models=["H100"], at=0.0))
    ledger.decide(1.0)
    ledger.append(claim("big", namespace="team-a", gpus=8, models=["H100"], at=2.0))
    ledger.decide(3.0)
    ledger.append(claim("other", namespace="team-b", gpus=1, models=["H100"], priority=1000, at=500.0))
    decisions = ledger.decide(1000.0, starvation_after_s=300, evict=False)
    assert not [d for d in decisions if isinstance(d, ev.ClaimAllocated)]
    [pending] = [d for d in decisions if isinstance(d, ev.ClaimPending)]
    assert pending.claim_id == "other" and "held for an older waiting claim" in pending.reasons[0].message


def test_queue_slots_hand_a_namespace_its_own_places_in_priority_order():
    entries = [("a", 0, 1, "a1"), ("b", 0, 2, "b1"), ("a", 9, 3, "a2"), ("b", 0, 4, "b2"), ("a", 5, 5, "a3")]
    assert queue_slots(entries) == {"a2": 1, "a3": 3, "a1": 5}  # b has one priority: its ages stand


def test_claim_explain_says_how_far_a_priority_reaches():
    from ledger.cohorts import quota_of
    from services.claim.views import explain_view

    ledger = _full_of("team-a")
    ledger.append(ev.QuotaSet(namespace="team-b", spec=QuotaSpec(preempt_other_namespaces=True), at=1.5))
    state = ledger.state
    own = explain_view(state.claims["team-a-0"], state.units, quota_of(state, "team-a"))
    assert own["priority_scope"] == "orders and preempts within namespace team-a only"
    ledger.append(claim("b", namespace="team-b", gpus=1, at=2.0))
    trusted = explain_view(state.claims["b"], state.units, quota_of(state, "team-b"))
    assert "across namespaces" in trusted["priority_scope"]
