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


def _behind_a_flood(*ahead) -> Allocator:
    """One H100 node with 4 cards taken by claims of priority 0 (of namespace `high`: priority
    preempts within a namespace only), its A100 card taken by a claim of priority 9; then 600
    claims of priority 5 that wait on that card (more than a pass tells), `ahead` (priority 5,
    behind the flood) and `low` (priority 0, one H100: it fits free room)."""
    ledger = Ledger()
    ledger.append(h100_node("h0"), a100_mig_node("a0"))
    ledger.append(*[claim(f"old-{i}", namespace="high", gpus=1, models=["H100"]) for i in range(4)],
                  claim("top", namespace="top", gpus=1, models=["A100"], priority=9))
    allocator = Allocator(ledger)
    assert len(_allocated(allocator.decide(1.0))) == 5
    ledger.append(*[claim(f"q-{i}", namespace="flood", gpus=1, models=["A100"], priority=5, at=2.0)
                    for i in range(600)])
    ledger.append(*ahead, claim("low", namespace="other", gpus=1, models=["H100"], at=2.0))
    return allocator


def test_past_the_budget_a_claim_evicts_as_the_walk_would_before_a_lower_priority_one_takes_its_room():
    allocator = _behind_a_flood(claim("high", namespace="high", gpus=8, models=["H100"], priority=5, at=2.0))
    first = allocator.decide(2.0)
    assert len([d for d in first if isinstance(d, ev.ClaimPending)]) == 512  # the budget was spent
    assert _allocated(first) == ["high"]  # not `low` into the room `high` evicts for
    assert sorted(d.claim_id for d in first if isinstance(d, ev.ClaimEvicted)) == [f"old-{i}" for i in range(4)]
    assert not any(d.claim_id == "low" for d in first)  # not told why it waits either: the next pass does
    assert "low" not in _allocated(allocator.decide(2.0))


def test_past_the_budget_a_gang_is_placed_before_a_lower_priority_claim_takes_its_room():
    allocator = _behind_a_flood(*[claim(f"g-{m}", namespace="high", gang_id="g", gang_size=2, gpus=2,
                                        models=["H100"], priority=5, at=2.0) for m in range(2)])
    assert _allocated(allocator.decide(2.0)) == ["g-0", "g-1"]  # 4 cards free: the gang's, not `low`'s


def test_past_the_budget_a_gang_that_cannot_be_placed_is_not_told_why_until_the_next_pass():
    allocator = _behind_a_flood(*[claim(f"g-{m}", namespace="high", gang_id="g", gang_size=2, gpus=4,
                                        models=["H100"], priority=5, at=2.0) for m in range(2)])
    first = allocator.decide(2.0)
    assert _allocated(first) == ["low"]  # the gang cannot be placed (gangs evict nothing)
    assert not any(d.claim_id.startswith("g-") for d in first)
    while not allocator.ledger.state.claims["g-0"].reasons:
        allocator.decide(2.0)
    assert allocator.ledger.state.claims["g-0"].reasons[0].code == "gang-unplaceable"
