"""The waiting index decides exactly as the full walk did: the same decisions, in the same order,
pass after pass, over random workloads with many claims alike (buckets of many members), timer
passes, starvation, priorities, quotas, gangs, releases, faults and passes cut at a small decision
budget (with the walk's stop at the budget: the backfill past it is a change of its own,
test_backfill.py)."""

from __future__ import annotations

import random

import pytest

from schemas import events as ev
from schemas.types import QuotaSpec, QuotaTotal, Resources
from services.allocator.core import decide as decide_module
from services.allocator.core.decide import DecideContext, decide
from services.allocator.core.queue import walk_queue
from services.allocator.core.waiting import WaitingIndex
from tests.fleet import Ledger, a100_mig_node, claim, h100_node
from tests.queue_scale.reference_walk import reference_walk

SHAPES = ({"gpus": 1, "models": ["H100"]}, {"gpus": 4, "models": ["H100"]}, {"gpus": 8, "models": ["H100"]},
          {"gpus": 1, "mig_profile": "1g.10gb"}, {"gpus": 1, "mig_profile": "3g.40gb"},
          {"gpus": 1, "gpu_milli": 500}, {"gpus": 0, "cpu_milli": 60000},
          {"gpus": 2, "models": ["H100"], "node_selector": {"zone": "nowhere"}})


def _fleet() -> list:
    return [h100_node("h0"), h100_node("h1", labels={"zone": "a"}), a100_mig_node("a0")]


def _step(rng: random.Random, i: int, now: float, ledger: Ledger) -> list:
    roll = rng.random()
    if roll < 0.55:
        return [claim(f"c{i}-{k}", namespace=rng.choice(("team-a", "team-b")), at=now,
                      priority=rng.choice((0, 0, 0, 1)), **rng.choice(SHAPES)) for k in range(rng.randint(1, 12))]
    if roll < 0.6:
        size = rng.choice((2, 3))
        return [claim(f"g{i}-{m}", gang_id=f"g{i}", gang_size=size, gpus=4, models=["H100"], at=now)
                for m in range(size)]
    if roll < 0.85:
        live = [c for c in ledger.state.claims.values() if c.status in ("allocated", "bound", "pending")]
        ended = rng.sample(live, min(len(live), rng.randint(1, 4)))
        return [ev.ClaimReleased(claim_id=c.claim_id, at=now) for c in ended]
    if roll < 0.9:
        return [ev.QuotaSet(namespace="team-b", spec=QuotaSpec(total=QuotaTotal(
            requests=Resources(vram_mib=rng.choice((200_000, 400_000, 2_000_000))))), at=now)]
    if roll < 0.95:
        return [ev.DeviceHealthChanged(node="h0", uuid=f"GPU-h0-{rng.randrange(8)}",
                                       health=rng.choice(("Faulted", "Healthy")), at=now)]
    return []


def _run(seed: int, steps: int, new: bool, monkeypatch, fleet=_fleet, step=_step) -> list:
    rng = random.Random(seed)
    ledger = Ledger()
    ledger.append(*fleet())
    waiting, failed_at, memo, needs = WaitingIndex(), {}, {}, {}
    walk = walk_queue if new else reference_walk(failed_at)
    out = []
    now = 0.0
    for i in range(steps):
        now += rng.choice((0.5, 1.0, 40.0))
        ledger.append(*step(rng, i, now, ledger))
        timers = rng.random() < 0.25
        monkeypatch.setattr(decide_module, "walk_queue", walk)
        ctx = DecideContext(now=now, check_timers=timers, node_timeout_s=1e12, stale_after_s=1e12,
                            starvation_after_s=60.0, max_decisions=rng.choice((512, 512, 7)),
                            memo=memo, needs_memo=needs, waiting=waiting if new else None,
                            backfill_past_budget=False)  # as the walk did: stop at the budget
        decisions = decide(ledger.state, ctx)
        out.append(decisions)
        if decisions:
            ledger.append(ev.DecisionBatch(decisions=decisions, at=now))
    if new:
        assert not waiting.repairs
    return out


@pytest.mark.parametrize("seed", range(8))
def test_the_index_decides_as_the_full_walk(seed, monkeypatch):
    reference = _run(seed, 60, False, monkeypatch)
    indexed = _run(seed, 60, True, monkeypatch)
    for n, (a, b) in enumerate(zip(reference, indexed)):
        assert a == b, f"seed {seed}, pass {n}"
    assert sum(map(len, reference)) > 50  # the workload decided things
