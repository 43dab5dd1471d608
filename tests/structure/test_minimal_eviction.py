"""Eviction takes only what the placement needs: no victim whose removal frees nothing the claim
is short of (a CPU-only claim when CPU is not short), and the fewest victims that make room."""

from __future__ import annotations

import pytest

from schemas import events as ev
from tests.fleet import Ledger, claim, h100_node


def evicted(decisions) -> list[str]:
    return sorted(d.claim_id for d in decisions if isinstance(d, ev.ClaimEvicted))


def allocated(decisions) -> dict[str, ev.ClaimAllocated]:
    return {d.claim_id: d for d in decisions if isinstance(d, ev.ClaimAllocated)}


@pytest.fixture
def ledger() -> Ledger:
    led = Ledger()
    led.append(h100_node("h0"))
    return led


@pytest.mark.parametrize("cpu_only_priority", [0, 5])
def test_cpu_only_claims_are_not_evicted_when_cpu_is_not_short(ledger, cpu_only_priority):
    # the case: 6 of 8 GPUs free, one 2-GPU holder, CPU-only claims that block nothing
    ledger.append(claim("gpu-holder", gpus=2, models=["H100"], priority=5))
    ledger.append(*[claim(f"cpu-{i}", gpus=0, cpu_milli=1000, priority=cpu_only_priority)
                    for i in range(13)])
    ledger.decide(1.0)
    assert ledger.state.claims["cpu-12"].status == "allocated"
    ledger.append(claim("urgent", gpus=8, models=["H100"], priority=10, at=2.0))
    decisions = ledger.decide(2.0)
    assert evicted(decisions) == ["gpu-holder"]
    assert allocated(decisions)["urgent"].node == "h0"
    assert all(ledger.state.claims[f"cpu-{i}"].status == "allocated" for i in range(13))


def test_cpu_only_claims_are_evicted_when_cpu_is_what_is_short(ledger):
    ledger.append(*[claim(f"cpu-{i}", gpus=0, cpu_milli=32000) for i in range(4)])
    ledger.decide(1.0)
    ledger.append(claim("urgent", gpus=1, models=["H100"], cpu_milli=60000, priority=10, at=2.0))
    decisions = ledger.decide(2.0)
    assert len(evicted(decisions)) == 2  # 128 cores, 4 x 32 held: two make room for 60
    assert "urgent" in allocated(decisions)


def test_the_fewest_victims_that_make_room(ledger):
    # newest first among equals would take the two 1-GPU claims; the 2-GPU claim alone suffices
    ledger.append(claim("keep", gpus=4, models=["H100"], priority=20))
    ledger.append(claim("two", gpus=2, models=["H100"]))
    ledger.append(claim("one-a", gpus=1, models=["H100"]), claim("one-b", gpus=1, models=["H100"]))
    ledger.decide(1.0)
    assert not ledger.state.pending
    ledger.append(claim("urgent", gpus=2, models=["H100"], priority=10, at=2.0))
    decisions = ledger.decide(2.0)
    assert evicted(decisions) == ["two"]
    assert "urgent" in allocated(decisions)


def test_nothing_is_evicted_when_all_victims_together_do_not_make_room(ledger):
    ledger.append(claim("keep", gpus=4, models=["H100"], priority=20))
    ledger.append(claim("low", gpus=2, models=["H100"]), claim("cpu", gpus=0, cpu_milli=1000))
    ledger.decide(1.0)
    ledger.append(claim("urgent", gpus=8, models=["H100"], priority=10, at=2.0))
    decisions = ledger.decide(2.0)
    assert evicted(decisions) == []
    assert ledger.state.claims["low"].status == "allocated"
