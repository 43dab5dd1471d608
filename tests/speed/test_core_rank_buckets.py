"""The rank-ordered room buckets (`State.ranked`, read by `State.groups_by_first_rank`, the scan's
candidates at 10,000 nodes) stay exactly the room index's groups, ordered by first rank, as the
fleet changes: allocations and releases (decide's tentative ones rolled back too), nodes leaving
and coming back, devices faulting. Checked for every kind of need, with the lazy merge and with
the sort (pure, no server)."""

from __future__ import annotations

import random

import pytest

import bench.decide as bench_decide
from ledger import state as ledger_state
from schemas import events as ev
from schemas.types import DeviceInfo

# (models, pool, MIG profile, count, milli) of the needs the bench's claim mix makes, and more
QUERIES = [(models, "", mig, count, milli)
           for models in (None, frozenset({"H100"}), frozenset({"A100", "L40S"}))
           for mig, count, milli in (("", 1, 100), ("", 1, 500), ("", 1, 1000), ("", 2, 1000),
                                     ("", 8, 1000), ("", 4, 875), ("1g.10gb", 1, 1000), ("*", 1, 1000))]


def _check_buckets(state) -> None:
    for group in state.groups.values():
        assert group.filed == group.rank0
    for models, pool, mig, count, milli in QUERIES:
        expected = sorted(state.groups_with_room(models, pool, mig, count, milli), key=lambda g: g.rank0)
        got = list(state.groups_by_first_rank(models, pool, mig, count, milli))
        assert [g.rank0 for g in got] == [g.rank0 for g in expected]
        assert all(a is b for a, b in zip(got, expected))


def _shake(bench, rng: random.Random) -> None:
    """A node leaves or comes back, or a device faults or heals."""
    state = bench.state
    node = state.nodes[rng.choice(sorted(state.nodes))]
    if rng.random() < 0.5:
        condition = "Ready" if node.condition != "Ready" else "HasFaulted"
        bench.fold(ev.NodeConditionChanged(node=node.name, condition=condition, at=bench.now))
    else:
        unit = rng.choice(node.units)
        health = "Healthy" if unit.health != "Healthy" else "Faulted"
        bench.fold(ev.DeviceHealthChanged(node=node.name, uuid=unit.uuid, health=health, at=bench.now))


@pytest.mark.parametrize("lazy_from", [0, 10**9])  # always merged lazily / always sorted at once
def test_rank_ordered_buckets_follow_the_fleet(monkeypatch, lazy_from):
    monkeypatch.setattr(ledger_state, "LAZY_MERGE_FROM", lazy_from)
    rng = random.Random(5)
    bench = bench_decide.Bench(60, "gpuledger", seed=3)
    _check_buckets(bench.state)
    for step in range(120):
        for _ in range(rng.randint(0, 6)):
            bench.arrive()
        bench.step()  # decide (tentative allocations, rolled back), then the batch folded
        if step % 3 == 0:
            bench.release_some(target_pending=rng.randint(0, 20))
        if rng.random() < 0.3:
            _shake(bench, rng)
        _check_buckets(bench.state)
    assert len(bench.state.holding) > 20  # the fleet was busy, not empty


def test_a_group_filed_twice_is_read_once(monkeypatch):
    """A group with room of two accepted kinds (two models on one node) is one candidate."""
    devices = [DeviceInfo(uuid=f"GPU-{i}", index=i, model="H100" if i < 4 else "L40S", memory_mib=46068)
               for i in range(8)]
    bench = bench_decide.Bench(0, "gpuledger", seed=1)
    bench.fold(ev.NodeRegistered(node="mixed", devices=devices, cpu_milli=64_000, memory_mib=1 << 18, at=0.0))
    for lazy_from in (0, 10**9):
        monkeypatch.setattr(ledger_state, "LAZY_MERGE_FROM", lazy_from)
        for milli in (1000, 250):
            assert len(list(bench.state.groups_by_first_rank(None, "", "", 1, milli))) == 1
