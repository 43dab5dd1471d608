"""A namespace's limit on claims waiting at once (`max_waiting` in its quota): a claim that cannot
be placed when first decided, in a namespace that already has that many waiting, is rejected with
`quota-waiting-exceeded` and the reasons it would have waited for; claims that fit are placed
whatever the limit, claims already waiting stay, and other namespaces are untouched."""

from __future__ import annotations

import pytest

from schemas import events as ev
from schemas.commands import SetQuota
from schemas.types import QuotaSpec, QuotaTotal, Resources
from services.quota.manifest import quota_from_document
from services.quota.quantities import QuantityError
from services.quota.validation import spec_from_command
from tests.fleet import Ledger, a100_mig_node, claim, h100_node
from tests.queue_scale.test_waiting_index import Allocator


def _limit(namespace: str, max_waiting: int, **total) -> ev.QuotaSet:
    return ev.QuotaSet(namespace=namespace, spec=QuotaSpec(total=QuotaTotal(max_waiting=max_waiting, **total)))


@pytest.fixture
def full() -> Allocator:
    """Both H100 nodes taken; a MIG node with room."""
    ledger = Ledger()
    ledger.append(h100_node("h0"), h100_node("h1"), a100_mig_node("a0"))
    ledger.append(*[claim(f"run-{i}", namespace="other", gpus=8, models=["H100"]) for i in range(2)])
    allocator = Allocator(ledger)
    allocator.decide(1.0)
    return allocator


def _outcomes(allocator: Allocator, now: float) -> dict[str, list[str]]:
    decisions = allocator.decide(now)
    out: dict[str, list[str]] = {}
    for d in decisions:
        out.setdefault(type(d).__name__, []).append(d.claim_id)
    return out


def test_claims_past_the_limit_are_rejected_with_what_they_would_wait_for(full):
    full.ledger.append(_limit("flood", 100))
    full.ledger.append(*[claim(f"q-{i}", namespace="flood", gpus=1, models=["H100"], at=2.0) for i in range(150)])
    out = _outcomes(full, 2.0)
    assert out["ClaimPending"] == [f"q-{i}" for i in range(100)]
    assert out["AllocationRejected"] == [f"q-{i}" for i in range(100, 150)]
    refused = full.ledger.state  # the claims ended, with their reasons
    assert not any(f"q-{i}" in refused.pending for i in range(100, 150))
    [rejection] = [d for d in full.ledger.events[-1][1].decisions if d.claim_id == "q-100"]
    assert rejection.code == "quota-waiting-exceeded"
    assert rejection.reasons[0].detail == {"namespace": "flood", "limit": "100"}
    assert "already has 100 claims waiting" in rejection.reasons[0].message
    assert rejection.reasons[1].code == "no-free-gpu"


def test_a_claim_that_fits_is_placed_at_the_limit_and_others_are_untouched(full):
    full.ledger.append(_limit("flood", 3))
    full.ledger.append(*[claim(f"q-{i}", namespace="flood", gpus=1, models=["H100"], at=2.0) for i in range(3)])
    full.decide(2.0)
    full.ledger.append(claim("mig", namespace="flood", gpus=1, mig_profile="1g.10gb", at=3.0),
                       claim("over", namespace="flood", gpus=1, models=["H100"], at=3.0),
                       *[claim(f"o-{i}", namespace="other", gpus=1, models=["H100"], at=3.0) for i in range(5)])
    out = _outcomes(full, 3.0)
    assert out["ClaimAllocated"] == ["mig"]
    assert out["AllocationRejected"] == ["over"]
    assert out["ClaimPending"] == [f"o-{i}" for i in range(5)]


def test_lowering_the_limit_keeps_the_claims_already_waiting(full):
    full.ledger.append(*[claim(f"q-{i}", namespace="flood", gpus=1, models=["H100"], at=2.0) for i in range(10)])
    full.decide(2.0)
    full.ledger.append(_limit("flood", 2), claim("late", namespace="flood", gpus=1, models=["H100"], at=3.0))
    assert _outcomes(full, 3.0) == {"AllocationRejected": ["late"]}
    assert len([c for c in full.ledger.state.pending if c.startswith("q-")]) == 10
    assert not full.decide(4.0, timers=True, starvation_after_s=1e9)  # they wait on, unchanged


