"""What-if on a recorded log: the same settings reproduce history; other settings change it."""

from __future__ import annotations

from schemas import events as ev
from services.allocator.core.decide import DecideContext
from services.allocator.whatif import compare
from tests.fleet import Ledger, claim, h100_node


def recorded_log() -> list:
    led = Ledger()
    led.append(h100_node("n0"), h100_node("n1"))
    for i in range(6):
        led.append(claim(f"c{i}", gpus=(i % 3) + 2, models=["H100"], at=float(i)))
        led.decide(float(i), policy="binpack")
    led.append(ev.ClaimReleased(claim_id="c0", at=10.0))
    led.decide(10.0, policy="binpack")
    return led.events


def test_the_same_policy_and_settings_reproduce_every_outcome():
    result = compare(recorded_log(), DecideContext(now=0.0, policy="binpack", check_timers=False))
    assert result["claims_with_another_outcome"] == 0
    assert result["actual"] == result["what_if"]


def test_spreading_would_have_left_the_whole_node_claim_waiting():
    led = Ledger()
    led.append(h100_node("n0"), h100_node("n1"))
    for i, gpus in enumerate((4, 4, 8)):
        led.append(claim(f"c{i}", gpus=gpus, models=["H100"], at=float(i)))
        led.decide(float(i), policy="binpack")
    result = compare(led.events, DecideContext(now=0.0, policy="spread", check_timers=False))
    assert result["actual"]["claims_allocated"] == 3
    assert result["what_if"]["claims_allocated"] == 2 and result["what_if"]["still_pending"] == 1
    assert result["examples"] == [{"claim_id": "c2", "actual": "allocated", "what_if": "pending"}]
