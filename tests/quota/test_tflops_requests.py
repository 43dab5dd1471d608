"""Claims that ask for TFLOPS (the seed's `tflops` requests): each GPU gets the share of a card that
provides them, quota counts what is held, per-workload TFLOPS limits reject what can never fit."""

from __future__ import annotations

import msgspec
import pytest

from schemas import events as ev
from schemas.types import ClaimSpec
from services.claim.validation import ClaimInvalid, validate_claim
from tests.quota.builders import add, claim, fleet, node, of_type, quota, step

H100_TFLOPS = 989.0


def test_a_tflops_request_gets_the_share_that_provides_it_and_quota_counts_it():
    state = fleet(node("n1", 1), quota("team-a", requests_tflops=250))
    add(state, *(claim(f"t{i}", gpu_tflops=100, at=2.0 + i) for i in range(3)))
    decisions = step(state)
    grants = of_type(decisions, ev.ClaimAllocated)
    assert [g.claim_id for g in grants] == ["t0", "t1"]
    assert grants[0].grants[0].milli == 102  # ceil(100 / 989 * 1000): a bit more than asked, never less
    assert grants[0].tflops == pytest.approx(102 / 1000 * H100_TFLOPS, abs=1e-3)
    [waiting] = of_type(decisions, ev.ClaimPending)
    assert waiting.reasons[0].message.startswith("quota exceeded in namespace team-a for tflops: requested 100.9")


def test_with_memory_too_the_larger_share_wins():
    state = fleet(node("n1", 1))
    add(state, claim("both", gpu_tflops=100, gpu_memory_gib=40))
    [allocated] = of_type(step(state), ev.ClaimAllocated)
    assert allocated.grants[0].milli == 500 and allocated.vram_mib == 40 * 1024


def test_the_per_workload_tflops_limit_rejects_and_more_than_a_card_cannot_be_placed():
    state = fleet(node("n1", 2), quota("team-a", single_max_requests_tflops=100))
    add(state, claim("big", gpu_tflops=150), claim("huge", namespace="team-b", gpu_tflops=1200, at=3.0))
    rejected = {r.claim_id: r for r in of_type(step(state), ev.AllocationRejected)}
    assert rejected["big"].code == "quota-single-exceeded"
    assert rejected["huge"].code == "no-such-shape"
    assert rejected["huge"].reasons[0].message == ("no GPU model in the fleet can hold 1200 TFLOPS on the "
                                                   "devices the claim allows")


@pytest.mark.parametrize("fields, field", [
    (dict(gpus=0, gpu_tflops=10, cpu_milli=100), "gpus"),
    (dict(gpu_milli=500, gpu_tflops=10), "gpu_tflops"),
    (dict(mig_profile="1g.10gb", gpu_tflops=10), "mig_profile"),
])
def test_tflops_requests_combine_only_with_memory(fields, field):
    with pytest.raises(ClaimInvalid) as err:
        validate_claim(ClaimSpec(claim_id="c", namespace="team-a", **fields))
    assert err.value.field == field


def test_tflops_requests_are_bounded_by_the_contract():
    with pytest.raises(msgspec.ValidationError, match="gpu_tflops"):
        msgspec.convert({"claim_id": "c", "namespace": "a", "gpu_tflops": 1e9}, ClaimSpec)