def test_no_limit_by_default(full):
    full.ledger.append(_limit("flood", None, requests=Resources(vram_mib=10**9)))
    full.ledger.append(*[claim(f"q-{i}", namespace="flood", gpus=1, models=["H100"], at=2.0) for i in range(300)])
    assert set(_outcomes(full, 2.0)) == {"ClaimPending"}


def test_the_quota_command_and_manifest_take_max_waiting():
    assert spec_from_command(SetQuota(namespace="team-a", max_waiting=500), {}).total.max_waiting == 500
    assert spec_from_command(SetQuota(namespace="team-a"), {}).total.max_waiting is None
    with pytest.raises(QuantityError) as refused:
        spec_from_command(SetQuota(namespace="team-a", max_waiting=-1), {})
    assert refused.value.field == "max_waiting"
    doc = {"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUResourceQuota",
           "metadata": {"name": "q", "namespace": "team-a"}, "spec": {"total": {"maxWaiting": 40}}}
    assert quota_from_document(doc)[0].max_waiting == 40


def _gang(gang_id: str, members: int, size: int | None = None, namespace: str = "flood", at: float = 3.0) -> list:
    return [claim(f"{gang_id}-{m}", namespace=namespace, gang_id=gang_id, gang_size=size or members, gpus=4,
                  models=["H100"], at=at) for m in range(members)]


def test_a_gang_counts_one_waiting_claim_per_member_and_is_refused_whole(full):
    full.ledger.append(_limit("flood", 5))
    full.ledger.append(*[claim(f"q-{i}", namespace="flood", gpus=1, models=["H100"], at=2.0) for i in range(3)])
    full.decide(2.0)
    full.ledger.append(*_gang("big", 3))  # 3 waiting + 3 members > 5
    out = _outcomes(full, 3.0)
    assert out == {"AllocationRejected": ["big-0", "big-1", "big-2"]}
    [rejection, *_] = full.ledger.events[-1][1].decisions
    assert rejection.code == "quota-waiting-exceeded"
    assert rejection.reasons[0].detail == {"namespace": "flood", "limit": "5", "gang": "big", "members": 3}
    assert "gang big: its 3 members not yet waiting would bring namespace flood to 6 claims waiting" in \
        rejection.reasons[0].message
    assert rejection.reasons[1].code == "gang-unplaceable"  # what it would have waited for
    full.ledger.append(*_gang("small", 2, at=4.0))  # 3 + 2 = 5: it waits
    assert _outcomes(full, 4.0) == {"ClaimPending": ["small-0", "small-1"]}
    full.ledger.append(claim("late", namespace="flood", gpus=1, models=["H100"], at=5.0))
    assert _outcomes(full, 5.0) == {"AllocationRejected": ["late"]}  # the gang's members count: 5 waiting
    assert not full.decide(6.0, timers=True, starvation_after_s=1e9)  # the waiting gang stays


def test_an_incomplete_gang_is_counted_as_its_members_arrive(full):
    full.ledger.append(_limit("flood", 3))
    full.ledger.append(*_gang("g", 2, size=4))
    assert _outcomes(full, 3.0) == {"ClaimPending": ["g-0", "g-1"]}  # 2 of 4: waits, 2 counted
    full.ledger.append(*[claim(f"g-{m}", namespace="flood", gang_id="g", gang_size=4, gpus=4, models=["H100"],
                               at=4.0) for m in (2, 3)])
    decisions = full.decide(4.0, timers=True, starvation_after_s=1e9)  # (a gang that waits is tried again
    out = {}  # on the tick, or when room frees)
    for d in decisions:
        out.setdefault(type(d).__name__, []).append(d.claim_id)
    # complete, unplaceable: 2 waiting + 2 new members > 3
    assert out == {"AllocationRejected": ["g-0", "g-1", "g-2", "g-3"]}  # all of it, the 2 waiting too


def test_a_gang_that_fits_is_placed_whatever_the_limit(full):
    full.ledger.append(_limit("flood", 0))
    full.ledger.append(*[claim(f"m-{m}", namespace="flood", gang_id="m", gang_size=2, gpus=1,
                               mig_profile="1g.10gb", at=3.0) for m in range(2)])
    assert _outcomes(full, 3.0) == {"ClaimAllocated": ["m-0", "m-1"]}
