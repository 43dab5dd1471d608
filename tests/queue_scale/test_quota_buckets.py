"""Claims under a quota that limits use, and claims in a pool, share buckets of claims alike like
every other claim (services/allocator/core/waiting.py): a member behind one that failed in a pass
is told what that one was told only while its namespace's use (its cohort tree's), the shapes
explained and the room (no eviction or reclaim tried) are as they were then, and is tried
otherwise. The index decides exactly as the walk of every claim, over random workloads with
standalone quotas of every kind of limit, the default quota, a cohort tree with borrowing and
reclaim, a waiting limit, pools (one time-sliced, one with restricted access), gangs, releases
and faults; and a pass tries one claim of each kind of a namespace's thousand waiting, not each."""

from __future__ import annotations

import random

import pytest

from schemas import events as ev
from schemas.types import PoolSpec, QuotaSingle, QuotaSpec, QuotaTotal, Resources
from tests.fleet import H100_MIB, Ledger, a100_mig_node, claim, h100_node
from services.allocator.core import decide as decide_module
from services.allocator.core.queue import walk_queue
from tests.queue_scale.reference_walk import reference_walk
from tests.queue_scale.test_same_decisions import _run
from tests.queue_scale.test_waiting_index import Allocator, _allocated, tried  # noqa: F401 (a fixture)

GI = 1024
NAMESPACES = ("team-a", "team-b", "team-c", "team-d", "team-e")
SHAPES = ({"gpus": 1, "models": ["H100"]}, {"gpus": 2, "models": ["H100"]}, {"gpus": 4, "models": ["H100"]},
          {"gpus": 1, "models": ["H100"], "pool": "sliced"}, {"gpus": 2, "models": ["H100"], "pool": "sliced"},
          {"gpus": 1, "models": ["H100"], "pool": "private"}, {"gpus": 1, "mig_profile": "1g.10gb"},
          {"gpus": 1, "mig_profile": "3g.40gb"}, {"gpus": 1, "gpu_milli": 500},
          {"gpus": 8, "models": ["H100"], "limit_vram_gib": 900})


def _fleet() -> list:
    return [h100_node("h0"), h100_node("h1", labels={"zone": "a"}), h100_node("h2", labels={"zone": "b"}),
            a100_mig_node("a0"),
            ev.PoolCreated(pool=PoolSpec(name="sliced", slices_per_unit=2, node_selector={"zone": "a"})),
            ev.PoolCreated(pool=PoolSpec(name="private", node_selector={"zone": "b"},
                                         access_namespaces=["team-a", "team-c", "team-e"])),
            *_quotas(random.Random(0))]


def _quotas(rng: random.Random) -> list:
    vram = rng.choice((160, 320, 640))
    return [
        ev.QuotaSet(namespace="team-a", spec=QuotaSpec(total=QuotaTotal(requests=Resources(vram_mib=vram * GI)))),
        ev.QuotaSet(namespace="team-b", spec=QuotaSpec(total=QuotaTotal(max_workers=rng.choice((3, 6, 12)),
                                                                       max_waiting=rng.choice((20, 60))))),
        ev.QuotaSet(namespace="org", spec=QuotaSpec(total=QuotaTotal(requests=Resources(vram_mib=800 * GI)))),
        ev.QuotaSet(namespace="team-c", spec=QuotaSpec(
            parent="org", total=QuotaTotal(requests=Resources(vram_mib=240 * GI)),
            borrowing_limit=Resources(tflops=None, vram_mib=400 * GI))),
        ev.QuotaSet(namespace="team-e", spec=QuotaSpec(
            parent="org", total=QuotaTotal(requests=Resources(vram_mib=320 * GI)),
            single=QuotaSingle(max_gpu_count=rng.choice((2, 4))))),
        ev.QuotaDefaultSet(spec=QuotaSpec(total=QuotaTotal(limits=Resources(vram_mib=rng.choice((400, 900)) * GI)))),
    ]


