"""A gang waiting past the starvation threshold holds nodes as its members would (seed 001's
"all pods in the gang must be schedulable together", with ANCHORS' starvation): without it a gang
of large claims waited for ever behind a flow of newer small claims, each taking the room one of
its nodes had just freed. The threshold counts from the gang's last member (before it, the gang
could not start); a member takes room of its kind on a node held for the gang, or holds the next."""

from __future__ import annotations

from schemas import events as ev
from tests.fleet import Ledger, claim, h100_node
from tests.queue_scale.test_waiting_index import Allocator, _allocated


def _gang_behind_two_half_full_nodes(members: int = 2, gpus: int = 8) -> Allocator:
    ledger = Ledger()
    ledger.append(h100_node("h0"), h100_node("h1"), h100_node("h2"))
    ledger.append(*[claim(f"run-{i}", gpus=4, models=["H100"]) for i in range(6)])  # 2 per node
    allocator = Allocator(ledger)
    assert len(_allocated(allocator.decide(1.0))) == 6
    ledger.append(*[claim(f"g-{m}", gang_id="g", gang_size=members, gpus=gpus, models=["H100"], at=2.0)
                    for m in range(members)])
    assert not _allocated(allocator.decide(2.0))
    return allocator


def test_a_starving_gang_holds_its_nodes_when_it_is_tried():
    allocator = _gang_behind_two_half_full_nodes()
    allocator.ledger.append(ev.ClaimReleased(claim_id="run-0", at=1000.0),
                            claim("small", gpus=4, models=["H100"], at=1000.0))
    assert _allocated(allocator.decide(1000.0, starvation_after_s=300)) == []  # the 4 cards freed: held
    assert "reserved" in [r.code for r in allocator.ledger.state.claims["small"].reasons]
    allocator.ledger.append(*[ev.ClaimReleased(claim_id=f"run-{i}", at=1001.0) for i in (1, 2, 3)])
    assert _allocated(allocator.decide(1001.0, starvation_after_s=300)) == ["g-0", "g-1"]


def test_a_starving_gang_passed_over_still_holds_its_nodes():
    allocator = _gang_behind_two_half_full_nodes()
    allocator.ledger.append(ev.ClaimReleased(claim_id="run-0", at=100.0))  # before it starves
    allocator.decide(100.0, starvation_after_s=300)
    allocator.ledger.append(claim("small", gpus=4, models=["H100"], at=1000.0))  # nothing new for the gang
    assert _allocated(allocator.decide(1000.0, starvation_after_s=300)) == []


def test_members_share_a_held_node_while_its_room_takes_them():
    allocator = _gang_behind_two_half_full_nodes(members=4, gpus=4)  # 16 cards: two nodes of 8, not four
    nodes = {c.node for c in allocator.ledger.state.claims.values() if c.claim_id.startswith("run-")}
    assert len(nodes) == 3
    allocator.ledger.append(*[ev.ClaimReleased(claim_id=f"run-{i}", at=1000.0) for i in (0, 2, 4)],  # 4 free on each
                            claim("small", gpus=4, models=["H100"], at=1000.0))
    assert _allocated(allocator.decide(1000.0, starvation_after_s=300)) == ["small"]  # on the third node
