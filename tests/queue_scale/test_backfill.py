"""A claim that fits free hardware is not held back by a flood of claims ahead of it: past the
pass's decision budget (spent telling each new claim of the flood why it waits) the walk goes on
placing what fits, and the claims it did not tell are told in the next pass."""

from __future__ import annotations

from schemas import events as ev
from tests.fleet import Ledger, a100_mig_node, claim, h100_node
from tests.queue_scale.test_waiting_index import Allocator, _allocated


def _flooded(count: int) -> Allocator:
    ledger = Ledger()
    ledger.append(*[h100_node(f"h{i}") for i in range(2)], a100_mig_node("a0"))
    ledger.append(*[claim(f"run-{i}", namespace="flood", gpus=8, models=["H100"]) for i in range(2)])
    allocator = Allocator(ledger)
    allocator.decide(1.0)
    ledger.append(*[claim(f"q-{i}", namespace="flood", gpus=1, models=["H100"], at=2.0) for i in range(count)])
    ledger.append(claim("mig", namespace="other", gpus=1, mig_profile="1g.10gb", at=2.0))
    return allocator


def test_a_claim_behind_more_new_claims_than_a_pass_decides_is_placed_in_the_first_pass():
    allocator = _flooded(3000)
    first = allocator.decide(2.0)
    assert _allocated(first) == ["mig"]
    told = [d.claim_id for d in first if isinstance(d, ev.ClaimPending)]
    assert told == [f"q-{i}" for i in range(512)]  # the budget: the rest are told in later passes
    while any(not allocator.ledger.state.claims[c].reasons for c in allocator.ledger.state.pending):
        assert not _allocated(allocator.decide(2.0))
    assert all(allocator.ledger.state.claims[f"q-{i}"].reasons for i in range(3000))


def test_without_the_backfill_it_waits_for_the_flood_to_be_told():
    allocator = _flooded(3000)
    passes = 1
    while "mig" not in _allocated(allocator.decide(2.0, backfill_past_budget=False)):
        passes += 1
    assert passes == 6  # 3,000 claims told 512 a pass first
