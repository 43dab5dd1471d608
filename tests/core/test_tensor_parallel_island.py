"""A tensor-parallel claim (the allocator picks 1, 2, 4 or 8 GPUs for a model's memory) needs
NVLink between all its GPUs: they come from one island wherever the node has an island that
large, and it waits for one rather than spanning two (session 29's outsider saw GPUs 3 and 4 of
islands 0 and 1 granted while island 1 had four free)."""

from __future__ import annotations

from schemas import events as ev
from tests.fleet import Ledger, claim, h100_node


def _node_with_taken(gpus: list[int], islands: int = 2) -> Ledger:
    ledger = Ledger()
    ledger.append(h100_node("h0", islands=islands))
    ledger.append(*[claim(f"fill-{i}", gpus=1, models=["H100"]) for i in range(8)])
    ledger.decide(1.0)  # every card taken, then the ones not in `gpus` given back
    for c in list(ledger.state.claims.values()):
        if c.grants[0].index not in gpus:
            ledger.append(ev.ClaimReleased(claim_id=c.claim_id, at=1.5))
    return ledger


def _tp(ledger: Ledger) -> list:
    ledger.append(claim("tp", gpus=0, model_memory_gib=150, models=["H100"], at=2.0))
    return ledger.decide(2.0)


def test_its_gpus_come_from_one_island_when_one_has_room():
    ledger = _node_with_taken([0, 1, 2])  # island 0: GPU 3 free; island 1: 4-7 free
    [d] = _tp(ledger)
    assert isinstance(d, ev.ClaimAllocated)
    assert sorted(g.index for g in d.grants) == [4, 5]


def test_it_waits_for_one_island_rather_than_spanning_two():
    ledger = _node_with_taken([0, 1, 2, 4, 5, 6])  # GPU 3 (island 0) and GPU 7 (island 1) free
    [d] = _tp(ledger)
    assert isinstance(d, ev.ClaimPending)
    assert d.reasons[0].code == "not-contiguous" and "tensor-parallel" in d.reasons[0].message


def test_on_a_node_without_an_island_that_large_it_spans_islands():
    ledger = _node_with_taken([0, 1, 2, 4, 5, 6], islands=8)  # one GPU per island: no wait would help
    [d] = _tp(ledger)
    assert isinstance(d, ev.ClaimAllocated) and sorted(g.index for g in d.grants) == [3, 7]
