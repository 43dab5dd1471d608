"""Seed 004's pool rules and seed 001's contiguous policy through the allocator's decision core:
spread-first slots, MIG with time-slicing, Ignored devices, and policy contiguous."""

from __future__ import annotations

import pytest

from schemas import events as ev
from schemas.types import DeviceInfo, PoolSpec
from tests.fleet import Ledger, claim, h100_node


def allocated(decisions):
    return {d.claim_id: d for d in decisions if isinstance(d, ev.ClaimAllocated)}


def pending(decisions):
    return {d.claim_id: d for d in decisions if isinstance(d, ev.ClaimPending)}


def mig_node(name="m0", instances=3, profile="1g.10gb"):
    devices = [DeviceInfo(uuid=f"GPU-{name}", index=0, model="A100", memory_mib=81920, mig_enabled=True)]
    devices += [DeviceInfo(uuid=f"MIG-{name}-{j}", index=0, mig_index=j, model="A100", memory_mib=10240,
                           mig_profile=profile) for j in range(instances)]
    return ev.NodeRegistered(node=name, devices=devices, cpu_milli=64000, memory_mib=512 * 1024)


def ledger_with(*events):
    ledger = Ledger()
    ledger.append(*events)
    return ledger


def cards_of(decision):
    return [g.index if g.mig_index < 0 else g.mig_index for g in decision.grants]


@pytest.mark.parametrize("policy", ["gpuledger", "fgd", "binpack", "spread"])
def test_time_sliced_shares_spread_over_cards_before_stacking(policy):
    """Issue 15: three 250m claims in a pool all landed on card 0."""
    ledger = ledger_with(h100_node("h0", gpus=4, islands=1),
                         ev.PoolCreated(pool=PoolSpec(name="ts", slices_per_unit=4)))
    for i in range(5):
        ledger.append(claim(f"c{i}", gpu_milli=250, pool="ts"))
    got = allocated(ledger.decide(1.0, policy=policy))
    assert [cards_of(got[f"c{i}"]) for i in range(5)] == [[0], [1], [2], [3], [0]]


def test_a_whole_device_claim_in_a_time_sliced_pool_gets_slots_on_distinct_cards():
    ledger = ledger_with(h100_node("h0", gpus=4, islands=1),
                         ev.PoolCreated(pool=PoolSpec(name="ts", slices_per_unit=2)),
                         claim("first", gpus=1, pool="ts"), claim("pair", gpus=2, pool="ts"))
    got = allocated(ledger.decide(1.0))
    assert cards_of(got["first"]) == [0] and cards_of(got["pair"]) == [1, 2]
    assert {g.milli for d in got.values() for g in d.grants} == {500}  # a slot is 1/2 of a card


def test_mig_with_time_slicing_hands_out_every_slot():
    """Issue 15: 3 MIG instances x slicesPerUnit 2 report 6 slots, yet a 4th MIG claim and any
    share claim stayed pending."""
    pool = PoolSpec(name="mig", unit="MIG", mig_profile="1g.10gb", slices_per_unit=2)
    ledger = ledger_with(mig_node(), ev.PoolCreated(pool=pool))
    for i in range(5):
        ledger.append(claim(f"m{i}", mig_profile="1g.10gb", pool="mig"))
    ledger.append(claim("share", gpu_milli=500, pool="mig"), claim("seventh", mig_profile="1g.10gb", pool="mig"))
    decisions = ledger.decide(1.0)
    got = allocated(decisions)
    assert [cards_of(got[f"m{i}"]) for i in range(5)] == [[0], [1], [2], [0], [1]]  # spread, then stack
    assert cards_of(got["share"]) == [2]
    assert "seventh" in pending(decisions)  # 6 slots, all taken


def test_a_share_in_a_mig_pool_without_a_profile_takes_any_of_its_instances():
    ledger = ledger_with(mig_node(instances=1, profile="3g.40gb"),
                         ev.PoolCreated(pool=PoolSpec(name="mig", unit="MIG", slices_per_unit=2)),
                         claim("a", gpu_milli=500, pool="mig"), claim("b", gpu_milli=500, pool="mig"))
    assert set(allocated(ledger.decide(1.0))) == {"a", "b"}


def test_an_ignored_device_gets_no_new_slot():
    ledger = ledger_with(h100_node("h0", gpus=2, islands=1),
                         ev.PoolCreated(pool=PoolSpec(name="ts", slices_per_unit=2)),
                         ev.DeviceIgnoreChanged(node="h0", uuid="GPU-h0-0", ignored=True))
    for i in range(3):
        ledger.append(claim(f"c{i}", gpu_milli=500, pool="ts"))
    decisions = ledger.decide(1.0)
    assert [cards_of(d) for d in allocated(decisions).values()] == [[1], [1]] and "c2" in pending(decisions)


def test_a_contiguous_claim_waits_for_one_island_and_says_so():
    ledger = ledger_with(h100_node("h0", gpus=4, islands=2), claim("one", gpus=1), claim("other", gpus=1))
    ledger.decide(1.0)  # cards 0 and 1: island 0 full, island 1 whole
    ledger.append(claim("busy", gpus=1))
    ledger.decide(2.0)  # card 2
    ledger.append(ev.ClaimReleased(claim_id="other"))  # free now: card 1 (island 0), card 3 (island 1)
    ledger.append(claim("contig", gpus=2, policy="contiguous"), claim("loose", gpus=2))
    decisions = ledger.decide(3.0, check_timers=True)
    assert pending(decisions)["contig"].reasons[0].code == "not-contiguous"
    assert "one NVLink island" in pending(decisions)["contig"].reasons[0].message
    assert sorted(cards_of(allocated(decisions)["loose"])) == [1, 3]  # without the policy it spans


def test_a_contiguous_claim_is_placed_when_an_island_has_room():
    ledger = ledger_with(h100_node("h0", gpus=4, islands=2), claim("contig", gpus=2, policy="contiguous"))
    [decision] = ledger.decide(1.0)
    assert len({g.index // 2 for g in decision.grants}) == 1
