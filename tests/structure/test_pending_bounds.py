"""Pending is bounded: claims no node of the fleet could take are parked until the fleet changes
(no pass visits them), a claim pending past the limit ends with a reason, and the allocator's
per-claim bookkeeping does not outlive the claims."""

from __future__ import annotations

import pytest

from schemas import events as ev
from services.allocator.core.decide import DecideContext, decide, queue_order
from services.allocator.core.waiting import WaitingIndex
from ledger.snapshot import from_snapshot, to_snapshot
from tests.fleet import Ledger, claim, h100_node


@pytest.fixture
def ledger() -> Ledger:
    led = Ledger()
    led.append(h100_node("h0"), h100_node("h1", labels={"zone": "a"}))
    return led


def test_claims_no_node_could_take_are_parked_until_the_fleet_changes(ledger):
    ledger.append(*[claim(f"never-{i}", gpus=8, node_selector={"zone": "nowhere"}) for i in range(50)])
    ledger.append(claim("other", gpus=1, models=["H100"], at=1.0))
    ledger.decide(1.0)
    assert set(ledger.state.parked) == {f"never-{i}" for i in range(50)}
    ledger.append(claim("later", gpus=1, models=["H100"], at=2.0))
    assert [c.claim_id for c in queue_order(ledger.state)] == ["later"]
    timer_pass = ledger.decide(3.0, check_timers=True, node_timeout_s=1e9)
    assert {d.claim_id for d in timer_pass} == {"later"}  # the parked claims cost nothing
    ledger.append(h100_node("h2", labels={"zone": "nowhere"}, at=4.0))  # the fleet changed
    assert not ledger.state.parked
    placed = [d.claim_id for d in ledger.decide(4.0) if isinstance(d, ev.ClaimAllocated)]
    assert placed == ["never-0"]


def test_a_claim_with_a_reason_that_waiting_clears_is_not_parked(ledger):
    ledger.append(*[claim(f"fill-{i}", gpus=8, models=["H100"]) for i in range(2)])
    ledger.append(claim("waits", gpus=8, models=["H100"], at=1.0))
    ledger.decide(1.0)
    assert ledger.state.claims["waits"].reasons[0].code == "no-free-gpu"
    assert "waits" in ledger.state.queue and not ledger.state.parked


def test_a_parked_claim_holds_no_node_when_it_starves():
    ledger = Ledger()
    ledger.append(h100_node("h0"), claim("never", gpus=8, node_selector={"zone": "nowhere"}))
    ledger.decide(1.0)
    ledger.append(claim("small", gpus=1, models=["H100"], at=1000.0))
    decisions = ledger.decide(1000.0, starvation_after_s=300)
    assert "small" in {d.claim_id for d in decisions if isinstance(d, ev.ClaimAllocated)}


def test_parking_survives_a_snapshot(ledger):
    ledger.append(claim("never", gpus=8, node_selector={"zone": "nowhere"}), claim("free", gpus=1))
    ledger.decide(1.0)
    ledger.append(claim("waits", gpus=1, at=2.0))
    restored = from_snapshot(to_snapshot(ledger.state, compact=True))
    assert set(restored.parked) == {"never"} and set(restored.queue) == {"waits"}


def test_a_claim_pending_past_the_limit_ends_with_its_reasons(ledger):
    ledger.append(claim("never", gpus=8, node_selector={"zone": "nowhere"}, at=0.0))
    ledger.append(claim("young", gpus=8, node_selector={"zone": "nowhere"}, at=60.0))
    ledger.decide(60.0)
    waited_for = list(ledger.state.claims["never"].reasons)
    assert not ledger.decide(99.0, check_timers=True, node_timeout_s=1e9, pending_expire_after_s=100)
    [expired] = ledger.decide(101.0, check_timers=True, node_timeout_s=1e9, pending_expire_after_s=100)
    assert isinstance(expired, ev.AllocationRejected) and expired.claim_id == "never"
    assert expired.code == "pending-expired" and expired.reasons[1:] == waited_for
    assert "pending for 101s" in expired.reasons[0].message
    never = ledger.state.claims["never"]
    assert never.status == "rejected" and never.reasons[0].code == "pending-expired"
    assert set(ledger.state.pending) == {"young"}


def test_pending_never_expires_when_the_limit_is_off(ledger):
    ledger.append(claim("never", gpus=8, node_selector={"zone": "nowhere"}))
    ledger.decide(1.0)
    assert not ledger.decide(1e7, check_timers=True, node_timeout_s=1e9)


def test_the_waiting_index_keeps_only_claims_still_pending(ledger):
    waiting = WaitingIndex()
    for round_ in range(6):
        batch = [claim(f"r{round_}-{i}", gpus=8, models=["H100"], cpu_milli=round_, at=float(round_))
                 for i in range(40)]
        ledger.append(*batch)
        ledger.decide(float(round_), waiting=waiting)
        ledger.append(*[ev.ClaimReleased(claim_id=c.claim.claim_id, at=float(round_)) for c in batch])
        decide(ledger.state, DecideContext(now=float(round_), waiting=waiting, node_timeout_s=1e9))
    assert not waiting.ids and not waiting.buckets and not waiting.repairs
