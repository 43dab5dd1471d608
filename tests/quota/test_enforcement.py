"""Quota enforced in the allocator's one decision: single limits reject, totals keep claims waiting."""

from __future__ import annotations

from schemas import events as ev

from tests.quota.builders import add, claim, fleet, node, of_type, quota, step


def allocated(decisions) -> list[str]:
    return [d.claim_id for d in of_type(decisions, ev.ClaimAllocated)]


def test_without_a_quota_everything_fits():
    state = fleet(node("n1", 4))
    add(state, claim("c1", gpus=4))
    assert allocated(step(state)) == ["c1"]


def test_a_per_workload_vram_limit_rejects_with_the_seed_message():
    state = fleet(node("n1", 4), quota("team-a", single_max_requests_vram="64Gi"))
    add(state, claim("c1", gpus=1))
    [rejected] = step(state)
    assert isinstance(rejected, ev.AllocationRejected) and rejected.code == "quota-single-exceeded"
    reason = rejected.reasons[0]
    assert reason.message == "quota exceeded in namespace team-a for vram: requested 80Gi, limit 64Gi"
    assert reason.detail == {"namespace": "team-a", "resource": "vram", "requested": "80Gi",
                             "limit": "64Gi", "scope": "single"}
    assert state.claims["c1"].status == "rejected"


def test_a_per_workload_gpu_count_rejects():
    state = fleet(node("n1", 8), quota("team-a", single_max_gpu_count=2))
    add(state, claim("c1", gpus=4), claim("c2", gpus=2, at=3.0))
    decisions = step(state)
    assert allocated(decisions) == ["c2"]
    [rejected] = of_type(decisions, ev.AllocationRejected)
    assert "gpu count: requested 4, limit 2" in rejected.reasons[0].message


def test_a_claim_limit_above_the_single_max_limit_rejects():
    state = fleet(node("n1", 2), quota("team-a", single_max_limits_vram="100Gi"))
    add(state, claim("c1", gpus=1, limit_vram_gib=120))
    [rejected] = step(state)
    assert "vram limit: requested 120Gi, limit 100Gi" in rejected.reasons[0].message


def test_the_namespace_total_keeps_the_last_claim_waiting_with_a_reason():
    state = fleet(node("n1", 8), quota("team-a", requests_vram="160Gi"))
    add(state, claim("c1"), claim("c2", at=3.0), claim("c3", at=4.0))
    decisions = step(state)
    assert allocated(decisions) == ["c1", "c2"]
    [pending] = of_type(decisions, ev.ClaimPending)
    assert pending.claim_id == "c3"
    assert pending.reasons[0].code == "quota-exceeded"
    assert pending.reasons[0].message == ("quota exceeded in namespace team-a for vram: requested 80Gi, "
                                          "limit 160Gi, in use 160Gi")
    assert state.usage["team-a"].vram_mib == 160 * 1024


def test_a_fractional_claim_counts_its_share_of_the_device_tflops():
    state = fleet(node("n1", 1), quota("team-a", requests_tflops=989))  # one H100's TFLOPS
    add(state, claim("h1", gpu_milli=500), claim("h2", gpu_milli=500, at=3.0), claim("h3", gpu_milli=250, at=4.0))
    decisions = step(state)
    assert allocated(decisions) == ["h1", "h2"]
    first = of_type(decisions, ev.ClaimAllocated)[0]
    assert first.tflops == 494.5 and first.vram_mib == 40 * 1024
    assert of_type(decisions, ev.ClaimPending)[0].claim_id == "h3"


def test_max_workers_counts_claims_not_gpus():
    state = fleet(node("n1", 8), quota("team-a", max_workers=2))
    add(state, claim("c1", gpus=3), claim("c2", gpus=3, at=3.0), claim("c3", gpus=1, at=4.0))
    decisions = step(state)
    assert allocated(decisions) == ["c1", "c2"]
    assert "workers: requested 1, limit 2, in use 2" in of_type(decisions, ev.ClaimPending)[0].reasons[0].message


def test_total_limits_count_the_claims_declared_limit():
    state = fleet(node("n1", 4), quota("team-a", limits_vram="200Gi"))
    add(state, claim("c1", limit_vram_gib=150), claim("c2", limit_vram_gib=100, at=3.0))
    decisions = step(state)
    assert allocated(decisions) == ["c1"]
    assert "vram limit: requested 100Gi, limit 200Gi, in use 150Gi" in of_type(decisions, ev.ClaimPending)[0].reasons[0].message


def test_lowering_a_quota_below_use_evicts_nothing_and_new_claims_wait_until_use_drops():
    state = fleet(node("n1", 8), quota("team-a", requests_vram="320Gi"))
    add(state, *(claim(f"c{i}", at=2.0 + i) for i in range(4)))
    assert len(allocated(step(state))) == 4
    add(state, quota("team-a", requests_vram="160Gi"), claim("late", at=20.0))
    decisions = step(state, now=30.0)
    assert not of_type(decisions, ev.ClaimEvicted)
    assert [d.claim_id for d in of_type(decisions, ev.ClaimPending)] == ["late"]
    assert sum(c.holds_devices for c in state.claims.values()) == 4
    for i in range(3):  # use drops to 80Gi: the late claim fits again
        add(state, ev.ClaimReleased(claim_id=f"c{i}", at=31.0))
    assert allocated(step(state, now=32.0)) == ["late"]


def test_deleting_a_quota_lifts_the_limit():
    state = fleet(node("n1", 4), quota("team-a", requests_vram="80Gi"))
    add(state, claim("c1"), claim("c2", at=3.0))
    assert allocated(step(state)) == ["c1"]
    add(state, ev.QuotaDeleted(namespace="team-a", at=5.0))
    assert allocated(step(state)) == ["c2"]


def test_another_namespace_is_not_charged():
    state = fleet(node("n1", 4), quota("team-a", requests_vram="80Gi"))
    add(state, claim("a1"), claim("b1", namespace="team-b", gpus=2, at=3.0))
    assert allocated(step(state)) == ["a1", "b1"]
    assert state.usage["team-a"].gpus == 1 and state.usage["team-b"].gpus == 2
