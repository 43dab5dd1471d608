"""A claim that waits is tried in pass after pass (thousands a pass at saturation); its needs and
rule arguments are kept in the allocator's `needs_memo` (core/place.py) instead of being built
anew each time, and built again when the fleet's models change."""

from __future__ import annotations

from schemas import events as ev
from services.allocator.core import place
from tests.fleet import Ledger, a100_mig_node, claim, h100_node


def counting_needs(monkeypatch) -> list:
    built: list = []
    real = place.needs_for

    def needs_for(spec, fleet_models):
        built.append(spec.claim_id)
        return real(spec, fleet_models)

    monkeypatch.setattr(place, "needs_for", needs_for)
    return built


def test_a_waiting_claim_builds_its_needs_once(monkeypatch):
    memo: dict = {}
    led = Ledger()
    led.append(h100_node("h0"), claim("big", gpus=8))
    led.decide(1.0, needs_memo=memo)
    led.append(claim("w", gpus=1))
    built = counting_needs(monkeypatch)
    for now in (2.0, 3.0, 4.0):
        led.decide(now, needs_memo=memo)
    assert led.state.claims["w"].status == "pending"
    assert built == ["w"]


def test_needs_follow_the_fleet():
    """A memory-sized claim's needs name the fleet's models: a node of a new model is seen."""
    memo: dict = {}
    led = Ledger()
    led.append(h100_node("h0"), claim("big", gpus=8))
    led.decide(1.0, needs_memo=memo)
    led.append(claim("m", gpus=1, gpu_memory_gib=40))
    led.decide(2.0, needs_memo=memo)
    assert led.state.claims["m"].status == "pending"
    led.append(a100_mig_node("a0"))  # one A100 not in MIG mode: 80 GiB
    decisions = led.decide(3.0, needs_memo=memo)
    placed = [d for d in decisions if isinstance(d, ev.ClaimAllocated)]
    assert [(d.claim_id, d.node) for d in placed] == [("m", "a0")]


def test_the_memo_keeps_to_waiting_claims():
    memo: dict = {}
    led = Ledger()
    led.append(h100_node("h0"), claim("big", gpus=8))
    led.decide(1.0, needs_memo=memo)
    led.append(*(claim(f"w{i}", gpus=1) for i in range(100)))
    led.decide(2.0, needs_memo=memo)
    assert len(memo) == 101  # and `big`'s, built when it was placed
    led.append(*(ev.ClaimReleased(claim_id=f"w{i}", at=3.0) for i in range(100)))
    led.decide(4.0, needs_memo=memo, check_timers=True)  # the timer pass forgets ended claims
    assert memo == {}  # none is pending
