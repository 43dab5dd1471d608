"""A cap lowered below what a node holds evicts nothing, as a kubelet's maxPods does not: the
claims there run on, the node takes no new claim until it is under its cap, and `claim explain`
(the claim service) and `gpuledger state` show the node as over its cap, saying which setting
gave it, rather than as merely full."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import PoolSpec
from ledger import node_claims
from ledger.state import cap_use
from services.claim.views import over_cap_note
from services.projector.summary import state_summary
from tests.fleet import Ledger, claim, h100_node


def allocated(decisions) -> dict[str, str]:
    return {d.claim_id: d.node for d in decisions if isinstance(d, ev.ClaimAllocated)}


def _four_claims_then_a_cap_of_two() -> Ledger:
    ledger = Ledger()
    ledger.append(h100_node("a", labels={"name": "a"}))
    ledger.append(*[claim(f"c{i}", gpus=1, models=["H100"]) for i in range(4)])
    assert len(allocated(ledger.decide(1.0))) == 4
    ledger.append(ev.FleetDefaultsSet(max_claims_per_node=2, at=2.0))
    return ledger


def test_lowering_a_cap_below_what_a_node_holds_evicts_nothing_and_admits_nothing():
    ledger = _four_claims_then_a_cap_of_two()
    ledger.append(claim("new", gpus=1, models=["H100"], at=3.0))
    decisions = ledger.decide(3.0, check_timers=True)
    assert not [d for d in decisions if isinstance(d, (ev.ClaimEvicted, ev.ClaimAllocated))]
    assert {c.status for i, c in ledger.state.claims.items() if i != "new"} == {"allocated"}
    assert ledger.state.claims["new"].reasons[0].code == "node-claims-full"
    assert cap_use(ledger.state, ledger.state.nodes["a"]) == (4, 2)
    ledger.append(ev.ClaimReleased(claim_id="c0"), ev.ClaimReleased(claim_id="c1"))
    assert allocated(ledger.decide(4.0)) == {}  # 2 held: at its cap, not under it
    ledger.append(ev.ClaimReleased(claim_id="c2"))
    assert allocated(ledger.decide(5.0)) == {"new": "a"}


def test_claim_explain_says_the_node_is_over_its_cap_and_why():
    ledger = _four_claims_then_a_cap_of_two()
    state = ledger.state
    note = over_cap_note(state.claims["c0"], state)
    assert "node a holds 4 live claims or device grants, over its cap of 2" in note
    assert "fleet default" in note and "evicts nothing" in note
    ledger.append(claim("new", gpus=1, models=["H100"], at=3.0))
    ledger.decide(3.0)
    assert "node a holds 4" in over_cap_note(state.claims["new"], state)  # waiting on it
    ledger.append(ev.PoolCreated(pool=PoolSpec(name="p", max_claims_per_node=3)))
    assert "over its cap of 3 (its pool's max_claims_per_node)" in over_cap_note(state.claims["c0"], state)
    ledger.append(ev.PoolDeleted(pool="p"), ev.FleetDefaultsSet(max_claims_per_node=0))
    assert over_cap_note(state.claims["c0"], state) == ""  # 190 again: under it


def test_gpuledger_state_shows_each_nodes_cap_and_whether_it_is_over():
    ledger = _four_claims_then_a_cap_of_two()
    ledger.append(h100_node("b", labels={node_claims.LABEL: "9"}))
    nodes = {n["name"]: n for n in state_summary(ledger.state)["nodes"]}
    assert (nodes["a"]["claims"], nodes["a"]["max_claims"], nodes["a"]["over_cap"]) == (4, 2, True)
    assert (nodes["b"]["claims"], nodes["b"]["max_claims"], nodes["b"]["over_cap"]) == (0, 9, False)
    from gpuledger_cli.projection import _claims_of

    assert _claims_of(nodes["a"]) == "4 / 2 over cap" and _claims_of(nodes["b"]) == "0 / 9"
