"""Concurrent claims racing for the last units of quota, through the real claim, allocator and
quota services on a real nats-server: exactly the allowed number succeed."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes, request, running

H100_VRAM_MIB = 81559  # what the helper's H100 reports


@pytest.fixture
async def stack(fresh_nats):
    # two allocators: a split brain racing on the fenced decision subject must not over-grant either
    async with running(fresh_nats.url, "quota", "claim", "allocator", "allocator") as contexts:
        nc = await nats.connect(fresh_nats.url)
        log = JetStreamEventLog(nc)
        await register_nodes(log, h100_node("node-a"), h100_node("node-b"))
        yield nc, log
        await nc.close()


async def submit_all(nc, claims: list[dict]) -> list[dict]:
    async def one(spec):
        reply = await request(nc, subjects.command("claim.submit"), {"claim": spec},
                              timeout=20)
        assert reply["ok"], reply
        return reply["data"]

    return await asyncio.gather(*(one(spec) for spec in claims))


async def settled(nc, claim_ids: list[str]) -> list[dict]:
    """Claim views once no claim waits without a reason (allocated, ended, or pending with one)."""
    for _ in range(100):
        views = [(await request(nc, subjects.query("claim.get"), {"claim_id": c}))["data"] for c in claim_ids]
        if all(v["status"] != "pending" or v.get("reasons") for v in views):
            return views
        await asyncio.sleep(0.05)
    return views


async def test_exactly_the_allowed_number_of_racing_claims_get_the_last_quota(stack):
    nc, log = stack
    reply = await request(nc, subjects.command("quota.set"),
                          {"namespace": "team-a", "requests_vram": f"{3 * H100_VRAM_MIB}Mi"})
    assert reply["ok"], reply
    ids = [f"race-{i}" for i in range(12)]
    await submit_all(nc, [{"claim_id": c, "namespace": "team-a", "gpus": 1} for c in ids])
    views = await settled(nc, ids)
    allocated = [v for v in views if v["status"] == "allocated"]
    waiting = [v for v in views if v["status"] == "pending"]
    assert len(allocated) == 3 and len(waiting) == 9
    limit = f"{3 * H100_VRAM_MIB / 1024:.2f}Gi"
    explain = (await request(nc, subjects.query("claim.explain"), {"claim_id": waiting[0]["claim_id"]}))["data"]
    assert explain["reasons"][0]["message"] == (
        f"quota exceeded in namespace team-a for vram: requested {H100_VRAM_MIB / 1024:.2f}Gi, "
        f"limit {limit}, in use {limit}")
    granted = [d for s in [e async for e in log.read()] if isinstance(s.event, ev.DecisionBatch)
               for d in s.event.decisions if isinstance(d, ev.ClaimAllocated)]
    assert len(granted) == 3  # no void or duplicate grant reached the log either
    status = (await request(nc, subjects.query("quota.status"), {"namespace": "team-a"}))["data"]["quotas"][0]
    assert status["used"]["workers"] == 3 and status["used"]["requests_vram_mib"] == 3 * H100_VRAM_MIB


async def test_a_released_unit_goes_to_exactly_one_waiting_claim(stack):
    nc, _ = stack
    await request(nc, subjects.command("quota.set"), {"namespace": "team-b", "max_workers": 2})
    ids = [f"w-{i}" for i in range(6)]
    await submit_all(nc, [{"claim_id": c, "namespace": "team-b", "gpus": 1} for c in ids])
    views = await settled(nc, ids)
    holders = [v["claim_id"] for v in views if v["status"] == "allocated"]
    assert len(holders) == 2
    await request(nc, subjects.command("claim.release"), {"claim_id": holders[0]})
    for _ in range(100):
        views = await settled(nc, ids)
        if sum(v["status"] == "allocated" for v in views) == 2:
            break
        await asyncio.sleep(0.05)
    # a claim submitted after the release is decided in a pass that saw the release: a second
    # grant to team-b would have been made by then
    await submit_all(nc, [{"claim_id": "after", "namespace": "team-z", "gpus": 0, "cpu_milli": 100}])
    assert (await settled(nc, ["after"]))[0]["status"] == "allocated"
    views = await settled(nc, ids)
    assert [v["status"] for v in views].count("allocated") == 2
    assert [v["status"] for v in views].count("released") == 1


async def test_fractional_claims_race_for_a_tflops_quota(stack):
    nc, _ = stack
    await request(nc, subjects.command("quota.set"), {"namespace": "team-c", "requests_tflops": 989 * 2})
    ids = [f"half-{i}" for i in range(10)]
    await submit_all(nc, [{"claim_id": c, "namespace": "team-c", "gpus": 1, "gpu_milli": 500} for c in ids])
    views = await settled(nc, ids)
    assert sum(v["status"] == "allocated" for v in views) == 4  # 4 x 494.5 TFLOPS = 1978


async def test_borrowers_race_within_the_cohort_and_the_lender_reclaims(stack):
    nc, log = stack
    vram = f"{2 * H100_VRAM_MIB}Mi"
    await request(nc, subjects.command("quota.set"), {"namespace": "team-a", "requests_vram": vram,
                                                       "parent": "org", "borrowing_limit_vram": "unlimited"})
    await request(nc, subjects.command("quota.set"), {"namespace": "team-b", "requests_vram": vram, "parent": "org"})
    ids = [f"a-{i}" for i in range(8)]
    await submit_all(nc, [{"claim_id": c, "namespace": "team-a", "gpus": 1} for c in ids])
    views = await settled(nc, ids)
    assert sum(v["status"] == "allocated" for v in views) == 4  # its own 2 + team-b's unused 2
    reply = await request(nc, subjects.command("claim.submit"), {
        "claim": {"claim_id": "b-1", "namespace": "team-b", "gpus": 1}, "wait_seconds": 5})
    assert reply["data"]["status"] == "allocated"
    events = [s.event async for s in log.read()]
    reclaimed = [d for e in events if isinstance(e, ev.DecisionBatch) for d in e.decisions
                 if isinstance(d, ev.QuotaReclaimed)]
    assert [(r.borrower, r.lender, r.parent, r.beneficiary) for r in reclaimed] == [
        ("team-a", "team-b", "org", "b-1")]
    evicted = [d for e in events if isinstance(e, ev.DecisionBatch) for d in e.decisions
               if isinstance(d, ev.ClaimEvicted)]
    assert [(d.claim_id, d.rule) for d in evicted] == [(reclaimed[0].claim_id, "quota-reclaim")]
