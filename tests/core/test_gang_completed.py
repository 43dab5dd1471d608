"""A gang completed by a member that arrives later is decided in the pass that follows the
arrival, not at the next timer pass: the allocator's waiting index passed the gang's bucket over
while nothing new in the fleet could help it, and its new member sat behind the failed ones."""

from __future__ import annotations

from schemas import events as ev
from tests.fleet import Ledger, claim, h100_node
from tests.queue_scale.test_waiting_index import Allocator, _allocated


def test_the_pass_after_the_last_member_arrives_places_the_gang():
    ledger = Ledger()
    ledger.append(h100_node("h0"), h100_node("h1"))
    allocator = Allocator(ledger)
    ledger.append(*[claim(f"g{m}", gang_id="job", gang_size=3, gpus=4, models=["H100"], at=1.0) for m in range(2)])
    [first, second] = allocator.decide(1.0)
    assert first.reasons[0].code == second.reasons[0].code == "gang-incomplete"
    assert allocator.decide(1.5) == []  # nothing new: the gang is passed over
    ledger.append(claim("g2", gang_id="job", gang_size=3, gpus=4, models=["H100"], at=2.0))
    decisions = allocator.decide(2.0)  # an event-driven pass, not the tick
    assert _allocated(decisions) == ["g0", "g1", "g2"]
    assert all(isinstance(d, ev.ClaimAllocated) for d in decisions)
