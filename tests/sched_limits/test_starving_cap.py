"""A starving claim's reservation (core/starvation.py) respects the nodes' caps of live claims
(ledger/node_claims.py): it never holds a node whose cap is below the grants the claim takes
(the node can never take it by count), and among the rest it prefers the node with the most
room it could take now, its free units bounded by the room under its cap. Before, the hold went
to the node with the most free units: a node of cap 2 with 8 free cards was held for an 8-GPU
claim it could never take, and every claim of equal or lower priority was kept off it for ever."""

from __future__ import annotations

from schemas import events as ev
from ledger import node_claims
from tests.fleet import Ledger, claim, h100_node

CAP = node_claims.LABEL


def allocated(decisions) -> dict[str, str]:
    return {d.claim_id: d.node for d in decisions if isinstance(d, ev.ClaimAllocated)}


def _big_claim_waiting(capped_labels: dict[str, str]) -> Ledger:
    """Node `busy` (8 cards, all held) and node `capped` (8 free cards, `capped_labels`); an
    8-GPU claim `big` that waits from t=2."""
    ledger = Ledger()
    ledger.append(h100_node("busy"), h100_node("capped", labels=capped_labels))
    ledger.append(claim("fill", gpus=8, models=["H100"], at=0.0))
    ledger.append(claim("pin", gpus=0, cpu_milli=1, node_selector={"name": "capped"}, at=0.0))
    assert allocated(ledger.decide(1.0)) == {"fill": "busy", "pin": "capped"}
    ledger.append(claim("big", gpus=8, models=["H100"], at=2.0))
    assert allocated(ledger.decide(3.0)) == {}
    return ledger


def test_a_starving_claim_does_not_hold_a_node_whose_cap_can_never_take_it():
    ledger = _big_claim_waiting({"name": "capped", CAP: "2"})  # holds 1 claim; room for 1 grant more
    ledger.append(claim("small", gpus=1, models=["H100"], at=1000.0))
    assert allocated(ledger.decide(1000.0, starvation_after_s=300)) == {"small": "capped"}
    ledger.append(ev.ClaimReleased(claim_id="fill", at=1001.0),  # the node the big claim holds drains
                  claim("late", gpus=1, models=["H100"], at=1001.0))
    assert allocated(ledger.decide(1001.0, starvation_after_s=300)) == {"big": "busy"}
    assert [r.code for r in ledger.state.claims["late"].reasons][0] == "node-claims-full"


def test_a_starving_gang_counts_a_held_nodes_room_within_its_cap():
    """Members share a node held for their gang while its room takes them: that room is bounded
    by the node's cap too. `capped` (cap 5, 8 cards) takes one 4-GPU member, not two: the second
    member holds another node, and a newer small claim may not take that one's cards either."""
    ledger = Ledger()
    ledger.append(h100_node("capped", labels={"name": "capped", CAP: "5"}), h100_node("b1", labels={"name": "b1"}),
                  h100_node("b2", labels={"name": "b2"}))
    ledger.append(*[claim(f"fill-{n}", gpus=gpus, node_selector={"name": f"b{n}"}, at=0.0)
                    for n, gpus in ((1, 8), (2, 5))])
    assert set(allocated(ledger.decide(1.0))) == {"fill-1", "fill-2"}
    ledger.append(*[claim(f"g-{m}", gang_id="g", gang_size=2, gpus=4, models=["H100"], at=2.0) for m in range(2)])
    assert allocated(ledger.decide(3.0)) == {}  # one member fits `capped`, the other nowhere
    ledger.append(claim("small", gpus=1, models=["H100"], at=1000.0))
    assert allocated(ledger.decide(1000.0, starvation_after_s=300)) == {}
    assert [r.code for r in ledger.state.claims["small"].reasons][0] == "reserved"
    ledger.append(ev.ClaimReleased(claim_id="fill-2", at=1001.0))
    placed = allocated(ledger.decide(1001.0, starvation_after_s=300))
    assert sorted(placed[m] for m in ("g-0", "g-1")) == ["b2", "capped"]  # then the small one fits