def _step(rng: random.Random, i: int, now: float, ledger) -> list:
    roll = rng.random()
    if roll < 0.55:
        shape, namespace = rng.choice(SHAPES), rng.choice(NAMESPACES)
        return [claim(f"c{i}-{k}", namespace=namespace, at=now, priority=rng.choice((0, 0, 0, 1)), **shape)
                for k in range(rng.randint(1, 14))]
    if roll < 0.6:
        size, namespace = rng.choice((2, 3)), rng.choice(NAMESPACES)
        return [claim(f"g{i}-{m}", namespace=namespace, gang_id=f"g{i}", gang_size=size, gpus=2, models=["H100"],
                      at=now) for m in range(size)]
    if roll < 0.85:
        live = [c for c in ledger.state.claims.values() if c.status in ("allocated", "bound", "pending")]
        ended = rng.sample(live, min(len(live), rng.randint(1, 5)))
        return [ev.ClaimReleased(claim_id=c.claim_id, at=now) for c in ended]
    if roll < 0.9:
        return _quotas(rng)[:rng.choice((1, 2, 6))]
    if roll < 0.95:
        node = rng.choice(("h0", "h1", "h2"))
        return [ev.DeviceHealthChanged(node=node, uuid=f"GPU-{node}-{rng.randrange(8)}",
                                       health=rng.choice(("Faulted", "Healthy")), at=now)]
    return []


@pytest.mark.parametrize("seed", range(10))
def test_claims_under_quotas_and_in_pools_are_decided_as_by_the_full_walk(seed, monkeypatch):
    reference = _run(seed, 70, False, monkeypatch, fleet=_fleet, step=_step)
    indexed = _run(seed, 70, True, monkeypatch, fleet=_fleet, step=_step)
    for n, (a, b) in enumerate(zip(reference, indexed)):
        assert a == b, f"seed {seed}, pass {n}"
    decided = [d for batch in reference for d in batch]
    assert len(decided) > 100
    codes = {r.code for d in decided if isinstance(d, (ev.ClaimPending, ev.AllocationRejected)) for r in d.reasons}
    assert {"quota-exceeded"} <= codes  # the workload reached its quotas


WAITING = 1000


@pytest.fixture
def limited() -> Allocator:
    return _limited()


def _limited() -> Allocator:
    """A namespace at its quota (8 H100s' VRAM, in use) with WAITING claims of 5 kinds waiting, every
    one told why; the fleet full but for a MIG node."""
    ledger = Ledger()
    ledger.append(*[h100_node(f"h{i}") for i in range(4)], a100_mig_node("a0"))
    ledger.append(ev.QuotaSet(namespace="limited", spec=QuotaSpec(total=QuotaTotal(
        requests=Resources(vram_mib=8 * H100_MIB)))))
    ledger.append(claim("run", namespace="limited", gpus=8, models=["H100"]),
                  *[claim(f"o-{i}", namespace="other", gpus=8, models=["H100"]) for i in range(3)])
    allocator = Allocator(ledger)
    allocator.decide(1.0)
    ledger.append(*[claim(f"q-{i}", namespace="limited", at=2.0, **KINDS[i % len(KINDS)]) for i in range(WAITING)])
    while any(not ledger.state.claims[c].reasons for c in ledger.state.pending):
        allocator.decide(2.0)
    return allocator


KINDS = ({"gpus": 1, "models": ["H100"]}, {"gpus": 2, "models": ["H100"]}, {"gpus": 1, "mig_profile": "1g.10gb"},
         {"gpus": 4, "models": ["H100"]}, {"gpus": 1, "gpu_milli": 500})


def test_a_timer_pass_tries_one_quota_limited_claim_of_each_kind(limited, tried):
    assert not limited.decide(3.0, timers=True, starvation_after_s=1e9)  # the reasons did not change
    assert tried == [f"q-{i}" for i in range(len(KINDS))]  # not 1,000


def test_a_free_in_another_namespace_tries_one_claim_of_each_kind(limited, tried):
    limited.ledger.append(ev.ClaimReleased(claim_id="o-0", at=3.0))  # a node of H100s free: over quota still
    assert not limited.decide(3.0)
    assert tried == [f"q-{i}" for i in range(len(KINDS))]  # (a kind of any model: the MIG and the fraction)


def test_a_free_in_its_namespace_places_what_the_quota_then_allows_as_the_walk_would(limited, tried, monkeypatch):
    walked = _limited()
    for allocator in (walked, limited):
        allocator.ledger.append(ev.ClaimReleased(claim_id="run", at=3.0))  # 8 H100s of quota and a node free
    monkeypatch.setattr(decide_module, "walk_queue", reference_walk({}))
    expected = walked.decide(3.0)
    monkeypatch.setattr(decide_module, "walk_queue", walk_queue)
    tried.clear()
    assert limited.decide(3.0) == expected
    assert len(_allocated(expected)) >= 7  # within 8 H100s' VRAM
    assert len(tried) < 40  # claims alike behind one that failed are tried while the use changes
