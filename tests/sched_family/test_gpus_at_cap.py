"""Session 34's leftover: `gpuledger gpus` (the claim service's `gpus.availability`) counted the idle
cards of a node at or over its cap of live claims as free, though no claim can get them (the node
takes none until it is under its cap). They are now `free_at_cap`, with the nodes counted, and the
table says so."""

from __future__ import annotations

from schemas import events as ev
from schemas.gpu_types import Option, load_gpu_types
from ledger import node_claims
from services.claim.availability import availability
from gpuledger_cli.gpus import _in_fleet, _row
from tests.fleet import Ledger, claim, h100_node

CAP = node_claims.LABEL


def _on_a(count: int, ledger: Ledger) -> None:
    ledger.append(*[claim(f"c{i}", gpus=1, models=["H100"], node_selector={"name": "a"}) for i in range(count)])
    assert len([d for d in ledger.decide(1.0) if isinstance(d, ev.ClaimAllocated)]) == count


def _shown(row: dict) -> str:
    h100 = next(t for t in load_gpu_types().gpu_types if t.model == "H100")
    return _in_fleet(_row(Option(h100, 1, 1.0), {"H100": row}, "on-demand")["fleet"])


def test_idle_cards_of_a_node_at_its_cap_are_not_free():
    ledger = Ledger()
    ledger.append(h100_node("a", labels={CAP: "2", "name": "a"}), h100_node("b", labels={"name": "b"}))
    _on_a(2, ledger)
    row = availability(ledger.state)["H100"]
    assert (row["cards"], row["free"], row["healthy"]) == (16, 8, 16)  # b's 8; a's 6 idle cannot be had
    assert (row["free_at_cap"], row["nodes_at_cap"], row["nodes_over_cap"]) == (6, 1, 0)
    assert _shown(row) == "8 / 16, 1 node(s) at their cap of claims, 6 idle there"


def test_a_node_over_its_cap_is_counted_and_shown():
    ledger = Ledger()
    ledger.append(h100_node("a", labels={"name": "a"}), h100_node("b", labels={CAP: "190", "name": "b"}))
    _on_a(4, ledger)
    assert availability(ledger.state)["H100"]["free"] == 12
    ledger.append(ev.FleetDefaultsSet(max_claims_per_node=2, at=2.0))  # a: 2 now, holding 4; b keeps its label
    row = availability(ledger.state)["H100"]
    assert (row["free"], row["free_at_cap"], row["nodes_at_cap"], row["nodes_over_cap"]) == (8, 4, 1, 1)
    assert _shown(row) == "8 / 16, 1 node(s) at their cap of claims (1 over it), 4 idle there"
    ledger.append(ev.FleetDefaultsSet(max_claims_per_node=0, at=3.0))
    row = availability(ledger.state)["H100"]
    assert (row["free"], row["nodes_at_cap"]) == (12, 0) and _shown(row) == "12 / 16"
